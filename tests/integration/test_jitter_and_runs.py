"""Jitter and next/last run on one real node (real etcd, real SQLite, shell allowed): jittered starts,
one row per slot, a clean audit, and bad jitter refused by the API, the CLI and a job file."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import replace

import grpc
import pytest

from shardcron import Client
from shardcron.api.client import InvalidRequest
from shardcron.audit import run_audit
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.jobspec import job_from_dict
from shardcron.model import TickStatus
from shardcron.scheduling.jitter import jitter_offset_ms
from shardcron.store import make_engine
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.cluster

SHARDS = 2


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("jitter-node")
    url = f"sqlite:///{d}/store.db"
    c = Cluster(etcd_server.endpoints, url, f"/t{uuid.uuid4().hex[:12]}", SHARDS, 4, str(d))
    n = c.add("solo", extra_args=["--allow-shell"])
    try:
        c.wait_all_led(60)
        yield c, n, url
    finally:
        c.stop_all()
    text = n.log_text()
    assert "Traceback" not in text, f"the node logged a traceback:\n{text[-6000:]}"


def cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcron", *args, "--server", node.address],
                          capture_output=True, text=True, timeout=60)


def test_a_jittered_job_starts_each_slot_at_its_offset_once_and_audits_clean(cluster):
    _, node, url = cluster
    jid = f"jit-{uuid.uuid4().hex[:6]}"
    jitter_ms = 1500
    with Client(node.address) as c:
        stored = c.put_job(job_from_dict({"id": jid, "every": "2s", "jitter": "1500ms",
                                          "executor": {"kind": "shell", "command": "true"}}))
        assert stored.jitter_ms == jitter_ms and c.get_job(jid).jitter_ms == jitter_ms
        done = wait_until(lambda: (f := [t for t in c.list_ticks(jid) if t.status.is_final]) and len(f) >= 5 and f,
                          40, 0.5, what="five finished ticks")
        ticks = c.list_ticks(jid, limit=100)
    offsets = {t.scheduled_at_ms: jitter_offset_ms(jid, t.scheduled_at_ms, jitter_ms) for t in done}
    assert len(set(offsets.values())) > 1, offsets  # the offsets really differ from slot to slot
    for t in done:
        assert t.status is TickStatus.SUCCEEDED, t
        late = t.started_at_ms - t.scheduled_at_ms
        # Starts at slot + offset: never before it (the proof), and not much after it on an idle node.
        assert offsets[t.scheduled_at_ms] <= late < offsets[t.scheduled_at_ms] + 1000, (t, offsets)
    slots = sorted(t.scheduled_at_ms for t in ticks if not t.manual)
    assert len(slots) == len(set(slots))  # one row per slot
    assert all(s % 2000 == 0 for s in slots) and slots == list(range(slots[0], slots[-1] + 1, 2000))  # no gap
    engine = make_engine(url)
    try:
        report = run_audit(engine, from_ms=slots[0] - 1, to_ms=slots[-1], job_id=jid,
                           now_ms=slots[-1] + 10_000)
    finally:
        engine.dispose()
    assert report.clean(), report.to_dict()
    assert report.per_job[jid].slots_checked == len(slots)


@pytest.mark.parametrize("jitter_ms, says", [(60_000, "not shorter than the schedule's shortest gap (1m)"),
                                             (90_000, "not shorter"), (-1, "expected a duration")])
def test_the_api_refuses_a_bad_jitter_naming_the_field(cluster, jitter_ms, says):
    _, node, _ = cluster
    with grpc.insecure_channel(node.address) as ch:
        stub = pb_grpc.SchedulerStub(ch)
        job = pb.Job(id="bad-jitter", schedule=pb.Schedule(interval_ms=60_000), noop=pb.NoopExecutor(),
                     jitter_ms=jitter_ms)
        with pytest.raises(grpc.RpcError) as e:
            stub.PutJob(pb.PutJobRequest(job=job), timeout=10)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "jitter" in e.value.details() and says in e.value.details(), e.value.details()
    # The Python client sends a model Job; the server's check is the one that counts.
    with Client(node.address) as c, pytest.raises(InvalidRequest) as e:
        c.put_job(replace(job_from_dict({"id": "bad-jitter", "every": "1m"}), jitter_ms=jitter_ms))
    assert "jitter" in str(e.value)


@pytest.mark.parametrize("jitter, says", [("abc", "expected a duration such as 30s"),
                                          ("1m", "not shorter than the schedule's shortest gap (1m)")])
def test_the_cli_refuses_a_bad_jitter_naming_the_field(cluster, jitter, says):
    _, node, _ = cluster
    out = cli(node, "jobs", "put", "bad-jitter", "--every", "1m", "--noop", "--jitter", jitter)
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardcron: error: "), out.stderr
    assert "jitter" in lines[0] and says in lines[0], lines[0]


def test_jobs_put_jitter_and_get_json(cluster):
    _, node, _ = cluster
    jid = f"jit-cli-{uuid.uuid4().hex[:6]}"
    out = cli(node, "jobs", "put", jid, "--every", "1h", "--noop", "--jitter", "10m", "--paused", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["jitter"] == "600000ms"
    out = cli(node, "jobs", "get", jid, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["jitter"] == "600000ms", out.stderr
