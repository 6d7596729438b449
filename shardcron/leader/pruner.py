"""The leader's pruning of old ticks: the tick writer's last stream (``tick_writer.py``), off the hot path.

Every ``prune_every_ms`` the pruner walks the shards this node leads. For each
shard it deletes, in bounded fenced batches (``store.retention``):

* the ticks older than ``--tick-retention`` (the horizon, never nearer now
  than the longest catch-up window of the shard's jobs: ``retention_horizon_ms``);
* for each job with a ``history_limit``, its ticks older than its newest N, when
  about a tenth of N new ticks can have come since its last turn
  (``history_prune_every_ms``): one transaction per job per pass would be
  thousands a second on a shard of many jobs.

How it keeps off the starts' way and out of a lost shard's:

* each batch's size is steered to last about ``DELETE_TARGET_MS``, and after
  it the pruner rests so that pruning takes at most ``DELETE_DUTY`` of the time
  (``next_batch_size``, ``pause_after_batch_ms``);
* a shard's turn lasts at most ``TURN_S``, so one shard's backlog (retention
  turned on over months of ticks) does not hold up the others;
* it is one batch per step of the writer, which serves marks, claims and
  results first, and rests between steps; a lost shard's turn ends before its
  next batch; a batch already under way is fenced like every write (a newer leader's
  raise waits for it or refuses it), and ``FencedOut`` ends the shard's turn;
* a batch that finds the store unavailable ends the pass, and the writer hears
  of it (``tick_writer.on_store_down``): the next pass comes ``prune_every_ms`` later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator
from typing import NamedTuple

from sqlalchemy.engine import Engine

from shardcron import metrics
from shardcron.errors import FencedOut, StoreUnavailable
from shardcron.leader.shard_run import ShardRun
from shardcron.model import Job
from shardcron.rules.retention import (
    MIN_DELETE_BATCH,
    history_prune_every_ms,
    next_batch_size,
    pause_after_batch_ms,
    prune_every_ms,
    retention_horizon_ms,
)
from shardcron.runtime import crashpoints
from shardcron.spec.schedule import shortest_gap_ms
from shardcron.store import retention as prune_store

log = logging.getLogger(__name__)

# One shard's turn ends after this much pruning, and the next shard's begins: a cluster that turns
# retention on over months of ticks works through every shard's backlog side by side, a turn at a
# time, passes following each other at once until none runs out of time.
TURN_S = 5.0


class Pruner:
    """The prunes' stream of the tick writer (``tick_writer.py``): one batch per step, after everything else."""

    def __init__(
        self,
        engine: Engine,
        led_runs: Callable[[], list[ShardRun]],
        *,
        retention_ms: int | None,
        now_ms: Callable[[], int],
    ):
        self._engine = engine
        self._led_runs = led_runs
        self._retention_ms = retention_ms
        self._now_ms = now_ms
        self._batch = MIN_DELETE_BATCH  # steered by each batch's time; kept across passes
        self._history_due: dict[int, dict[str, int]] = {}  # shard -> job id -> when its history is pruned next
        self.pruned = 0
        self._turn_ends = 0.0  # time.monotonic() at which the current shard's turn is over
        self._behind = False  # a turn ran out of time: the next pass follows at once
        self._every_s = prune_every_ms(retention_ms) / 1000
        self._passes = self._all_passes()
        self._next_at = time.monotonic() + self._every_s  # the first pass comes a period after the start
        self._closing = False
        self.wake: Callable[[], None] = lambda: None  # the writer's (tick_writer.py)

    # -- the writer's side (tick_writer.Stream) ----------------------------------------------

    def ready_at(self, now: float, closing: bool) -> float | None:
        self._closing = closing
        return None if closing else self._next_at

    def write_next(self) -> StoreUnavailable | None:
        """One batch (or a pass's end): the writer comes back after the rest it yields."""
        crashpoints.fail_worker("pruner")  # SHARDCRON_TEST_FAIL_THREAD=pruner fails the writer at this step
        rest_s, store_down = next(self._passes)
        self._next_at = time.monotonic() + rest_s
        return store_down

    def closed(self) -> None:
        self._passes.close()

    def _all_passes(self) -> Generator[tuple[float, StoreUnavailable | None], None, None]:
        """Every pass over the led shards, one batch per step; yields the rest before the next step, and the
        store's error when a step found it unavailable (which ends the pass)."""
        while True:
            self._behind = False
            store_down = None
            for run in self._led_runs():
                try:
                    for rest_s in self._turn(run):
                        yield rest_s, None
                except FencedOut:
                    log.info(
                        "shard %d: pruning stopped, a newer leader holds the shard",
                        run.shard,
                        extra={"shard": run.shard, "fence": run.fence},
                    )
                except StoreUnavailable as e:
                    log.warning(
                        "shard %d: pruning failed (%s); next pass in %.0fs",
                        run.shard,
                        e,
                        self._every_s,
                        extra={"shard": run.shard},
                    )
                    store_down = e
                    break  # the other shards' turns would fail too, each a write's timeout of the writer's time
                except Exception:  # noqa: BLE001 - pruning must not take the node down; the next pass retries
                    log.exception("shard %d: pruning failed", run.shard)
            yield (0.0 if self._behind and store_down is None else self._every_s), store_down

    def prune_shard(self, run: ShardRun) -> int:
        """One turn over one led shard (at most ``TURN_S`` of batches), on the caller's thread, resting on
        the shard's stop event between batches; returns the ticks deleted."""
        turn = self._turn(run)
        while True:
            try:
                rest_s = next(turn)
            except StopIteration as done:
                return done.value
            run.stop.wait(rest_s)

    def _turn(self, run: ShardRun) -> Generator[float, None, int]:
        """One shard's turn, a batch per step (yields the rest after it); returns the ticks deleted."""
        self._turn_ends = time.monotonic() + TURN_S
        with run.lock:
            jobs = [entry.job for entry in run.jobs.values()]
        deleted = 0
        now = self._now_ms()
        horizon = retention_horizon_ms(now, self._retention_ms, max((j.catchup_window_ms for j in jobs), default=0))
        if horizon is not None:
            deleted += yield from self._batches(
                run,
                "retention",
                lambda limit: prune_store.prune_shard_batch(
                    self._engine, shard=run.shard, fence=run.fence, horizon_ms=horizon, limit=limit, now_ms=now
                ),
            )
        due, next_due = self._history_due.get(run.shard, {}), {}  # rebuilt: a deleted job leaves nothing
        for job in jobs:
            if job.history_limit is None:
                continue
            at = next_due[job.id] = due.get(job.id, 0)
            if at > now or not self._in_turn(run):
                continue
            next_due[job.id] = now + history_prune_every_ms(shortest_gap_ms(job.schedule), job.history_limit)

            def job_batch(limit: int, job: Job = job, keep: int = job.history_limit) -> int:
                return prune_store.prune_job_batch(
                    self._engine, shard=run.shard, fence=run.fence, job_id=job.id, keep=keep, limit=limit, now_ms=now
                )

            deleted += yield from self._batches(run, "history_limit", job_batch)
        self._history_due[run.shard] = next_due
        self._behind = self._behind or time.monotonic() >= self._turn_ends
        return deleted

    def _in_turn(self, run: ShardRun) -> bool:
        return run.active and not self._closing and time.monotonic() < self._turn_ends

    def _batches(self, run: ShardRun, reason: str, batch: Callable[[int], int]) -> Generator[float, None, int]:
        """``batch(limit)`` until it deletes fewer than its limit or the shard is no longer ours; yields
        after every batch (the rest before the next one, 0 after the last) so the writer serves the
        other streams between them."""

        def counted(limit: int) -> int:
            n = batch(limit)
            if n:
                metrics.ticks_pruned.labels(reason).inc(n)
            return n

        deleted = 0
        for step in paced_batches(counted, size=self._batch, keep_going=lambda: self._in_turn(run)):
            deleted, self._batch = step.deleted, step.size
            yield step.rest_s
        self.pruned += deleted
        return deleted


