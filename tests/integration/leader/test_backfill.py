"""Backfill on real node processes over real etcd and real databases: one row per slot of the range,
across a SIGKILL of the leader half-way; the slots already recorded are not run again; a clean audit;
bad requests refused by the CLI and the API naming what is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import grpc
import pytest

from shardcron import Client
from shardcron.audit import run_audit
from shardcron.cli.common import parse_time_ms
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.model import BackfillState, TickStatus
from shardcron.sharding import shard_for
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from shardcron.store import make_engine
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from tests.support.clusters import TTL
from tests.support.tick_rows import rows_in_range

pytestmark = pytest.mark.cluster

S = 1000


def parse_ms(text: str) -> int:
    return parse_time_ms(text, "test")


def cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcron", *args, "--server", node.address],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_backfill_of_500_slots_survives_a_kill_9_of_the_leader_with_one_row_per_slot(make_cluster, fresh_db_url):
    db = fresh_db_url("postgresql")
    c = make_cluster(db, shards=4)
    c.add("n0")
    c.add("n1")
    leaders = c.wait_balanced({"n0", "n1"}, timeout_s=60)
    job_id = f"bf-{uuid.uuid4().hex[:6]}"
    shard = shard_for(job_id, 4)
    victim = leaders[shard]
    survivor = ({"n0", "n1"} - {victim}).pop()
    now_s = int(time.time())
    from_ms, to_ms = (now_s - 900) * S, (now_s - 400) * S  # 500 slots, all before the job existed
    rate = 40.0
    engine = make_engine(db)
    try:
        with Client([c.nodes[survivor].address]) as client:  # asked of the other node: forwarded to the leader
            client.put_job(job_from_dict({"id": job_id, "every": "1s", "executor": {"kind": "noop"}}))
            bf = client.backfill_job(job_id, from_ms, to_ms, rate_per_s=rate)
            assert (bf.state, bf.planned, bf.shard) == (BackfillState.ACTIVE, 500, shard)
            wait_until(
                lambda: len(rows_in_range(engine, job_id, from_ms, to_ms)) >= 200,
                60,
                0.05,
                what="the leader to be half-way",
            )
            c.nodes[victim].kill()
            wait_until(lambda: c.leaders()[shard] == survivor, 2 * TTL + 20, what="the successor to lead")
            final = wait_until(
                lambda: (b := client.get_backfill(bf.id)).state is not BackfillState.ACTIVE and b,
                90,
                0.5,
                what="the backfill to end",
            )
        assert (final.state, final.planned, final.done, final.skipped) == (BackfillState.DONE, 500, 500, 0), final
        rows = wait_until(
            lambda: (
                (r := rows_in_range(engine, job_id, from_ms, to_ms))
                and all(TickStatus(x.status).is_final for x in r)
                and r
            ),
            30,
            0.2,
            what="every backfilled slot to finish",
        )
        # Exactly one row per slot of the range (the key allows no second), and every one ran.
        assert [r.scheduled_at_ms for r in rows] == list(range(from_ms, to_ms, S))
        assert {TickStatus(r.status) for r in rows} == {TickStatus.SUCCEEDED}
        by_node = {n: [r for r in rows if r.node_id == n] for n in (victim, survivor)}
        assert by_node[victim] and by_node[survivor], "the leader began it and its successor finished it"
        # The killed leader started its slots in order and never faster than the rate (a lower bound: no speed
        # is asserted, only that pacing held). Rows it left claimed were re-claimed, so they carry the survivor.
        mine = [r for r in by_node[victim] if r.started_at_ms is not None]
        assert [r.started_at_ms for r in mine] == sorted(r.started_at_ms for r in mine)
        assert mine[-1].started_at_ms - mine[0].started_at_ms >= (len(mine) - 1) * 1000 / rate - 50
        report = run_audit(engine, from_ms=from_ms - 1, to_ms=to_ms - 1)
        assert report.clean(), report.to_dict()
        assert report.per_job[job_id].backfilled == 500 and report.per_job[job_id].slots_checked == 0
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def solo(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("backfill-node")
    url = f"sqlite:///{d}/store.db"
    c = Cluster(etcd_server.endpoints, url, f"/t{uuid.uuid4().hex[:12]}", 2, 4, str(d))
    n = c.add("solo", extra_args=["--allow-shell"])
    try:
        c.wait_all_led(60)
        yield n, url
    finally:
        c.stop_all()
    text = n.log_text()
    assert "Traceback" not in text, f"the node logged a traceback:\n{text[-6000:]}"


def test_a_backfill_runs_only_the_slots_without_a_row_and_the_audit_stays_clean(solo):
    node, url = solo
    job_id = f"bf-{uuid.uuid4().hex[:6]}"
    with Client(node.address) as client:
        job = client.put_job(job_from_dict({"id": job_id, "every": "1s", "executor": {"kind": "noop"}}))
        live = wait_until(
            lambda: len(r := [t for t in client.list_ticks(job_id) if t.status.is_final]) >= 3 and r,
            30,
            0.2,
            what="three live ticks",
        )
        first_live = min(t.scheduled_at_ms for t in live)
        from_ms = (job.active_since_ms // S - 20) * S  # 20-odd slots before the job existed, then live ones
        to_ms = max(t.scheduled_at_ms for t in live)  # excluded: the range ends in the past
        out = cli(
            node,
            "jobs",
            "backfill",
            job_id,
            "--from",
            str(from_ms),
            "--to",
            str(to_ms),
            "--rate",
            "100/s",
            "--wait",
            "--json",
        )
        assert out.returncode == 0, out.stderr
        done = json.loads(out.stdout)
        owed = (first_live - from_ms) // S
        assert (done["state"], done["planned"], done["done"]) == ("done", owed, owed), done
        listed = cli(node, "jobs", "backfills", job_id)
        assert listed.returncode == 0 and done["id"] in listed.stdout and "done" in listed.stdout, listed
    engine = make_engine(url)
    try:
        rows = rows_in_range(engine, job_id, from_ms, to_ms)
        assert [r.scheduled_at_ms for r in rows] == list(range(from_ms, to_ms, S))  # once each, none twice
        before = {r.scheduled_at_ms: r.claimed_at_ms for r in rows if r.scheduled_at_ms >= first_live}
        assert all(v is not None and v < done["created_at_ms"] for v in before.values())  # the live rows, untouched
        report = run_audit(engine, from_ms=from_ms - 1, to_ms=to_ms - S)
        assert report.clean(), report.to_dict()
        assert report.per_job[job_id].backfilled == owed
    finally:
        engine.dispose()
    again = cli(node, "jobs", "backfill", job_id, "--from", str(from_ms), "--to", str(to_ms), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["planned"] == 0, again  # nothing left to run


@pytest.mark.parametrize(
    "overlap, statuses",
    [
        pytest.param("skip", [TickStatus.SUCCEEDED] + [TickStatus.SKIPPED] * 5, id="skip"),
        pytest.param("allow", [TickStatus.SUCCEEDED] * 6, id="allow"),
    ],
)
def test_the_backfills_overlap_decides_while_its_first_slot_still_runs(solo, overlap, statuses):
    """Six yearly slots (no live run comes due meanwhile) at 10/s, each run taking 5 s: with skip the five
    started while the first goes on are recorded skipped, with allow all six run side by side."""
    node, url = solo
    job_id = f"bf-{overlap}-{uuid.uuid4().hex[:6]}"
    from_ms, to_ms = parse_ms("2021-01-01T00:00:00Z"), parse_ms("2026-01-02T00:00:00Z")
    with Client(node.address) as client:
        client.put_job(
            job_from_dict(
                {
                    "id": job_id,
                    "cron": "0 0 1 1 *",
                    "timeout": "30s",
                    "executor": {"kind": "shell", "command": "sleep 5"},
                }
            )
        )
        bf = client.backfill_job(job_id, from_ms, to_ms, rate_per_s=10, overlap=overlap)
        assert bf.planned == 6
        final = wait_until(
            lambda: (b := client.get_backfill(bf.id)).state is not BackfillState.ACTIVE and b,
            60,
            0.3,
            what="the backfill to end",
        )
        assert (final.state, final.done, final.skipped) == (BackfillState.DONE, 6, statuses.count(TickStatus.SKIPPED))
    engine = make_engine(url)
    try:
        rows = wait_until(
            lambda: (
                (r := rows_in_range(engine, job_id, from_ms, to_ms))
                and all(TickStatus(x.status).is_final for x in r)
                and r
            ),
            30,
            0.2,
            what="the runs to end",
        )
        assert [TickStatus(r.status) for r in rows] == statuses
        report = run_audit(engine, from_ms=from_ms - 1, to_ms=to_ms - 1)  # the skips had a run going: no finding
        assert report.clean(), report.to_dict()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "args, expected",
    [
        pytest.param(
            ["--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"],
            "--to: must be after --from",
            id="reversed",
        ),
        pytest.param(["--rate", "0"], "--rate: must be a positive rate", id="rate 0"),
        pytest.param(["--rate", "fast"], "--rate: expected a rate such as 10/s", id="rate not a number"),
        pytest.param(["--overlap", "maybe"], "--overlap: 'maybe' is not one of: skip, allow", id="overlap"),
        pytest.param(["--from", "yesterday"], "--from: expected ISO-8601", id="time"),
        pytest.param(
            ["--from", "2020-01-01T00:00:00Z"],
            "from_ms/to_ms: the range holds more than 1,000,000 slots",
            id="too many slots",
        ),
        pytest.param(["--to", "2999-01-01T00:00:00Z"], "to_ms: must not be in the future", id="future"),
        pytest.param(["--job", "no-such-job"], "job 'no-such-job' not found", id="unknown job"),
    ],
)
def test_bad_backfills_are_refused_naming_what_is_wrong(solo, args, expected):
    node, _ = solo
    job_id = "bf-every-second"
    with Client(node.address) as client:
        client.put_job(job_from_dict({"id": job_id, "every": "1s", "executor": {"kind": "noop"}}))
    opts = {"--from": "2026-01-01T00:00:00Z", "--to": "2026-01-01T00:01:00Z"}
    if "--job" in args:
        job_id = args[1]
        args = []
    for k, v in zip(args[::2], args[1::2], strict=True):
        opts[k] = v
    out = cli(node, "jobs", "backfill", job_id, *[x for kv in opts.items() for x in kv])
    assert out.returncode == 1, out
    assert expected in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_the_api_names_the_field_and_get_backfill_of_an_unknown_id_is_not_found(solo):
    node, _ = solo
    with Client(node.address) as client:
        client.put_job(job_from_dict({"id": "bf-every-second", "every": "1s", "executor": {"kind": "noop"}}))
    with grpc.insecure_channel(node.address) as ch:
        stub = pb_grpc.SchedulerStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.BackfillJob(pb.BackfillJobRequest(id="bf-every-second", from_ms=0, to_ms=60_000), timeout=30)
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "rate_per_s" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            stub.GetBackfill(pb.GetBackfillRequest(id="bf-nope"), timeout=30)
        assert e.value.code() is grpc.StatusCode.NOT_FOUND and "bf-nope" in e.value.details()


def test_a_backfill_skips_the_slots_the_jobs_calendars_exclude(solo):
    node, url = solo
    job_id = f"bf-cal-{uuid.uuid4().hex[:6]}"
    calendar = f"quiet-{uuid.uuid4().hex[:6]}"
    with Client(node.address) as client:
        now = int(time.time()) * S
        from_ms, to_ms = now - 60 * S, now - 40 * S
        client.put_calendar(
            parse_calendar(calendar, {"exclude_ranges": [{"from": from_ms + 5 * S, "to": from_ms + 10 * S}]})
        )
        client.put_job(
            job_from_dict({"id": job_id, "every": "1s", "executor": {"kind": "noop"}, "calendars": [calendar]})
        )
        out = cli(
            node,
            "jobs",
            "backfill",
            job_id,
            "--from",
            str(from_ms),
            "--to",
            str(to_ms),
            "--rate",
            "100/s",
            "--wait",
            "--json",
        )
        assert out.returncode == 0, out.stderr
        done = json.loads(out.stdout)
        assert (done["state"], done["planned"], done["done"]) == ("done", 15, 15), done
    engine = make_engine(url)
    try:
        allowed = [at for at in range(from_ms, to_ms, S) if not from_ms + 5 * S <= at < from_ms + 10 * S]
        assert [r.scheduled_at_ms for r in rows_in_range(engine, job_id, from_ms, to_ms)] == allowed
    finally:
        engine.dispose()
