"""Batched, fenced writes of tick results.

Executors finish on many threads; their results are queued here and written
by the tick writer's thread (``tick_writer.py``, after the marks and the
claims), a batch per (shard, fence) per transaction, so the database sees a
few large commits instead of thousands of small ones. A batch rejected by
the fence is dropped and reported (a newer leader owns those rows now); a
batch that fails because the store is down is kept and retried, so no result
is lost to an outage (nor dropped when another of the writer's streams finds
the store down: ``tick_writer.on_store_down`` keeps results queued).

Any other error writing a batch (a bug, a driver error this code does not
classify) is handled the same way, with its traceback logged: the batch is
kept and retried after a back-off, and the writer goes on. It must not end:
it is the only result writer, and results would pile up in memory unseen.
Stopping the node instead was rejected: every shard would move and every
in-flight tick would become an orphan that its next leader retries, so one
bad write would turn into repeated side effects cluster-wide. A stuck
recorder shows as ``shardcron_results_unwritten`` growing and an ERROR line
per failed attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from sqlalchemy.engine import Engine

from shardcron import metrics
from shardcron.errors import StoreUnavailable
from shardcron.jobkey import namespace_of
from shardcron.leader.tick_writer import batch_ready_at
from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.runtime import crashpoints
from shardcron.store import tick_results
from shardcron.store import ticks as tick_store

log = logging.getLogger(__name__)


class ResultWrite(NamedTuple):  # one per tick: a tuple, built and hashed in C
    shard: int
    fence: int
    slot: SlotRef
    attempt: int
    result: ExecutionResult
    status: TickStatus


# The batched write: {(shard, fence): [(slot, attempt, result, status)]} -> ManyOutcome.
WriteBatch = Callable[[Engine, Mapping[tuple[int, int], Sequence[tuple]]], tick_store.ManyOutcome]

MAX_BACKOFF_S = 5.0


class Recorder:
    """The results' stream of the tick writer (``tick_writer.py``): ``put`` queues, the writer writes."""

    def __init__(
        self,
        engine: Engine,
        on_fenced: Callable[[int, int, int], None],
        *,
        max_batch: int = 5000,
        linger_s: float = 0.1,
        write: WriteBatch = tick_results.record_results_many,
    ):
        self._engine = engine
        self._on_fenced = on_fenced  # (shard, fence, rejected writes)
        self._write_batch = write  # the store's own; a test wraps it to inject failures
        self._max_batch = max_batch
        # Results of one slot time arrive in a burst: gathering them for a moment
        # makes one commit of them, and keeps the database work off the burst itself.
        self._linger_s = linger_s
        self._cond = threading.Condition()  # guards the queue; flush() waits on it
        self._pending: list[ResultWrite] = []
        self._first_at = 0.0  # time.monotonic() when the queue last became non-empty: its linger starts
        self._unwritten: dict[int, int] = defaultdict(int)  # shard -> writes queued or in flight
        metrics.watch_gauge(metrics.results_unwritten, self.unwritten)
        self._flushing = 0  # callers of flush() waiting: a linger is cut short for them
        self._backoff = 0.1
        self._retry_at = 0.0  # after a failed write: not before this (time.monotonic())
        self._backoff_at_most = False  # the last failed write's back-off was the longest
        self._given_up = False  # closing, the store still failing: what is left is dropped
        self.wake: Callable[[], None] = lambda: None  # the writer's (tick_writer.py)
        self.written = 0
        self.rejected = 0
        self.listeners: list[Callable[[list[ResultWrite]], None]] = []  # told of the writes that landed, per batch
        self.rejected_listeners: list[Callable[[list[ResultWrite]], None]] = []  # ... and of those the fence refused

    def put(self, write: ResultWrite) -> None:
        self.put_many([write])

    def put_many(self, writes: list[ResultWrite]) -> None:
        with self._cond:
            if not self._pending:
                self._first_at = time.monotonic()
            self._pending.extend(writes)
            for w in writes:
                self._unwritten[w.shard] += 1
            n, added = len(self._pending), len(writes)
        # Wake the writer only when the put changes what it waits for: the first results (its linger
        # starts), or a full batch. A wake per put cut every linger short (results spread over the second
        # were written one or two at a time, a transaction each), and each was a thread switch and a GIL
        # hand-off on the hot path.
        if added and (n == added or n >= self._max_batch):
            self.wake()

    def unwritten(self) -> int:
        """Results queued or being written, every shard together."""
        with self._cond:
            return sum(self._unwritten.values())

    def flush(self, shard: int, timeout_s: float) -> bool:
        """Wait until every write queued for ``shard`` is written or rejected."""
        end = time.monotonic() + timeout_s
        with self._cond:
            self._flushing += 1  # a handover waits for this: the writer stops lingering
        self.wake()
        try:
            with self._cond:
                while self._unwritten.get(shard, 0) > 0:
                    left = end - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
        finally:
            with self._cond:
                self._flushing -= 1
        return True

    # -- the writer's side (tick_writer.Stream) ----------------------------------------------

    def ready_at(self, now: float, closing: bool) -> float | None:
        with self._cond:
            if closing and self._backoff_at_most:
                self._given_up = True  # closing, and the store has failed for a while: stop retrying
            if self._given_up:
                return None
            return batch_ready_at(
                queued=len(self._pending),
                first_at=self._first_at,
                linger_s=self._linger_s,
                max_batch=self._max_batch,
                retry_at=self._retry_at,
                cut_short=closing or self._flushing > 0,
            )

    def write_next(self) -> StoreUnavailable | None:
        crashpoints.fail_worker("recorder")  # SHARDCRON_TEST_FAIL_THREAD=recorder fails the writer at this step
        with self._cond:
            batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
            if self._pending:
                self._first_at = time.monotonic()
        store_down, kept = None, True
        try:
            self._write(batch)
            kept = False
        except StoreUnavailable as e:
            log.warning("store unavailable, %d tick results kept for retry: %s", len(batch), e)
            store_down = e
        except Exception:  # noqa: BLE001 - results must not be lost to a bug (see the module doc)
            log.exception("writing %d tick results failed; they are kept and retried", len(batch))
        with self._cond:
            if kept:
                self._pending[:0] = batch
                self._first_at = time.monotonic()
                # The store is down, or the write failed: back off before trying again.
                self._retry_at = time.monotonic() + self._backoff
                self._backoff_at_most = self._backoff >= MAX_BACKOFF_S
                self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
            else:
                for w in batch:
                    self._unwritten[w.shard] -= 1
                self._backoff, self._retry_at, self._backoff_at_most = 0.1, 0.0, False
            self._cond.notify_all()
        return store_down

    def closed(self) -> None:
        with self._cond:
            left = len(self._pending)
        if left:
            log.error("results still not written at shutdown; %d tick results not written", left)

    def _write(self, batch: list[ResultWrite]) -> None:
        """One transaction for the whole batch, every shard in it (``StoreUnavailable``: none of it written)."""
        groups: dict[tuple[int, int], list[ResultWrite]] = defaultdict(list)
        for w in batch:
            groups[(w.shard, w.fence)].append(w)
        out = self._write_batch(
            self._engine, {k: [(w.slot, w.attempt, w.result, w.status) for w in ws] for k, ws in groups.items()}
        )
        for (shard, fence), writes in groups.items():
            if out.is_fenced(shard, fence):
                self.rejected += len(writes)
                log.error(
                    "shard %d: %d tick results rejected by the fence (fence %d, store has %s)",
                    shard,
                    len(writes),
                    fence,
                    out.fenced_out[shard],
                    extra={"shard": shard, "fence": fence},
                )
                self._on_fenced(shard, fence, len(writes))
                self._tell(self.rejected_listeners, writes)
                continue
            self.written += len(writes)
            # Per namespace and status, not per tick: labels() is a lookup under a lock.
            for (namespace, status), count in Counter((namespace_of(w.slot.job_id), w.status) for w in writes).items():
                metrics.ticks.labels(namespace, status.value).inc(count)
            self._tell(self.listeners, writes)

    @staticmethod
    def _tell(listeners: list[Callable[[list[ResultWrite]], None]], writes: list[ResultWrite]) -> None:
        for listener in listeners:
            try:
                listener(writes)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the writer (or re-write)
                log.exception("a tick result listener failed")
