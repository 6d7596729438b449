"""The leader's pruning of old ticks: one thread per node, off the hot path.

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
* it rests on the shard's own stop event, so a lost shard ends its pruning at
  once; a batch already under way is fenced like every write (a newer leader's
  raise waits for it or refuses it), and ``FencedOut`` ends the shard's turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

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
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.spec.schedule import shortest_gap_ms
from shardcron.store import retention as prune_store

log = logging.getLogger(__name__)

# One shard's turn ends after this much pruning, and the next shard's begins: a cluster that turns
# retention on over months of ticks works through every shard's backlog side by side, a turn at a
# time, passes following each other at once until none runs out of time.
TURN_S = 5.0


class Pruner:
    def __init__(
        self,
        engine: Engine,
        led_runs: Callable[[], list[ShardRun]],
        *,
        retention_ms: int | None,
        now_ms: Callable[[], int],
        lifeline: Lifeline = UNWATCHED,
    ):
        self._engine = engine
        self._led_runs = led_runs
        self._retention_ms = retention_ms
        self._now_ms = now_ms
        self._batch = MIN_DELETE_BATCH  # steered by each batch's time; kept across passes
        self._history_due: dict[int, dict[str, int]] = {}  # shard -> job id -> when its history is pruned next
        self._closing = threading.Event()
        self._thread = lifeline.thread(self._run, "pruner")
        self.pruned = 0
        self._turn_ends = 0.0  # time.monotonic() at which the current shard's turn is over
        self._behind = False  # a turn ran out of time: the next pass follows at once

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        every_s = prune_every_ms(self._retention_ms) / 1000
        while not self._closing.wait(0 if self._behind else every_s):
            crashpoints.fail_worker()
            self._behind = False
            for run in self._led_runs():
                if self._closing.is_set():
                    return
                try:
                    self.prune_shard(run)
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
                        every_s,
                        extra={"shard": run.shard},
                    )
                except Exception:  # noqa: BLE001 - pruning must not take the node down; the next pass retries
                    log.exception("shard %d: pruning failed", run.shard)

    def prune_shard(self, run: ShardRun) -> int:
        """One turn over one led shard (at most ``TURN_S`` of batches); returns the ticks deleted."""
        self._turn_ends = time.monotonic() + TURN_S
        with run.lock:
            jobs = [entry.job for entry in run.jobs.values()]
        deleted = 0
        now = self._now_ms()
        horizon = retention_horizon_ms(now, self._retention_ms, max((j.catchup_window_ms for j in jobs), default=0))
        if horizon is not None:
            deleted += self._batches(
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

            deleted += self._batches(run, "history_limit", job_batch)
        self._history_due[run.shard] = next_due
        self._behind = self._behind or time.monotonic() >= self._turn_ends
        return deleted

    def _in_turn(self, run: ShardRun) -> bool:
        return run.active and not self._closing.is_set() and time.monotonic() < self._turn_ends

    def _batches(self, run: ShardRun, reason: str, batch: Callable[[int], int]) -> int:
        """``batch(limit)`` until it deletes fewer than its limit or the shard is no longer ours."""

        def counted(limit: int) -> int:
            n = batch(limit)
            if n:
                metrics.ticks_pruned.labels(reason).inc(n)
            return n

        deleted, self._batch = in_batches(
            counted,
            size=self._batch,
            keep_going=lambda: self._in_turn(run),
            rest=run.stop.wait,
        )
        self.pruned += deleted
        return deleted


def in_batches(
    batch: Callable[[int], int],
    *,
    size: int,
    keep_going: Callable[[], bool],
    rest: Callable[[float], bool],
) -> tuple[int, int]:
    """Run ``batch(limit)`` (returns the rows it deleted) until one deletes fewer than its limit, or
    ``keep_going()`` is false, or ``rest(seconds)`` between batches returns true (a stop event's ``wait``).

    Each limit is steered from the last batch's time (``next_batch_size``) and each rest keeps
    pruning to ``DELETE_DUTY`` of the time (``pause_after_batch_ms``). Returns (rows deleted, the next
    batch's size), so a caller's next run starts at the size this one found.
    """
    deleted = 0
    while keep_going():
        limit = size
        t0 = time.perf_counter()
        n = batch(limit)
        elapsed_ms = (time.perf_counter() - t0) * 1000
        deleted += n
        size = next_batch_size(limit, elapsed_ms)
        if n < limit or rest(pause_after_batch_ms(elapsed_ms) / 1000):
            break
    return deleted, size


__all__ = ["TURN_S", "Pruner", "in_batches"]
