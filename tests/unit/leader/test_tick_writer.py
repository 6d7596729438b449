"""The tick writer's decisions (leader/tick_writer.py): which stream it writes next, when a batch is ready, whose
queued requests fail when a write finds the store down, and the writer serving streams by priority on its one
thread."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardcron.dev.testing.cluster import wait_until
from shardcron.errors import StoreUnavailable
from shardcron.leader.tick_writer import (
    TickWriter,
    Wait,
    WhenStoreDown,
    Write,
    batch_ready_at,
    next_step,
    on_store_down,
)
from shardcron.runtime.lifeline import Lifeline

MARKS, CLAIMS, RESULTS, PRUNES = range(4)
NOW = 100.0


@pytest.mark.parametrize(
    ("ready", "step"),
    [
        ([None, None, None, None], Wait(None)),  # nothing to write: wait to be woken
        ([NOW, NOW, NOW, NOW], Write(MARKS)),  # a tick must not wait to start
        ([None, NOW, NOW, NOW], Write(CLAIMS)),
        ([None, None, NOW - 5, NOW], Write(RESULTS)),
        ([None, None, None, NOW - 1], Write(PRUNES)),
        ([NOW + 1, None, NOW, None], Write(RESULTS)),  # a marks batch not ready yet does not hold results up
        ([NOW + 1, NOW + 0.5, None, NOW + 3], Wait(NOW + 0.5)),  # the earliest stream to be ready
        ([None, None, NOW + 0.1, None], Wait(NOW + 0.1)),  # a lingering batch
    ],
)
def test_next_step(ready, step):
    assert next_step(ready, NOW) == step


instants = st.one_of(st.none(), st.floats(min_value=0, max_value=200, allow_nan=False))


@given(st.lists(instants, max_size=6), st.floats(min_value=0, max_value=200, allow_nan=False))
def test_next_step_writes_the_first_ready_stream_or_waits_for_the_earliest(ready, now):
    step = next_step(ready, now)
    due = [i for i, at in enumerate(ready) if at is not None and at <= now]
    if due:
        assert step == Write(due[0])  # no stream of a higher priority was ready
    else:
        later = [at for at in ready if at is not None]
        assert step == Wait(min(later) if later else None)
        assert step.until is None or step.until > now


KEEP, FAIL = WhenStoreDown.KEEP, WhenStoreDown.FAIL
# The node's policies, in its priority order: only the claims fail fast.
NODE_POLICIES = [KEEP, FAIL, KEEP, KEEP]


@pytest.mark.parametrize(
    ("policies", "ready", "fail"),
    [
        (NODE_POLICIES, [None, None, None, None], ()),  # nothing queued: nothing to fail
        (NODE_POLICIES, [NOW, NOW, NOW, NOW], (CLAIMS,)),  # marks, results, prunes are kept
        (NODE_POLICIES, [None, NOW - 2, None, None], (CLAIMS,)),  # a claim due since before the write began
        (NODE_POLICIES, [None, NOW + 0.2, NOW, None], ()),  # a claim due later gets an attempt of its own
        (NODE_POLICIES, [NOW, None, NOW, NOW], ()),  # the results (and marks) stay queued: never dropped
        ([FAIL, FAIL, KEEP, KEEP], [NOW, NOW, NOW, None], (MARKS, CLAIMS)),  # a policy is per stream
        ([], [], ()),
    ],
)
def test_on_store_down(policies, ready, fail):
    assert on_store_down(policies, ready, NOW) == fail


@given(
    st.lists(st.tuples(st.sampled_from(WhenStoreDown), instants), max_size=6),
    st.floats(min_value=0, max_value=200, allow_nan=False),
)
def test_on_store_down_fails_exactly_the_fail_fast_streams_with_something_due(streams, now):
    policies = [policy for policy, _ in streams]
    ready = [at for _, at in streams]
    fail = on_store_down(policies, ready, now)
    assert list(fail) == sorted(set(fail)), "each stream at most once, in priority order"
    for i, (policy, at) in enumerate(streams):
        due = at is not None and at <= now
        assert (i in fail) == (policy is FAIL and due)  # a kept stream never loses a request


@pytest.mark.parametrize(
    ("kw", "ready"),
    [
        ({"queued": 0, "first_at": 10.0, "linger_s": 0.1, "max_batch": 5}, None),
        ({"queued": 1, "first_at": 10.0, "linger_s": 0.1, "max_batch": 5}, 10.1),  # lingers for more
        ({"queued": 5, "first_at": 10.0, "linger_s": 0.1, "max_batch": 5}, 10.0),  # full: at once
        ({"queued": 1, "first_at": 10.0, "linger_s": 0.1, "max_batch": 5, "cut_short": True}, 10.0),  # a flush
        ({"queued": 1, "first_at": 10.0, "linger_s": 0.0, "max_batch": 5}, 10.0),  # marks never linger
        ({"queued": 1, "first_at": 10.0, "linger_s": 0.1, "max_batch": 5, "retry_at": 12.0}, 12.0),  # backing off
        ({"queued": 9, "first_at": 10.0, "linger_s": 0.1, "max_batch": 5, "retry_at": 12.0}, 12.0),
        ({"queued": 1, "first_at": 10.0, "linger_s": 0.1, "max_batch": 5, "retry_at": 1.0}, 10.1),
    ],
)
def test_batch_ready_at(kw, ready):
    assert batch_ready_at(**kw) == ready


@given(
    st.integers(0, 50),
    st.floats(0, 100),
    st.floats(0, 10),
    st.integers(1, 20),
    st.floats(0, 100),
    st.booleans(),
)
def test_a_batch_is_never_ready_before_its_back_off_nor_after_its_linger(
    queued, first_at, linger_s, max_batch, retry_at, cut_short
):
    at = batch_ready_at(
        queued=queued, first_at=first_at, linger_s=linger_s, max_batch=max_batch, retry_at=retry_at, cut_short=cut_short
    )
    if queued == 0:
        assert at is None
        return
    assert at is not None and first_at <= at and retry_at <= at
    assert at <= max(first_at + linger_s, retry_at)
    if cut_short or queued >= max_batch:
        assert at == max(first_at, retry_at)


class FakeStream:
    """A queue of items written one batch at a time, into a shared log of (stream name, batch)."""

    def __init__(self, name: str, log: list, *, linger_s: float = 0.0, gate: threading.Event | None = None):
        self.name, self.log, self.linger_s, self.gate = name, log, linger_s, gate
        self.items: list[int] = []
        self.first_at = 0.0
        self.lock = threading.Lock()
        self.closed_with: list[int] | None = None
        self.wake = lambda: None
        self.seen_queued = 0  # how many times the writer asked when a batch is ready while items were queued

    def put(self, *items: int) -> None:
        with self.lock:
            if not self.items:
                self.first_at = time.monotonic()
            self.items.extend(items)
        self.wake()

    def ready_at(self, now: float, closing: bool) -> float | None:
        with self.lock:
            self.seen_queued += bool(self.items)
            return batch_ready_at(
                queued=len(self.items), first_at=self.first_at, linger_s=self.linger_s, max_batch=100, cut_short=closing
            )

    def write_next(self) -> StoreUnavailable | None:
        with self.lock:
            batch, self.items = self.items, []
        if self.gate is not None:
            assert self.gate.wait(30)
        self.log.append((self.name, batch))
        return None

    def closed(self) -> None:
        self.closed_with = list(self.items)


def test_the_writer_serves_the_streams_by_priority_on_one_thread():
    log: list = []
    gate = threading.Event()
    blocker = FakeStream("results", log, gate=gate)  # holds the writer in a write while the others queue
    marks, claims, prunes = FakeStream("marks", log), FakeStream("claims", log), FakeStream("prunes", log)
    writer = TickWriter([marks, claims, blocker, prunes])
    writer.start()
    try:
        blocker.put(1)
        wait_until(lambda: not blocker.items, 30, 0.005, what="the writer to take the results' batch")
        prunes.put(4)
        claims.put(3)
        marks.put(2)
        marks.put(5)
        gate.set()
        wait_until(lambda: len(log) == 4, 30, 0.005, what="every stream written")
    finally:
        writer.close()
    assert log == [("results", [1]), ("marks", [2, 5]), ("claims", [3]), ("prunes", [4])]


def test_a_lingering_stream_waits_and_a_close_writes_it_out():
    log: list = []
    results = FakeStream("results", log, linger_s=3600.0)
    writer = TickWriter([results])
    writer.start()
    results.put(1)
    wait_until(lambda: results.seen_queued, 30, 0.005, what="the writer to look at the queued result")
    results.wake()  # it looks again only after it has done what the first look decided
    wait_until(lambda: results.seen_queued >= 2, 30, 0.005, what="the writer to look again")
    assert log == [], "an hour's linger is not over"
    writer.close()
    assert log == [("results", [1])] and results.closed_with == []


class Raising(FakeStream):
    def write_next(self) -> StoreUnavailable | None:
        raise RuntimeError("a bug in a stream")


def test_a_writer_that_dies_is_reported_to_the_lifeline():
    died: list = []
    stream = Raising("claims", [])
    writer = TickWriter([stream], lifeline=Lifeline(lambda name, error: died.append((name, error))))
    writer.start()
    stream.put(1)
    wait_until(lambda: died, 30, 0.005, what="the lifeline to hear of the death")
    assert died[0][0] == "tick-writer" and isinstance(died[0][1], RuntimeError)
    assert stream.closed_with == [1], "what was left is handed back to the stream"


class StoreDown(FakeStream):
    """A results-like stream: each write waits for its gate, then finds the store unavailable; it keeps its items
    and backs off (for an hour: the test sees one attempt), and gives them up when the writer closes."""

    def __init__(self, name: str, log: list, *, gate: threading.Event):
        super().__init__(name, log, gate=gate)
        self.entered = threading.Event()
        self.retry_at = 0.0

    def ready_at(self, now: float, closing: bool) -> float | None:
        with self.lock:
            if closing:
                return None
            return batch_ready_at(
                queued=len(self.items), first_at=self.first_at, linger_s=0.0, max_batch=100, retry_at=self.retry_at
            )

    def write_next(self) -> StoreUnavailable | None:
        self.entered.set()
        assert self.gate is not None and self.gate.wait(30)
        with self.lock:
            self.log.append((self.name, list(self.items)))
            self.retry_at = time.monotonic() + 3600
        return StoreUnavailable("store down")


class FailsFast(FakeStream):
    """A claims-like stream: what it has queued fails when another write finds the store unavailable."""

    def __init__(self, name: str, log: list):
        super().__init__(name, log)
        self.failed: list[tuple[list[int], str]] = []

    def fail_queued(self, error: StoreUnavailable) -> None:
        with self.lock:
            batch, self.items = self.items, []
        self.failed.append((batch, str(error)))


def test_a_write_that_finds_the_store_down_fails_the_claims_queued_behind_it_and_keeps_the_rest():
    log: list = []
    gate = threading.Event()
    results = StoreDown("results", log, gate=gate)
    marks, claims = FakeStream("marks", log, gate=gate), FailsFast("claims", log)
    writer = TickWriter([marks, claims, results], fail_when_store_down=[claims])
    writer.start()
    try:
        results.put(1)
        assert results.entered.wait(30), "the writer takes the results' batch"
        claims.put(2, 3)  # due behind the stuck write
        marks.put(4)
        gate.set()
        wait_until(lambda: claims.failed and len(log) == 2, 30, 0.005, what="the claims failed and the marks written")
    finally:
        writer.close()
    assert claims.failed == [([2, 3], "store down")], "failed at once, unattempted, with the write's error"
    assert log == [("results", [1]), ("marks", [4])], "the claims were never written; the marks were"
    assert results.items == [1], "the results are kept for their next batch"
