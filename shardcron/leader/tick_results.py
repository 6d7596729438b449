"""A started tick on the executors' loop, and how each tick ends: recorded, skipped, settled or retried.

A tick with an executor runs as one coroutine on the node's asyncio loop
(``runner.run_tick``: its mark under the fence, its executor, its result);
when it ends it leaves its job's line (``job_line.py``), which may let the
next waiting slot of the job be judged again, and hands its executor slot to
the next waiting start (``exec_gate.py``). A store error before the start puts
the slot back on the dispatch heap ``CLAIM_RETRY_MS`` later. Results go to the
``Recorder``, which writes them in batches.
"""

from __future__ import annotations

import asyncio
import logging

from shardcron import metrics
from shardcron.jobkey import namespace_of
from shardcron.leader.claimer import CLAIM_RETRY_MS
from shardcron.leader.recorder import ResultWrite
from shardcron.leader.runner import StoreDownBeforeStart, TickRun, run_tick
from shardcron.leader.scheduler_state import SchedulerState
from shardcron.leader.shard_run import ShardRun
from shardcron.model import ExecutionResult, TickStatus
from shardcron.rules.takeover import Dispatch

log = logging.getLogger(__name__)


class TickResults(SchedulerState):
    """The ``Scheduler``'s result side (a base class of it; the state it reads is ``SchedulerState``)."""

    def _start_on_loop(self, ticks: list[tuple[ShardRun, Dispatch, TickRun]]) -> None:
        loop = asyncio.get_running_loop()
        for run, d, tick in ticks:
            task = loop.create_task(self._run_tick(run, d, tick))
            self._ticks.add(task)
            task.add_done_callback(self._ticks.discard)

    async def _run_tick(self, run: ShardRun, d: Dispatch, tick: TickRun) -> None:
        job_id, shard, fence = d.slot.job_id, run.shard, run.fence
        started = again = False

        def slot_started() -> None:  # ADMITTING -> GOING (job_line.py): a later slot's turn may come now
            nonlocal started
            started = True
            with run.lock:
                self._let_go(run, run.lines.started(job_id, d.slot.scheduled_at_ms))

        try:
            status = await run_tick(
                tick,
                self.marks,
                self.recorder,
                self.executors,
                self._fenced,
                lambda late: self._started(shard, late),
                now_ms=self._now_ms,
                on_slot_started=slot_started,
                spans=self.tick_spans,
                claimed_at_ms=d.claimed_at_ms,
            )
            if status is None:
                self.stats.add(not_started=1)
                metrics.not_started.inc()
            else:
                self.stats.add_status(status)
        except StoreDownBeforeStart as e:
            log.warning(
                "tick %s@%d: %s; trying again in %d ms",
                job_id,
                d.slot.scheduled_at_ms,
                e,
                CLAIM_RETRY_MS,
                extra={"shard": shard, "job": job_id, "fence": fence},
            )
            if run.active:
                again = True
                self.push_dispatch(run, d._replace(attempt=e.attempt), not_before_ms=self._now_ms() + CLAIM_RETRY_MS)
        except Exception:  # noqa: BLE001 - a bug in one tick must not stop the others
            log.exception("tick %s@%d crashed", job_id, d.slot.scheduled_at_ms)
        finally:
            self._done(run, d, started=started, again=again)

    def _skip(self, run: ShardRun, d: Dispatch, reason: str) -> None:
        """Record the slot skipped, decided now (the row's times: the audit judges an overlap skip by them)."""
        now = self._now_ms()
        self._record(run, d, ExecutionResult(False, now, now, error=reason), TickStatus.SKIPPED)
        self._settle(run, d)

    def _settle(self, run: ShardRun, d: Dispatch) -> None:
        """The slot leaves its job's line without starting (recorded, completed inline, or dropped)."""
        self._let_go(run, run.lines.settled(d.slot.job_id, d.slot.scheduled_at_ms))

    def _let_go(self, run: ShardRun, parked: Dispatch | None) -> None:
        """WAITING -> DUE: the job's line moved, its next waiting slot is judged again, now."""
        if parked is not None:
            self.push_dispatch(run, parked)  # it was due already: at once

    def _record(self, run: ShardRun, d: Dispatch, result: ExecutionResult, status: TickStatus) -> None:
        w = ResultWrite(run.shard, run.fence, d.slot, d.attempt, result, status)
        self.recorder.put(w)
        self.stats.add_status(status)

    def _started(self, shard: int, lateness_ms: int) -> None:
        self.stats.add(started=1)
        self._observe_lateness(shard, lateness_ms)

    def _observe_lateness(self, shard: int, lateness_ms: int, count: int = 1) -> None:
        metrics.tick_lateness.observe(str(shard), max(0, lateness_ms) / 1000.0, count)

    def _done(self, run: ShardRun, d: Dispatch, *, started: bool, again: bool) -> None:
        """A tick's coroutine has ended: off its job's line (GOING or ADMITTING -> settled), whatever
        became of its entry; ``again``: it comes due again after a failed mark (-> ADMITTING)."""
        job_id = d.slot.job_id
        with run.lock:
            run.tick_ended()
            if again:
                run.lines.admitting(job_id, d.slot.scheduled_at_ms)
            if started:
                self._let_go(run, run.lines.ended(job_id))
            elif not again:
                self._settle(run, d)
        metrics.running_executors.dec()
        self._gate.leave(namespace_of(job_id))
        if self._gate.waiting:
            self._serve_waiting()

    def _fenced(self, shard: int, fence: int, count: int = 1) -> None:
        self.stats.add(fenced_rejections=count)
        metrics.fenced_writes.inc(count)
        self._report_fenced(shard, fence)