class Paced(NamedTuple):
    """What ``paced_batches`` yields after each batch."""

    deleted: int  # rows deleted so far
    size: int  # the next batch's size
    rest_s: float  # the rest before the next batch (0 after the last)
    last: bool  # the batch deleted fewer than its limit: nothing more to delete


def paced_batches(batch: Callable[[int], int], *, size: int, keep_going: Callable[[], bool]) -> Iterator[Paced]:
    """Run ``batch(limit)`` (returns the rows it deleted), a batch per step, until one deletes fewer than
    its limit or ``keep_going()`` is false before a batch.

    Each limit is steered from the last batch's time (``next_batch_size``) and each rest keeps
    pruning to ``DELETE_DUTY`` of the time (``pause_after_batch_ms``).
    """
    deleted = 0
    while keep_going():
        limit = size
        t0 = time.perf_counter()
        n = batch(limit)
        elapsed_ms = (time.perf_counter() - t0) * 1000
        deleted += n
        size = next_batch_size(limit, elapsed_ms)
        last = n < limit
        yield Paced(deleted, size, 0.0 if last else pause_after_batch_ms(elapsed_ms) / 1000, last)
        if last:
            return


def in_batches(
    batch: Callable[[int], int],
    *,
    size: int,
    keep_going: Callable[[], bool],
    rest: Callable[[float], bool],
) -> tuple[int, int]:
    """``paced_batches`` on the caller's thread: ``rest(seconds)`` between batches, which stops them when
    it returns true (a stop event's ``wait``). Returns (rows deleted, the next batch's size), so a
    caller's next run starts at the size this one found.
    """
    deleted = 0
    for step in paced_batches(batch, size=size, keep_going=keep_going):
        deleted, size = step.deleted, step.size
        if step.last or rest(step.rest_s):
            break
    return deleted, size


__all__ = ["TURN_S", "Paced", "Pruner", "in_batches", "paced_batches"]
