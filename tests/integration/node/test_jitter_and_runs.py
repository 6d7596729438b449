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
from shardcron.audit import run_audit
from shardcron.client.errors import InvalidRequest
from shardcron.dev.testing.cluster import wait_until
from shardcron.model import TickStatus
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.spec.job import job_from_dict
from shardcron.store import make_engine
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from tests.support.clusters import sqlite_cluster

pytestmark = pytest.mark.cluster

SHARDS = 2


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    with sqlite_cluster(
        etcd_server, tmp_path_factory, "jitter-node", SHARDS, ["solo"], extra_args=["--allow-shell"]
    ) as (c, [n], url):
        yield c, n, url


def cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcron", *args, "--server", node.address], capture_output=True, text=True, timeout=60
    )


def test_a_jittered_job_starts_each_slot_at_its_offset_once_and_audits_clean(cluster):
    _, node, url = cluster
    jid = f"jit-{uuid.uuid4().hex[:6]}"
    jitter_ms = 1500
    with Client(node.address) as c:
        stored = c.put_job(
            job_from_dict(
                {"id": jid, "every": "2s", "jitter": "1500ms", "executor": {"kind": "shell", "command": "true"}}
            )
        )
        assert stored.jitter_ms == jitter_ms and c.get_job(jid).jitter_ms == jitter_ms
        done = wait_until(
            lambda: (f := [t for t in c.list_ticks(jid) if t.status.is_final]) and len(f) >= 5 and f,
            40,
            0.5,
            what="five finished ticks",
        )
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
        report = run_audit(engine, from_ms=slots[0] - 1, to_ms=slots[-1], job_id=jid, now_ms=slots[-1] + 10_000)
    finally:
        engine.dispose()
    assert report.clean(), report.to_dict()
    assert report.per_job[jid].slots_checked == len(slots)


@pytest.mark.parametrize(
    "jitter_ms, says",
    [
        (60_000, "not shorter than the schedule's shortest gap (1m)"),
        (90_000, "not shorter"),
        (-1, "expected a duration"),
    ],
)
def test_the_api_refuses_a_bad_jitter_naming_the_field(cluster, jitter_ms, says):
    _, node, _ = cluster
    with grpc.insecure_channel(node.address) as ch:
        stub = pb_grpc.SchedulerStub(ch)
        job = pb.Job(
            id="bad-jitter", schedule=pb.Schedule(interval_ms=60_000), noop=pb.NoopExecutor(), jitter_ms=jitter_ms
        )
        with pytest.raises(grpc.RpcError) as e:
            stub.PutJob(pb.PutJobRequest(job=job), timeout=10)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "jitter" in e.value.details() and says in e.value.details(), e.value.details()
    # The Python client sends a model Job; the server's check is the one that counts.
    with Client(node.address) as c, pytest.raises(InvalidRequest) as e:
        c.put_job(replace(job_from_dict({"id": "bad-jitter", "every": "1m"}), jitter_ms=jitter_ms))
    assert "jitter" in str(e.value)


@pytest.mark.parametrize(
    "jitter, says",
    [("abc", "expected a duration such as 30s"), ("1m", "not shorter than the schedule's shortest gap (1m)")],
)
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


# -- last runs in the store: one statement per page, the same count as the pure definition ---------

SEQUENCES = {  # oldest first; the slot of the i-th row is T + i s
    "never": [],
    "ok": ["succeeded"],
    "failing": ["failed", "failed", "abandoned"],
    "recovered": ["failed", "failed", "succeeded"],
    "relapsed": ["succeeded", "failed", "skipped", "failed"],
    "skips": ["failed", "succeeded", "skipped", "skipped"],
    "running": ["succeeded", "failed", "running"],
    "ahead": ["failed", "claimed-ahead"],  # a row claimed for a slot after now: not the last tick yet
    "waiting": ["succeeded", "failed", "claimed"],  # claimed, past its slot (jitter): it has not run yet
}
# The deadlines some rows missed (job -> row index -> kinds): only the last tick's are the job's.
MISSED = {
    "failing": {2: ("deadline", "heartbeat")},
    "recovered": {0: ("start_deadline",)},  # an older tick's miss: not the job's now
    "skips": {3: ("start_deadline",)},
}


