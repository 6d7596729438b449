"""The node's scheduling loop: one timer heap over every job of every led shard.

Two heaps, two threads, no thread or task per job:

- the **claim heap** holds each job's next slot, due ``lookahead`` before the
  slot. When entries come due, the slots of one shard are claimed together in
  one fenced transaction, so the database commit is off the path to the start
  (``claimer.py``), by the one writer of tick rows (``tick_writer.py``), which
  also writes the running marks, the results and the prunes;
- the **dispatch heap** holds claimed slots, due at the slot itself (plus the
  job's jitter offset). At that moment the tick starts, after the guard (shard
  still ours, lease provably held). A noop tick completes inline; the others
  of a burst are handed to the node's asyncio loop in one go, one coroutine
  each (``dispatcher.py``, ``tick_results.py``), which marks the row running
  under the fence first.

Results are written in batches by the writer (``recorder.py``). The coordinator calls
``acquire`` when this node wins a shard and ``release`` when it hands one over.
``Scheduler`` is those parts together, over the state they share
(``scheduler_state.py``); this module holds its life cycle and the shard's
takeover and hand-over.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from shardcron import metrics
from shardcron.abc import Lease
from shardcron.clock import SYSTEM_CLOCK, Clock, wall_ms_exact
from shardcron.coordination.calendar_book import CalendarBook
from shardcron.executors import Executors
from shardcron.leader.backfill_runner import BackfillRunner
from shardcron.leader.claimer import CLAIM_RETRY_MS, Claimer, ClaimStream
from shardcron.leader.deadlines import DeadlineWatch
from shardcron.leader.dispatcher import CALENDAR_SKIP_PREFIX, Dispatcher
from shardcron.leader.exec_gate import DEFAULT_SLOTS, ExecGate
from shardcron.leader.heap import ClaimDue, DispatchDue, TimerHeap
from shardcron.leader.job_changes import JobChanges
from shardcron.leader.led_shards import LedShards
from shardcron.leader.marks import RunningMarks
from shardcron.leader.pruner import Pruner
from shardcron.leader.recorder import Recorder
from shardcron.leader.shard_run import JobEntry, ShardRun
from shardcron.leader.stats import Stats
from shardcron.leader.tick_results import TickResults
from shardcron.leader.tick_writer import TickWriter
from shardcron.model import Job, SlotRef
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.rules.takeover import MAX_CATCH_UP_SLOTS, Dispatch, plan_takeover
from shardcron.rules.triggers import trigger_for
from shardcron.runtime.latch import Latch
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.node_loop import NodeLoop
from shardcron.sharding import shard_for

if TYPE_CHECKING:  # imported only when tracing is on (node.py)
    from shardcron.tracing.tick_spans import TickSpans
from shardcron.store import fences as fence_store
from shardcron.store import job_reads, tick_reads
from shardcron.store import jobs as job_store
from shardcron.store import ticks as tick_store
from shardcron.store.ticks import SlotClaim

log = logging.getLogger(__name__)

__all__ = ["CALENDAR_SKIP_PREFIX", "CLAIM_RETRY_MS", "JobEntry", "Scheduler", "ShardRun", "Stats", "jitter_offset_of"]


class Scheduler(Claimer, Dispatcher, TickResults, JobChanges):
    """The loop. ``clock`` gives the wall time slots are compared with (the real one by
    default; a test passes its own and steps the loop with ``claim_due`` and ``dispatch_due``).
    The state its parts share, and who guards it: ``scheduler_state.py``. ``loop``: the node's event loop,
    where the ticks' coroutines run (None: the executors start a loop of their own, as a test's may).
    """

    def __init__(
        self,
        engine: Engine,
        node_id: str,
        shard_count: int,
        *,
        allow_shell: bool = False,
        allow_python: tuple[str, ...] = (),
        lookahead_ms: int = 1000,
        on_fenced: Callable[[int, int], None] = lambda shard, fence: None,
        imports: Iterable[Job] = (),
        workers: int = 64,
        clock: Clock = SYSTEM_CLOCK,
        calendars: CalendarBook | None = None,
        tick_retention_ms: int | None = None,
        executor_slots: int = DEFAULT_SLOTS,
        fair_queuing: bool = True,
        lifeline: Lifeline = UNWATCHED,
        loop: NodeLoop | None = None,
        tick_spans: TickSpans | None = None,
    ):
        self.engine = engine
        self.node_id = node_id
        self.shard_count = shard_count
        self.allow_shell = allow_shell
        self.executors = Executors(
            engine=engine,
            allow_shell=allow_shell,
            allow_python=allow_python,
            workers=workers,
            http_pool=executor_slots,
            lifeline=lifeline,
            loop=loop,
        )
        # At most executor_slots executions at once; the starts beyond wait there, by namespace (exec_gate.py).
        self._gate: ExecGate[tuple[int, int, Dispatch]] = ExecGate(executor_slots, fair=fair_queuing)
        metrics.namespace_waiting.watch(self._gate.waiting_by_namespace)
        self.lookahead_ms = lookahead_ms
        self._report_fenced = on_fenced
        self._now_ms = self.now_ms = clock.wall_ms  # bound once: it is on every hot path
        self._now_ms_exact = wall_ms_exact if clock is SYSTEM_CLOCK else clock.wall_ms  # with the fraction
        self.calendars = calendars if calendars is not None else CalendarBook()
        self.stats = Stats()
        self._imports: dict[int, list[Job]] = defaultdict(list)
        for job in imports:
            self._imports[shard_for(job.id, shard_count)].append(job)
        self.led = LedShards()
        self._closing = False
        self.recorder = Recorder(engine, self._fenced)
        self.tick_spans = tick_spans
        if tick_spans is not None:  # tracing on: a last attempt's span ends as its row is written or refused
            self.recorder.listeners.append(tick_spans.written)
            self.recorder.rejected_listeners.append(tick_spans.rejected)
        self.marks = RunningMarks(engine)
        # Deletes expired ticks of the led shards, in small batches with rests between them (pruner.py).
        self.pruner = Pruner(engine, self.led.runs, retention_ms=tick_retention_ms, now_ms=self._now_ms)
        self.claim_stream = ClaimStream(self)
        # Judges the slots' deadlines when they come due: after the results queued before (deadlines.py).
        self.deadlines = DeadlineWatch(engine, self._now_ms, lambda s, f: self.led.current(s, f) is not None)
        # The one writer of tick rows, by priority: a tick must not wait to start, a due slot to be claimed.
        # When a write finds the store down, the claims due then fail at once (tried again later: their
        # lookahead absorbs it); marks, results, deadlines and prunes stay queued for their own next batch.
        self.writer = TickWriter(
            [self.marks, self.claim_stream, self.recorder, self.deadlines, self.pruner],
            fail_when_store_down=[self.claim_stream],
            lifeline=lifeline,
        )
        self._claims = TimerHeap(on_new_top=self.claim_stream.wake)  # ClaimDue
        self._dispatch = TimerHeap()  # DispatchDue
        self._ticks: set[asyncio.Task] = set()  # the ticks' coroutines (the loop keeps only weak references)
        self.backfills = BackfillRunner(self)  # the led shards' backfills, each shard's on a thread of its own
        self._lifeline = lifeline
        self._threads = [lifeline.thread(self._dispatch_loop, "dispatcher")]

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self.writer.start()
        for t in self._threads:
            t.start()

    def close(self) -> None:
        self._closing = True
        self.backfills.close()
        self._claims.wake()
        self._dispatch.wake()
        for t in self._threads:
            if t.is_alive():  # close() also runs when start-up failed before start()
                t.join(5)
        try:
            self.executors.loop.run(self._cancel_ticks, 5.0)
        except Exception:  # noqa: BLE001 - the loop is gone or stuck: closing it below drops them
            log.warning("tick coroutines not cancelled within 5 s of the stop")
        self.writer.close()  # results written out (marks, claims and prunes stop at once)
        self.executors.close()
        if self.tick_spans is not None:
            self.tick_spans.close()

    async def _cancel_ticks(self) -> None:
        ticks = list(self._ticks)
        for task in ticks:
            task.cancel()
        await asyncio.gather(*ticks, return_exceptions=True)

    # -- ShardWork --------------------------------------------------------------------

    def job_count(self, shard: int) -> int:
        run = self.led.run_of(shard)
        if run is None:
            return 0
        with run.lock:
            return len(run.jobs)

    def in_flight(self, shard: int) -> int:
        """Runs of the shard's jobs going on now (0 when the shard is not led here)."""
        run = self.led.run_of(shard)
        if run is None:
            return 0
        with run.lock:
            return run.in_flight

    def set_shard_count(self, shard_count: int) -> None:
        imports = [j for jobs in self._imports.values() for j in jobs]
        self.shard_count = shard_count
        self._imports = defaultdict(list)
        for job in imports:
            self._imports[shard_for(job.id, shard_count)].append(job)

    def shard_run(self, shard: int) -> ShardRun | None:
        """The shard's leadership here while it is active (None otherwise): the notifier's view of it."""
        run = self.led.run_of(shard)
        return run if run is not None and run.active else None

    def led_shards(self) -> list[int]:
        return self.led.shards()

    def run_of(self, shard: int) -> ShardRun | None:
        """The shard's leadership here, active or not (None when it is not led here)."""
        return self.led.run_of(shard)

    def acquire(self, shard: int, fence: int, stop: Latch, session: Lease) -> None:
        now = self._now_ms()
        fence_store.raise_fence(self.engine, shard, fence, self.node_id, now)
        if self._imports.get(shard):
            n = job_store.import_jobs(
                self.engine, self._imports[shard], shard=shard, fence=fence, node_id=self.node_id, now_ms=now
            )
            if n:
                log.info("shard %d: imported %d jobs from the jobs file", shard, n, extra={"shard": shard})
        jobs = job_reads.load_shard_jobs(self.engine, shard)
        last = tick_reads.last_ticks(self.engine, shard)
        orphans = tick_reads.unresolved_ticks(self.engine, shard)
        triggers = {j.id: trigger_for(j.schedule) for j in jobs}
        now = self._now_ms()
        plan = plan_takeover(jobs, triggers, last, orphans, fence, now)
        kw = dict(shard=shard, fence=fence)
        if plan.reclaim:
            tick_store.take_over(self.engine, [d.slot for d in plan.reclaim], node_id=self.node_id, **kw)
        if plan.abandon:
            tick_store.abandon_ticks(
                self.engine,
                plan.abandon,
                now_ms=now,
                reason="its leader died mid-run and the retry budget is spent",
                **kw,
            )
            self.stats.add(abandoned=len(plan.abandon))
        if plan.skip:
            tick_store.skip_ticks(
                self.engine,
                [SlotClaim(s.job_id, s.scheduled_at_ms) for s in plan.skip],
                node_id=self.node_id,
                now_ms=now,
                reason="catch-up policy",
                **kw,
            )
            self.stats.add(skipped=len(plan.skip))
        claimed = []
        # A missed slot a calendar excludes was never owed: not caught up.
        by_id = {j.id: j for j in jobs}
        owed = [s for s in plan.run if not self._calendar_excludes(by_id.get(s.job_id), s.scheduled_at_ms)]
        if owed:
            claimed = tick_store.claim_ticks(
                self.engine,
                [SlotClaim(s.job_id, s.scheduled_at_ms) for s in owed],
                node_id=self.node_id,
                now_ms=now,
                **kw,
            )
            self.stats.add(caught_up=len(claimed))
            metrics.caught_up.inc(len(claimed))
        for job_id, count in plan.beyond_window.items():
            log.warning(
                "shard %d: job %s missed %d slots it will not run (older than its catch-up window, or "
                "past the %d-slot catch-up cap)",
                shard,
                job_id,
                count,
                MAX_CATCH_UP_SLOTS,
                extra={"shard": shard, "job": job_id},
            )
        # Every row written above, and the predecessor's, is there to judge now.
        judging = self.deadlines.take_over(shard, fence, jobs)
        run = ShardRun(shard, fence, stop, session)
        with run.lock:
            for job in jobs:
                run.jobs[job.id] = JobEntry(
                    job, triggers[job.id], gen=run.next_gen(), claimed_through=plan.resume_after.get(job.id, now)
                )
            entries = list(run.jobs.values())
        self.led.add(run)
        # Orphans and missed slots start at their jittered time: at once when it has passed (a
        # caught-up slot is late already), else when it comes (the old leader would have waited too).
        for d in plan.reclaim:
            self.push_dispatch(
                run, d if d.manual else d._replace(offset_ms=jitter_offset_of(by_id.get(d.slot.job_id), d.slot))
            )
        for s in claimed:
            self.push_dispatch(run, Dispatch(s, 1, catch_up=True, offset_ms=jitter_offset_of(by_id.get(s.job_id), s)))
        for entry in entries:
            self._push_next_claim(run, entry)
        self.backfills.shard_acquired(run)  # a backfill a former leader began continues from its cursor
        log.info(
            "shard %d: leading with fence %d: %d jobs, %d caught up, %d re-claimed, %d skipped, %d abandoned, "
            "%d deadlines to judge",
            shard,
            fence,
            len(jobs),
            len(claimed),
            len(plan.reclaim),
            len(plan.skip),
            len(plan.abandon),
            judging,
            extra={"shard": shard, "fence": fence},
        )

    def release(self, shard: int, grace_s: float, on_done: Callable[[], None]) -> None:
        run = self.led.run_of(shard)
        if run is None:
            on_done()
            return
        with run.lock:
            run.released = True
            parked = run.lines.drop_parked()  # slots waiting in their jobs' lines: left claimed too
        if parked:
            self.stats.add(not_started=parked)
            metrics.not_started.inc(parked)
        # Its starts waiting for a slot are not started here: their rows stay claimed for the next leader.
        waiting = self._gate.remove_where(lambda ns, item: item[0] == shard and item[1] == run.fence)
        if waiting:
            self.stats.add(not_started=len(waiting))
            metrics.not_started.inc(len(waiting))
            log.info(
                "shard %d: %d starts waiting for an executor slot left for the next leader",
                shard,
                len(waiting),
                extra={"shard": shard},
            )

        def drain():
            with run.lock:
                run.idle.wait_for(lambda: run.in_flight == 0, timeout=grace_s)
                still = run.in_flight
            if still:
                log.warning("shard %d: %d ticks still running after %.1fs; cancelling them", shard, still, grace_s)
                run.stop.set()
            self.recorder.flush(shard, timeout_s=max(grace_s, 1.0))
            self.led.forget(run)
            on_done()

        if grace_s <= 0:
            run.stop.set()
            self.led.forget(run)
            on_done()
        else:
            # It ends once the shard is drained; raising, it would leave the shard resigning for good.
            self._lifeline.thread(drain, f"release-{shard}", may_end=True).start()

    def set_namespace_settings(self, mapping: dict[str, NamespaceSettings]) -> None:
        """Each namespace's weight (its share of the executor slots under overload) and quota (its
        ``max_running`` executions on this node); a namespace not named runs with the defaults."""
        self._gate.set_settings(mapping)
        self._wake_gate()  # a raised max_running may let waiting starts go on slots free now

    def oldest_overdue_s(self) -> float:
        """Seconds since the oldest slot that is due but not started (the next-fire watchdog)."""
        now = self._now_ms()
        claim_top: ClaimDue | None = self._claims.top()
        dispatch_top: DispatchDue | None = self._dispatch.top()
        due = [
            s
            for s in (claim_top.slot_ms if claim_top else None, dispatch_top.due_ms if dispatch_top else None)
            if s is not None and s < now
        ]
        # A second of slack: claims are taken a lookahead early and started on time.
        return max(0.0, (now - min(due)) / 1000.0 - 1.0) if due else 0.0

    # -- one step of the dispatch loop (its thread waits, then calls it; a test calls it, and claim_due) --

    def dispatch_due(self) -> int:
        """Start every claimed slot due now; returns how many dispatch entries were taken."""
        due = self._dispatch.take_due(self._now_ms(), 0)
        self._dispatch_many(due)
        return len(due)


def jitter_offset_of(job: Job | None, slot: SlotRef) -> int:
    """The slot's jitter offset under ``job`` (0 for a deleted job or one without jitter)."""
    return jitter_offset_ms(slot.job_id, slot.scheduled_at_ms, job.jitter_ms) if job is not None else 0
