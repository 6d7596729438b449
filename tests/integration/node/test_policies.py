"""Per-job policies on a real node: retries, overlap, timeouts, orphaned runs, catch-up.

One or two node processes over a real etcd and SQLite; executors run for
real (shell commands, HTTP calls to a sink in the test process).
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.sharding import shard_for
from shardcron.store.engine import make_engine
from shardcron.store.schema import ticks
from tests.integration.node.test_cluster import write_jobs
from tests.support.clusters import assert_no_traceback

pytestmark = pytest.mark.cluster
TTL = 4


@pytest.fixture
def sink():
    s = Sink()
    s.start()
    yield s
    s.stop()


@pytest.fixture
def node_cluster(etcd_server, etcd_prefix, tmp_path):
    made = []

    def make(jobs: list[dict], nodes: int = 1, shards: int = 2, extra: list[str] | None = None) -> Cluster:
        path = write_jobs(tmp_path / "jobs.toml", jobs)
        c = Cluster(
            etcd_server.endpoints,
            f"sqlite:///{tmp_path}/store.db",
            etcd_prefix,
            shards,
            TTL,
            str(tmp_path),
            extra_args=["--jobs", path, "--allow-shell", *(extra or [])],
        )
        for i in range(nodes):
            c.add(f"n{i}")
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop_all()
        assert_no_traceback(c)


def rows(db: str, job_id: str) -> list:
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            return conn.execute(select(ticks).where(ticks.c.job_id == job_id).order_by(ticks.c.scheduled_at_ms)).all()
    finally:
        engine.dispose()


def test_a_failing_http_job_is_retried_with_backoff_up_to_its_budget(node_cluster, sink):
    c = node_cluster(
        [
            {
                "id": "flaky",
                "every": "10s",
                "executor": {"kind": "http", "url": sink.url + "/status/500"},
                "retry": {"max_attempts": 3, "backoff": "200ms", "backoff_max": "1s"},
            }
        ]
    )
    done = wait_until(
        lambda: [r for r in rows(c.db, "flaky") if r.status == "failed"], 60, what="the job to fail for good"
    )
    tick = done[0]
    assert tick.attempt == 3 and tick.http_status == 500
    calls = [r for r in sink.requests() if r.header("idempotency-key") == f"flaky:{tick.scheduled_at_ms}"]
    assert [int(r.header("x-shardcron-attempt")) for r in calls] == [1, 2, 3]
    gaps = [b.received_at_ms - a.received_at_ms for a, b in zip(calls, calls[1:], strict=False)]
    assert gaps[0] >= 150 and gaps[1] >= 350, f"backoff doubles from 200 ms: {gaps}"


def test_overlap_skip_records_a_skipped_row_and_allow_runs_concurrently(node_cluster, tmp_path):
    c = node_cluster(
        [
            {
                "id": "slow-skip",
                "every": "1s",
                "overlap": "skip",
                "executor": {"kind": "shell", "command": "sleep 2.5"},
            },
            {
                "id": "slow-allow",
                "every": "1s",
                "overlap": "allow",
                "executor": {"kind": "shell", "command": "sleep 2.5"},
            },
        ]
    )
    skipped = wait_until(
        lambda: [r for r in rows(c.db, "slow-skip") if r.status == "skipped"],
        60,
        what="an overlapping slot to be skipped",
    )
    assert "overlap" in skipped[0].error

    # With overlap allowed, runs overlap: one starts before the previous one finished.
    def overlapping():
        done = [r for r in rows(c.db, "slow-allow") if r.status == "succeeded"]
        return any(b.started_at_ms < a.finished_at_ms for a, b in zip(done, done[1:], strict=False))

    wait_until(overlapping, 60, what="two runs of slow-allow to overlap")
    assert not [r for r in rows(c.db, "slow-allow") if r.status == "skipped"]


def test_a_job_that_runs_past_its_timeout_is_killed_and_failed(node_cluster):
    c = node_cluster(
        [{"id": "hangs", "every": "30s", "timeout": "500ms", "executor": {"kind": "shell", "command": "sleep 30"}}]
    )
    failed = wait_until(lambda: [r for r in rows(c.db, "hangs") if r.status == "failed"], 60, what="a timeout")
    assert failed[0].finished_at_ms - failed[0].started_at_ms < 10_000
    assert "timed out" in (failed[0].error or "") or "timeout" in (failed[0].error or "")


def test_orphaned_running_tick_is_retried_or_abandoned(node_cluster, tmp_path):
    marker = tmp_path / "retried"
    cmd = f'if [ "$SHARDCRON_ATTEMPT" -ge 2 ]; then touch {marker}; exit 0; fi; sleep 60'
    jobs = [
        {
            "id": "retry-me",
            "every": "20s",
            "overlap": "allow",
            "executor": {"kind": "shell", "command": cmd},
            "retry": {"max_attempts": 2, "backoff": "100ms"},
        },
        {"id": "give-up", "every": "20s", "overlap": "allow", "executor": {"kind": "shell", "command": "sleep 60"}},
    ]
    c = node_cluster(jobs, nodes=2, shards=1, extra=["--settle", "0"])
    c.wait_all_led(60)
    first = wait_until(
        lambda: (
            [r for r in rows(c.db, "retry-me") if r.status == "running"]
            and [r for r in rows(c.db, "give-up") if r.status == "running"]
        ),
        60,
        what="both jobs to be running",
    )
    assert first
    leader = c.leaders()[0]
    survivor = ({"n0", "n1"} - {leader}).pop()
    c.nodes[leader].kill()
    wait_until(lambda: c.leaders()[0] == survivor, 2 * TTL + 15, what="the survivor to lead")
    wait_until(marker.exists, 30, what="the orphaned run to be retried")
    retried = wait_until(
        lambda: [r for r in rows(c.db, "retry-me") if r.status == "succeeded"], 30, what="the retry to be recorded"
    )
    assert retried[0].attempt == 2 and retried[0].node_id == survivor
    abandoned = wait_until(
        lambda: [r for r in rows(c.db, "give-up") if r.status == "abandoned"],
        30,
        what="the orphan without retries to be abandoned",
    )
    assert "died mid-run" in abandoned[0].error


def test_catch_up_latest_runs_only_the_newest_missed_slot(node_cluster, etcd_server, etcd_prefix, tmp_path):
    jobs = [
        {"id": "latest", "every": "1s", "catchup": "latest", "executor": {"kind": "noop"}},
        {"id": "none", "every": "1s", "catchup": "none", "executor": {"kind": "noop"}},
        {"id": "all", "every": "1s", "catchup": "all", "executor": {"kind": "noop"}},
    ]
    c = node_cluster(jobs, nodes=1, shards=1)
    c.wait_all_led(60)
    wait_until(lambda: len(rows(c.db, "all")) >= 2, 30, what="ticks")
    c.nodes["n0"].kill()
    down_at = time.time()
    # Wait out the old lease so the restarted node must catch up ~TTL of slots.
    wait_until(lambda: c.leaders()[0] is None, 2 * TTL + 10, what="the dead leader's key to expire")
    assert time.time() - down_at > 1
    c.add("n0b")
    wait_until(lambda: c.leaders()[0] == "n0b", 60, what="the new node to lead")
    wait_until(lambda: rows(c.db, "all")[-1].scheduled_at_ms > time.time() * 1000 - 1500, 30, what="fresh ticks")
    by = {j: rows(c.db, j) for j in ("latest", "none", "all")}
    slots = [r.scheduled_at_ms for r in by["all"]]
    assert all(b - a == 1000 for a, b in zip(slots, slots[1:], strict=False)), "catch-up all leaves no gap"
    for job in ("latest", "none"):
        s = [r.scheduled_at_ms for r in by[job]]
        assert all(b - a == 1000 for a, b in zip(s, s[1:], strict=False)), f"{job}: every slot has a row"
    assert any(r.status == "skipped" and "catch-up" in r.error for r in by["latest"])
    assert any(r.status == "skipped" for r in by["none"])
    assert shard_for("all", 1) == 0


def test_catch_up_all_runs_every_missed_slot_in_turn_even_with_overlap_skip(node_cluster, tmp_path):
    c = node_cluster(
        [
            {
                "id": "quick",
                "every": "1s",
                "catchup": "all",
                "overlap": "skip",
                "executor": {"kind": "shell", "command": "sleep 0.2"},
            }
        ],
        nodes=1,
        shards=1,
    )
    c.wait_all_led(60)
    wait_until(lambda: len([r for r in rows(c.db, "quick") if r.status == "succeeded"]) >= 2, 30, what="ticks")
    c.nodes["n0"].terminate()
    stopped_at = time.time()
    wait_until(lambda: time.time() > stopped_at + 4, 10, 0.1, "a few slots to be missed")
    restarted_ms = time.time() * 1000
    c.add("n0b")
    # Settled, not all succeeded: an on-time slot that comes due while a caught-up run goes on is
    # skipped by the overlap policy (checked below), and waiting for none would wait on timing.
    wait_until(
        lambda: (
            rows(c.db, "quick")[-1].scheduled_at_ms > time.time() * 1000 - 1500
            and all(r.status not in ("claimed", "running") for r in rows(c.db, "quick")[:-2])
        ),
        60,
        what="the backlog to run",
    )
    got = rows(c.db, "quick")
    slots = [r.scheduled_at_ms for r in got]
    assert all(b - a == 1000 for a, b in zip(slots, slots[1:], strict=False)), "no slot is missing"
    missed = [r for r in got if stopped_at * 1000 < r.scheduled_at_ms < restarted_ms]
    assert len(missed) >= 3 and all(r.status == "succeeded" for r in missed), (
        f"catch-up all must run every missed slot, in turn: {[(r.scheduled_at_ms, r.status) for r in missed]}"
    )
    # A slot that comes due on time while the backlog runs follows the overlap policy as usual;
    # the newest rows may still be claimed or running when this looks.
    settled = [r for r in got if r.status not in ("claimed", "running")]
    assert all(r.status == "succeeded" or "overlap" in (r.error or "") for r in settled), [
        (r.scheduled_at_ms, r.status, r.error) for r in settled if r.status != "succeeded"
    ]
