"""The result writer survives errors it does not know (issue 10, "Thread hardening").

A real store on each database, the recorder served by a tick writer of its own; the failure is injected
through the recorder's ``write`` parameter, which wraps the store's own batched write.
"""

from __future__ import annotations

import logging
import threading

import pytest

from shardcron.dev.testing.cluster import wait_until
from shardcron.leader.recorder import Recorder, ResultWrite
from shardcron.leader.tick_writer import TickWriter
from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.store import SlotClaim, claim_ticks, ensure_shards, list_ticks, mark_running, raise_fence
from shardcron.store.tick_results import record_results_many

FENCE = 3


class BrokenUntilAllowed:
    """The store's batched write, failing with a bug-like error until ``allow`` is set."""

    def __init__(self):
        self.allow = threading.Event()
        self.failures = 0

    def __call__(self, engine, groups):
        if not self.allow.is_set():
            self.failures += 1
            raise RuntimeError(f"injected failure #{self.failures}")
        return record_results_many(engine, groups)


def test_an_unexpected_write_error_is_logged_and_the_results_are_kept_and_written_later(store_engine, caplog):
    ensure_shards(store_engine, 1)
    raise_fence(store_engine, 0, FENCE, "n", 1)
    slot = SlotRef("j", 60_000)
    claim_ticks(store_engine, [SlotClaim("j", 60_000)], shard=0, fence=FENCE, node_id="n", now_ms=59_000)
    mark_running(store_engine, [(slot, 1, 60_001)], shard=0, fence=FENCE)
    broken = BrokenUntilAllowed()
    recorder = Recorder(store_engine, lambda *a: None, linger_s=0.01, write=broken)
    writer = TickWriter([recorder])
    writer.start()
    try:
        with caplog.at_level(logging.ERROR, logger="shardcron.leader.recorder"):
            recorder.put(ResultWrite(0, FENCE, slot, 1, ExecutionResult(True, 60_001, 60_002), TickStatus.SUCCEEDED))
            wait_until(lambda: broken.failures >= 3, 30, what="the writer to try, fail and try again")
            assert recorder.unwritten() == 1, "the result is kept while the write fails"
            assert not recorder.flush(0, 0.1)
            broken.allow.set()
            assert recorder.flush(0, 30), "the result is written once the write works again"
        [tick] = list_ticks(store_engine, "j")
        assert (tick.status, tick.finished_at_ms) == (TickStatus.SUCCEEDED, 60_002)
        assert recorder.unwritten() == 0 and recorder.written == 1
        failed = [r for r in caplog.records if "tick results failed" in r.getMessage()]
        assert failed and failed[0].exc_info and "injected failure #1" in str(failed[0].exc_info[1])
    finally:
        writer.close()


@pytest.mark.parametrize("db_kind", ["sqlite"], indirect=True)
def test_a_listener_that_raises_neither_stops_the_writer_nor_writes_twice(store_engine, caplog):
    ensure_shards(store_engine, 1)
    raise_fence(store_engine, 0, FENCE, "n", 1)
    for at in (60_000, 61_000):
        claim_ticks(store_engine, [SlotClaim("j", at)], shard=0, fence=FENCE, node_id="n", now_ms=at - 1000)
    recorder = Recorder(store_engine, lambda *a: None, linger_s=0.01)
    told = []

    def listener(writes: list[ResultWrite]) -> None:
        told.extend(w.slot.scheduled_at_ms for w in writes)
        raise ValueError("a broken watcher")

    recorder.listeners.append(listener)
    writer = TickWriter([recorder])
    writer.start()
    try:
        for at in (60_000, 61_000):
            recorder.put(
                ResultWrite(0, FENCE, SlotRef("j", at), 1, ExecutionResult(True, at, at + 1), TickStatus.SUCCEEDED)
            )
            assert recorder.flush(0, 30)
        assert told == [60_000, 61_000] and recorder.written == 2
        assert {t.status for t in list_ticks(store_engine, "j")} == {TickStatus.SUCCEEDED}
    finally:
        writer.close()


