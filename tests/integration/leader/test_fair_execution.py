"""Executor slots under overload, on a real scheduler (stepped clock, real SQLite store, real executors
against the dev sink): namespace A floods slow HTTP runs past ``executor_slots``, namespace B's noop
ticks all run, each recorded at its real start, and with fair queuing B is served before A's backlog.

One slot, and the sink lets A's requests go one at a time, the clock moved 100 ms before each: so
every start happens at a known step, and the test asserts the order of starts, never a duration.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import wait_until
from shardcron.model import Job, TickStatus
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.spec.job import job_from_dict
from shardcron.spec.namespaces import store_key
from shardcron.store import list_ticks
from shardcron.store.namespaces import create_namespace
from tests.support.stepped_scheduler import T0, S

STEP_MS = 100
A_JOBS, B_JOBS = 4, 3


class OneAtATimeSink:
    """The dev sink; each request waits until the test lets exactly one more go."""

    def __init__(self):
        self.turns = threading.Semaphore(0)
        self.sink = Sink(on_request=lambda r: self.turns.acquire(timeout=60))
        self.sink.start()

    def order(self) -> list[tuple[str, str, int]]:
        """(namespace, job id, slot) of every request, in the order they arrived."""
        return [
            (
                r.header("x-shardcron-namespace"),
                r.header("x-shardcron-job-id"),
                int(r.header("x-shardcron-scheduled-at-ms")),
            )
            for r in self.sink.requests()
        ]

    def close(self) -> None:
        for _ in range(1000):
            self.turns.release()
        self.sink.stop()


@pytest.fixture(autouse=True)
def _namespaces(engine):
    """The namespaces of these tests' jobs exist, as every namespaced put needs (store/namespaces.py)."""
    for name in ("a", "b"):
        create_namespace(engine, name, NamespaceSettings(), node_id="test", now_ms=0)


@pytest.fixture
def sink():
    s = OneAtATimeSink()
    yield s
    s.close()


def a_job(sink: OneAtATimeSink, i: int) -> Job:
    # Every second, overlapping allowed: its second slot waits in the gate, not skipped.
    job = job_from_dict(
        {
            "id": f"a{i}",
            "every": "1s",
            "overlap": "allow",
            "timeout": "60s",
            "executor": {"kind": "http", "url": sink.sink.url + "/slow"},
        }
    )
    return replace(job, id=store_key("a", f"a{i}"))


def b_job(i: int) -> Job:
    # Every 2 s: its first slot, T0 + 2 s, comes due while A's first slots wait already.
    return replace(job_from_dict({"id": f"b{i}", "every": "2s"}), id=store_key("b", f"b{i}"))


def run_flood(rig, sink: OneAtATimeSink, fair: bool):
    r = rig(
        [a_job(sink, i) for i in range(A_JOBS)] + [b_job(i) for i in range(B_JOBS)], executor_slots=1, fair_queuing=fair
    )
    r.at(T0)
    r.at(T0 + 1 * S)  # A's 4 first slots: one runs (held at the sink), three wait
    wait_until(lambda: len(sink.order()) == 1, 30, what="A's first run to reach the sink")
    assert r.scheduler._gate.waiting == A_JOBS - 1
    r.at(T0 + 2 * S)  # A's 4 second slots and B's 3 noops: every one waits, the noops too
    assert r.scheduler._gate.waiting == 2 * A_JOBS - 1 + B_JOBS
    assert r.ticks(store_key("b", "b0"))[2][0] is TickStatus.CLAIMED, "a noop must not overtake what waits"
    total_a = 2 * A_JOBS
    for k in range(1, total_a + 1):  # let A's runs end one by one; each hands its slot on
        r.clock.now_ms = T0 + 2 * S + k * STEP_MS
        sink.turns.release()
        if k < total_a:
            wait_until(lambda: len(sink.order()) == k + 1, 30, what=f"A's run {k + 1} to reach the sink")
    wait_until(
        lambda: r.scheduler._gate.busy == 0 and r.scheduler._gate.waiting == 0,
        30,
        what="every waiting start to be served and ended",
    )
    assert r.scheduler.recorder.flush(0, 30)
    return r


