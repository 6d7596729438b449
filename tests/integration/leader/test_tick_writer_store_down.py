"""A claim queued behind a write stuck on an unreachable store fails within one write's timeout, not two.

A real SQLite store whose write lock another connection holds, as a stalled peer would: every write of
the tick writer waits out the busy timeout (this engine's write timeout), then fails as the store being
unavailable. A result batch is taken first and waits there; a claim comes due behind it. The claim must
fail when that write does, not after a busy timeout of its own: the fault test that drops the database's
packets (``tests/faults/test_store_faults.py``) holds claims to one connect and one statement timeout.
The result is kept and written once the lock is let go, and the claim is tried again and made. A prune
batch that finds the store so tells the writer, and ends its pass.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, event

from shardcron.dev.testing.cluster import wait_until
from shardcron.errors import StoreUnavailable
from shardcron.leader.claimer import CLAIM_RETRY_MS
from shardcron.leader.pruner import Pruner
from shardcron.leader.recorder import ResultWrite
from shardcron.leader.shard_run import ShardRun
from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.runtime.latch import Latch
from shardcron.spec.job import job_from_dict
from shardcron.store import ensure_schema, ensure_shards, list_ticks, make_engine, raise_fence
from tests.support.stepped_scheduler import FENCE, NODE, T0, LeaseOnClock, Rig, S, SteppedClock

# Long enough that the test moves its clock while the result write still waits on the lock.
WRITE_TIMEOUT_S = 3.0
CLAIM_FAILED = re.compile(r"claim\w*\b.*\bfailed")  # as the fault test reads a node's log


class LockWaits:
    """The engine's writes: how many began (``BEGIN IMMEDIATE``) and how many gave up on the lock."""

    def __init__(self, engine: Engine):
        self.begun = 0
        self.timed_out = 0
        event.listen(engine, "before_cursor_execute", self._on_execute)
        event.listen(engine, "handle_error", self._on_error)

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if statement == "BEGIN IMMEDIATE":
            self.begun += 1

    def _on_error(self, context) -> None:
        if "locked" in str(context.original_exception):
            self.timed_out += 1


class ClaimFailures(logging.Handler):
    """Each claim failure the leader logs, as how many writes had timed out on the lock by then."""

    def __init__(self, waits: LockWaits):
        super().__init__(logging.WARNING)
        self.waits = waits
        self.after_timeouts: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if CLAIM_FAILED.search(record.getMessage()):
            self.after_timeouts.append(self.waits.timed_out)


@contextmanager
def write_lock_held(engine: Engine) -> Iterator[None]:
    """Another connection holds the SQLite file's write lock until the block ends."""
    assert engine.url.database
    holder = sqlite3.connect(engine.url.database, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


@contextmanager
def claim_failures_logged(waits: LockWaits) -> Iterator[ClaimFailures]:
    leader_log = logging.getLogger("shardcron.leader")
    handler = ClaimFailures(waits)
    leader_log.addHandler(handler)
    try:
        yield handler
    finally:
        leader_log.removeHandler(handler)


def claimed(engine: Engine, slot_s: int) -> bool:
    return any(t.scheduled_at_ms == T0 + slot_s * S for t in list_ticks(engine, "beat"))


@pytest.fixture
def engine(fresh_db_url) -> Iterator[Engine]:
    """A SQLite store whose writes give up on a held lock after ``WRITE_TIMEOUT_S``."""
    e = make_engine(fresh_db_url("sqlite"), statement_timeout_s=WRITE_TIMEOUT_S)
    ensure_schema(e, auto_upgrade=True)
    ensure_shards(e, 1)
    yield e
    e.dispose()


def test_a_claim_behind_a_write_stuck_on_the_store_fails_when_that_write_does(engine):
    rig = Rig(engine, [job_from_dict({"id": "beat", "every": "1s"})], writer_claims=True)
    try:
        # Led from T0: slot 1 (T0 + 1 s) is claimed a lookahead ahead, at once; slot 2's claim is due at T0 + 1 s.
        wait_until(lambda: claimed(engine, 1), 30, what="slot 1 claimed by the writer")
        waits = LockWaits(engine)
        result = ExecutionResult(True, T0 + S, T0 + S + 1)
        with claim_failures_logged(waits) as failures, write_lock_held(engine):
            rig.scheduler.recorder.put(ResultWrite(0, FENCE, SlotRef("beat", T0 + S), 1, result, TickStatus.SUCCEEDED))
            wait_until(lambda: waits.begun == 1, 30, what="the writer to begin the result's write")
            rig.clock.now_ms = T0 + S  # slot 2's claim comes due behind the stuck write
            rig.scheduler.writer.wake()
            assert waits.timed_out == 0, f"the result write gave up before the claim came due ({WRITE_TIMEOUT_S} s)"
            wait_until(lambda: failures.after_timeouts, 30, what="a claim failure logged")
            assert failures.after_timeouts[0] == 1, (
                "the claim waited out a write timeout of its own after the stuck result write's"
            )
            assert rig.scheduler.recorder.unwritten() == 1, "the result is kept while the store is down"
        assert rig.scheduler.recorder.flush(0, 30), "the result is written once the store answers"
        rig.clock.now_ms = T0 + S + CLAIM_RETRY_MS
        rig.scheduler.writer.wake()
        wait_until(lambda: claimed(engine, 2), 30, what="slot 2 claimed when its claim is tried again")
        [first] = [t for t in list_ticks(engine, "beat") if t.scheduled_at_ms == T0 + S]
        assert first.status is TickStatus.SUCCEEDED
    finally:
        rig.close()


def test_a_prune_batch_that_finds_the_store_locked_tells_the_writer_and_ends_its_pass(engine):
    ensure_shards(engine, 2)
    clock = SteppedClock(T0 + 3600 * S)
    lease = LeaseOnClock(clock, clock.now_ms + 3600 * S)
    runs = [ShardRun(shard, FENCE, Latch(), lease) for shard in (0, 1)]
    for run in runs:
        raise_fence(engine, run.shard, FENCE, NODE, T0)
    pruner = Pruner(engine, lambda: runs, retention_ms=S, now_ms=clock.wall_ms)
    waits = LockWaits(engine)
    with write_lock_held(engine):
        store_down = pruner.write_next()
    assert isinstance(store_down, StoreUnavailable), "the writer hears that the store is unavailable"
    assert waits.begun == 1, "shard 1's turn waits for the next pass: one write's timeout, not one per shard"
    # The store answering again: the next pass is a batch per shard, each a step of its own.
    assert pruner.write_next() is None and pruner.write_next() is None
    assert waits.begun == 3