def claimed_slots(engine, count: int) -> list[SlotRef]:
    """``count`` slots of job "j" claimed on shard 0 under FENCE, one a second from 60 s."""
    ensure_shards(engine, 1)
    raise_fence(engine, 0, FENCE, "n", 1)
    slots = [SlotRef("j", 60_000 + 1000 * i) for i in range(count)]
    claim_ticks(
        engine,
        [SlotClaim(s.job_id, s.scheduled_at_ms) for s in slots],
        shard=0,
        fence=FENCE,
        node_id="n",
        now_ms=59_000,
    )
    return slots


def succeeded(slot: SlotRef) -> ResultWrite:
    at = slot.scheduled_at_ms
    return ResultWrite(0, FENCE, slot, 1, ExecutionResult(True, at, at + 1), TickStatus.SUCCEEDED)


def test_results_that_arrive_one_by_one_within_the_linger_are_written_in_one_transaction(store_engine):
    """The linger gathers spread-out results (an execution ends every few ms beside a flood): one
    transaction for all of them, not one per put (each put used to cut the linger short)."""
    slots = claimed_slots(store_engine, 10)
    batches: list[int] = []

    def counted(engine, groups):
        batches.append(sum(len(items) for items in groups.values()))
        return record_results_many(engine, groups)

    # A linger far longer than the puts take, even on a busy machine: 10 puts 10 ms apart.
    recorder = Recorder(store_engine, lambda *a: None, linger_s=3.0, write=counted)
    writer = TickWriter([recorder])
    writer.start()
    try:
        for s in slots:
            recorder.put(succeeded(s))
            threading.Event().wait(0.01)
        assert recorder.flush(0, 30)
        assert batches == [10], f"one transaction for the ten results, got batches of {batches}"
        assert {t.status for t in list_ticks(store_engine, "j")} == {TickStatus.SUCCEEDED}
    finally:
        writer.close()


def test_a_full_batch_is_written_without_waiting_out_the_linger(store_engine):
    slots = claimed_slots(store_engine, 4)
    recorder = Recorder(store_engine, lambda *a: None, linger_s=3600.0, max_batch=2)
    writer = TickWriter([recorder])
    writer.start()
    try:
        recorder.put_many([succeeded(s) for s in slots])
        assert recorder.flush(0, 30), "two full batches are written at once, not after an hour's linger"
    finally:
        writer.close()


def test_a_flush_cuts_the_linger_short(store_engine):
    """A handover flushes its shard's results: it must not wait out the writer's linger."""
    [slot] = claimed_slots(store_engine, 1)
    recorder = Recorder(store_engine, lambda *a: None, linger_s=3600.0)
    writer = TickWriter([recorder])
    writer.start()
    try:
        recorder.put(succeeded(slot))
        assert recorder.flush(0, 30), "the flush had the result written, not an hour later"
        [tick] = list_ticks(store_engine, "j")
        assert tick.status is TickStatus.SUCCEEDED
    finally:
        writer.close()


def test_a_first_batch_of_results_put_together_wakes_the_writer(store_engine):
    """put_many into an empty queue (a burst of noop ticks) must wake the waiting writer, whatever its size."""
    slots = claimed_slots(store_engine, 3)
    recorder = Recorder(store_engine, lambda *a: None, linger_s=0.01)
    writer = TickWriter([recorder])
    writer.start()
    try:
        recorder.put_many([succeeded(s) for s in slots])
        wait_until(lambda: recorder.written == 3, 30, what="the three results written without a flush")
    finally:
        writer.close()


def test_results_the_fence_refuses_are_told_to_the_rejected_listeners_only(store_engine):
    slots = claimed_slots(store_engine, 2)
    raise_fence(store_engine, 0, FENCE + 1, "newer", 2)  # a newer leader: this one's results are refused
    recorder = Recorder(store_engine, lambda *a: None, linger_s=0.01)
    landed: list[ResultWrite] = []
    rejected: list[ResultWrite] = []
    recorder.listeners.append(landed.extend)
    recorder.rejected_listeners.append(rejected.extend)
    writer = TickWriter([recorder])
    writer.start()
    try:
        recorder.put_many([succeeded(s) for s in slots])
        assert recorder.flush(0, 30)
        assert [w.slot for w in rejected] == slots and landed == [] and recorder.rejected == 2
    finally:
        writer.close()