def b_start_steps(r) -> list[int]:
    """The step (100 ms after T0 + 2 s each) at which each of B's ticks of T0 + 2 s started; all succeeded."""
    steps = []
    for i in range(B_JOBS):
        [tick] = [t for t in list_ticks(r.engine, store_key("b", f"b{i}")) if t.scheduled_at_ms == T0 + 2 * S]
        assert tick.status is TickStatus.SUCCEEDED, (i, tick)
        assert (tick.started_at_ms - T0 - 2 * S) % STEP_MS == 0, "recorded at its real start, a step of the clock"
        steps.append((tick.started_at_ms - T0 - 2 * S) // STEP_MS)
    return sorted(steps)


def test_fair_queuing_serves_the_calm_namespace_before_the_floods_backlog(rig, sink):
    r = run_flood(rig, sink, fair=True)
    # Each A run that ends hands its slot to the next start by fair share: B's noops take their
    # turns between A's starts (one per A run ending: steps 2, 3, 4), not after A's backlog.
    assert b_start_steps(r) == [2, 3, 4]
    order = sink.order()
    assert len(order) == 2 * A_JOBS and len(set(order)) == 2 * A_JOBS, "every A slot ran, once"
    # ...and A's own starts keep their order: its first slots before its second ones.
    assert [slot for _, _, slot in order] == [T0 + S] * A_JOBS + [T0 + 2 * S] * A_JOBS
    assert {ns for ns, _, _ in order} == {"a"}
    stats = r.scheduler.stats.snapshot()
    assert stats.get("not_started", 0) == 0 and stats["by_status"] == {"succeeded": 2 * A_JOBS + B_JOBS}


def test_first_come_makes_the_calm_namespace_wait_behind_the_flood(rig, sink):
    r = run_flood(rig, sink, fair=False)
    # First-come: B's noops, due at T0 + 2 s, wait until A's three waiting first slots have run.
    assert min(b_start_steps(r)) >= 3
    assert len(set(sink.order())) == 2 * A_JOBS


def test_a_released_shard_leaves_its_waiting_starts_claimed_for_the_next_leader(rig, sink):
    r = rig([a_job(sink, i) for i in range(A_JOBS)], executor_slots=1)
    r.at(T0)
    r.at(T0 + 1 * S)
    wait_until(lambda: len(sink.order()) == 1, 30, what="A's first run to reach the sink")
    done = threading.Event()
    r.scheduler.release(0, 30, done.set)
    assert r.scheduler._gate.waiting == 0
    assert r.scheduler.stats.snapshot()["not_started"] == A_JOBS - 1
    sink.turns.release()
    assert done.wait(30)
    statuses = sorted(list_ticks(r.engine, store_key("a", f"a{i}"))[-1].status.value for i in range(A_JOBS))
    assert statuses == ["claimed"] * (A_JOBS - 1) + ["succeeded"], "never dropped: left claimed for a successor"


def test_max_running_holds_a_namespaces_start_while_others_run(rig, sink):
    from shardcron.rules.namespace_settings import NamespaceSettings
    from shardcron.rules.quotas import Quota

    r = rig([a_job(sink, 0), a_job(sink, 1), b_job(0)], executor_slots=4)
    r.scheduler.set_namespace_settings({"a": NamespaceSettings(quota=Quota(max_running=1))})
    r.at(T0)
    r.at(T0 + 1 * S)  # a0 runs; a1 is over a's max_running with slots free: it waits
    wait_until(lambda: len(sink.order()) == 1, 30, what="a's first run to reach the sink")
    assert r.scheduler._gate.waiting == 1 and r.scheduler._gate.running("a") == 1
    r.clock.now_ms = T0 + 2 * S
    r.scheduler.claim_due()
    r.scheduler.dispatch_due()  # b0's noop: queued behind a1 (the queue's order decides), served on a free slot
    wait_until(
        lambda: r.ticks(store_key("b", "b0")).get(2, (None,))[0] is TickStatus.SUCCEEDED,
        30,
        what="b0 to run while a1 waits for a's running quota",
    )
    assert len(sink.order()) == 1, "a1 still waits: a0 runs"
    r.clock.now_ms = T0 + 2 * S + STEP_MS
    sink.turns.release()  # a0 ends: a1 may go now
    wait_until(lambda: len(sink.order()) >= 2, 30, what="a1 to start once a0 ended")
    assert r.scheduler._gate.running("a") == 1