def test_last_runs_match_the_definition_in_one_statement_per_page(store_engine):
    from sqlalchemy import event

    from shardcron.rules.runs import failures_in_a_row
    from shardcron.store import ensure_shards, put_job, raise_fence
    from shardcron.store.schema import ticks
    from shardcron.store.tick_reads import last_runs

    t0, now = 1_700_000_000_000, 1_700_000_100_000
    ensure_shards(store_engine, 1)
    raise_fence(store_engine, 0, 1, "n", t0)
    ids = [f"job-{i:03d}" for i in range(300)]  # many jobs without ticks too: one statement for them all
    for jid in [*SEQUENCES, *ids]:
        put_job(store_engine, job_from_dict({"id": jid, "every": "1h"}), shard=0, fence=1, node_id="n", now_ms=t0)
    rows = []
    for jid, seq in SEQUENCES.items():
        for i, status in enumerate(seq):
            at = now + 5_000 if status == "claimed-ahead" else t0 + i * 1000
            rows.append(
                {
                    "job_id": jid,
                    "scheduled_at_ms": at,
                    "shard": 0,
                    "fence": 1,
                    "node_id": "n",
                    "status": "claimed" if status == "claimed-ahead" else status,
                    "attempt": 1,
                    "manual": False,
                    **{  # every row names every column: one executemany takes the first row's columns
                        f"{kind}_missed_at_ms": at + 2000 if kind in MISSED.get(jid, {}).get(i, ()) else None
                        for kind in ("start_deadline", "deadline", "heartbeat")
                    },
                }
            )
    with store_engine.begin() as conn:
        conn.execute(ticks.insert(), rows)

    statements = []
    listen = lambda *a, **k: statements.append(a[2])  # noqa: E731
    event.listen(store_engine, "before_cursor_execute", listen)
    try:
        got = last_runs(store_engine, [*SEQUENCES, *ids], now_ms=now)
    finally:
        event.remove(store_engine, "before_cursor_execute", listen)
    assert len([s for s in statements if "ticks" in s]) == 1, statements
    for jid, seq in SEQUENCES.items():
        past = [TickStatus(s) for s in seq if s not in ("claimed-ahead", "claimed")]
        want_at = t0 + (len(past) - 1) * 1000 if past else None
        missed = MISSED.get(jid, {}).get(len(past) - 1, ())
        assert got[jid] == (want_at, past[-1] if past else None, failures_in_a_row(reversed(past)), missed), jid
    assert got["failing"].failures_in_a_row == 3 and got["relapsed"].failures_in_a_row == 2
    assert got["failing"].missed_deadlines == ("deadline", "heartbeat") and got["recovered"].missed_deadlines == ()
    assert all(got[j] == (None, None, 0, ()) for j in ids)


# -- next and last run through the API and the CLI -------------------------------------------------


def test_get_job_and_the_cli_show_next_slot_last_tick_and_failures_in_a_row_then_recovery(cluster, tmp_path):
    _, node, _ = cluster
    jid = f"flaky-{uuid.uuid4().hex[:6]}"
    ok_file = tmp_path / "ok"
    with Client(node.address) as c:
        c.put_job(
            job_from_dict(
                {
                    "id": jid,
                    "every": "1s",
                    "jitter": "500ms",
                    "executor": {"kind": "shell", "command": f"test -e {ok_file}"},
                }
            )
        )
        job, runs = wait_until(
            lambda: (r := c.get_job_runs(jid)) and r[1].failures_in_a_row >= 3 and r,
            30,
            0.3,
            what="three failures in a row",
        )
        # A 1 s job's newest tick may be running at the moment of the answer.
        assert job.jitter_ms == 500 and runs.last_status in (TickStatus.FAILED, TickStatus.RUNNING)
        assert runs.next_slot_ms > runs.last_scheduled_at_ms and runs.next_slot_ms % 1000 == 0
        assert runs.next_start_ms == runs.next_slot_ms + jitter_offset_ms(jid, runs.next_slot_ms, 500)
        assert runs.next_start_ms > runs.as_of_ms
        # The count is the ticks' own: failed ticks since the last success (none yet).
        ticks = [t for t in c.list_ticks(jid, limit=200) if t.scheduled_at_ms < runs.last_scheduled_at_ms]
        assert runs.failures_in_a_row == sum(t.status is TickStatus.FAILED for t in ticks) + (
            runs.last_status is TickStatus.FAILED
        )
        listed = dict((j.id, r) for j, r in c.list_jobs_runs())
        assert listed[jid].failures_in_a_row >= 3 and listed[jid].next_slot_ms is not None

        out = cli(node, "jobs", "get", jid)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        header, row = out.stdout.splitlines()
        assert header.split()[-3:] == ["NEXT", "LAST", "FAILS"]
        assert (" failed " in row or " running " in row) and "+ jitter)" in row and int(row.split()[-1]) >= 3, row
        as_json = json.loads(cli(node, "jobs", "get", jid, "--json").stdout)["runs"]
        assert as_json["last_status"] in ("failed", "running") and as_json["failures_in_a_row"] >= 3
        assert as_json["next_start_ms"] - as_json["next_slot_ms"] == jitter_offset_ms(jid, as_json["next_slot_ms"], 500)

        ok_file.write_text("")  # the job recovers
        _, runs = wait_until(
            lambda: (r := c.get_job_runs(jid)) and r[1].last_status is TickStatus.SUCCEEDED and r,
            30,
            0.3,
            what="a success",
        )
        assert runs.failures_in_a_row == 0
        c.pause_job(jid)
        _, paused = c.get_job_runs(jid)
        assert paused.next_slot_ms is None and paused.next_start_ms is None
    out = cli(node, "jobs", "list")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    row = next(r for r in out.stdout.splitlines() if r.startswith(jid + " "))
    assert row.split()[-1] == "0" and "paused" in row, row
    listed = json.loads(cli(node, "jobs", "list", "--json").stdout)
    mine = next(j for j in listed if j["id"] == jid)
    assert mine["runs"]["failures_in_a_row"] == 0 and mine["runs"]["next_slot_ms"] is None
