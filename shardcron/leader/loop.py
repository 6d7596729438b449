"""The node's scheduling loop: one timer heap over every job of every led shard.

Two heaps, two threads, no thread or task per job:

- the **claim heap** holds each job's next slot, due ``lookahead`` before the
  slot. When entries come due, the slots of one shard are claimed together in
  one fenced transaction, so the database commit is off the path to the start;
- the **dispatch heap** holds claimed slots, due at the slot itself (plus the
  job's jitter offset, ``jitter.jitter_offset_ms``, for a job with one). At that
  moment the tick starts, after the guard (shard still ours, lease provably
  held). A noop tick completes inline; the others of a burst are handed to the
  node's asyncio loop in one go, one coroutine each (``runner.run_tick``),
  which marks the row running under the fence first.

Results are written in batches by the ``Recorder``. The coordinator calls
``acquire`` when this node wins a shard and ``release`` when it hands one over.

Starts come first. A burst of thousands of starts is pure Python, and the
claimer and the result writer would take the GIL from it in 5 ms turns
(their JSON, their statements' Python), making the burst's last start later:
with 1 s jobs, the claims of the next slot fall due, ``lookahead`` early,
exactly when this slot's burst starts, and its results a moment after. So
each of the two, before its database work, waits while the dispatcher is
starting a burst of at least ``BURST_MIN`` starts or one is due within
``QUIET_BEFORE_BURST_MS``, for at most ``YIELD_TO_STARTS_MAX_MS``; the claims
are still a lookahead early, and the results a few tens of ms later. Slots
spread over the second make no bursts, and nobody waits for them:

    check: dispatcher starting a burst (taken off its heap, not yet handled),
           or a burst due within QUIET_BEFORE_BURST_MS?
      no  -> go on
      yes -> waited YIELD_TO_STARTS_MAX_MS already? -> go on
             else sleep until the burst ends or is due (at most 5 ms), check again

A burst is started in parts of ``LOOK_AGAIN_EVERY`` starts; between two parts
the dispatcher takes what came due since the burst began and starts it first.
A burst of one namespace's thousands of starts (most of which will wait in the
gate anyway) then delays another namespace's start by one part, not by the
whole burst. And the cyclic collector, which stops every thread, runs between
starts: after each pass the dispatcher collects if a generation is due and
its pause fits the gap before the next start (``gc_pacing.py``).

The dispatcher needs the GIL at the instant a start is due, and on a busy node
the threads that hand it to each other on every socket call keep it from a
freshly woken thread for milliseconds. So it wakes early by what getting the
GIL has recently taken and sleeps the rest holding it (``gil_lead.py``,
``--start-lead-max-ms``), within a budget of a quarter of the time.

Executor slots (``exec_gate.py``, issue 15). At most ``executor_slots``
executions run at once. A start that finds none free waits in the gate, by
namespace; so does every later start, noop included, while anything waits.
Each run that ends (``_done``, on the loop) hands its slot to the next start
the queue picks (``_serve_waiting``), which passes the burst's guard and
``_start``'s checks again at that moment and records its real start. Nothing
is dropped: a released shard's waiting starts are taken out and counted not
started, their rows left claimed for the next leader. With nothing waiting a
noop pays one unlocked check (``ExecGate.open``); a start with an executor takes
its slot under the gate's lock.

Overlap (``job_line.py``, ``policies.overlap_verdict``). A slot is skipped for
overlap only while an earlier run of its job has started (been handed to its
executor) and not finished. A slot behind an earlier one that is due and not
started (a catch-up slot waiting its turn, a start in the gate or on its way
to the loop) waits in the job's line, in slot order, and is judged when the
line moves: an earlier slot of the job started, ended, or was settled.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

from shardcron.runtime import crashpoints
from shardcron import metrics
from shardcron.clock import SYSTEM_CLOCK, Clock, wall_ms_exact
from shardcron.coordination.session import Session
from shardcron.errors import JobRunning, StoreUnavailable, TriggerBusy
from shardcron.executors import Executors
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.model import ExecutionResult, ExecutorKind, Job, SlotRef, TickStatus
from shardcron.leader.calendar_book import CalendarBook, Unknown
from shardcron.rules.calendars import next_allowed
from shardcron.leader.exec_gate import DEFAULT_SLOTS, ExecGate
from shardcron.leader.gc_pacing import IDLE_CHECK_S, GcPacer
from shardcron.leader.gil_lead import LEAD_MAX_MS, StartLead
from shardcron.leader.backfill_runner import BackfillRunner
from shardcron.leader.heap import ClaimDue, DispatchDue, TimerHeap
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.policies import (
    OVERLAP_SKIP_REASON,
    OverlapVerdict,
    disowned_slot,
    overlap_allows,
    overlap_verdict,
)
from shardcron.leader.marks import RunningMarks
from shardcron.leader.pruner import Pruner
from shardcron.leader.realtime import make_realtime
from shardcron.leader.recorder import Recorder, ResultWrite
from shardcron.leader.runner import StoreDownBeforeStart, TickRun, run_tick
from shardcron.leader.shard_run import JobEntry, ShardRun
from shardcron.leader.stats import Stats
from shardcron.rules.takeover import MAX_CATCH_UP_SLOTS, Dispatch, plan_takeover
from shardcron.rules.triggers import trigger_for
from shardcron.sharding import shard_for
from shardcron.store import fences as fence_store
from shardcron.store import jobs as job_store
from shardcron.store import ticks as tick_store
from shardcron.store.ticks import SlotClaim
from shardcron.jobkey import namespace_of
from shardcron.rules.namespace_settings import NamespaceSettings

log = logging.getLogger(__name__)

CLAIM_RETRY_MS = 500  # after a store error, claims and starts are retried this soon (slots stay owed)
CLAIM_BATCH_MS = 50  # claim entries due within this of each other are claimed in one transaction
QUIET_BEFORE_BURST_MS = CLAIM_BATCH_MS + 10  # claims and result writes wait for a burst due this soon...
YIELD_TO_STARTS_MAX_MS = 250  # ...or under way, for at most this long (see the module doc)
GUARD_EVERY = 64  # a burst re-checks its shard and session this often (see _start_group)
LOOK_AGAIN_EVERY = 64  # starts of a burst between two looks for ticks due since it began (_dispatch_many)
BURST_MIN = 200  # starts due at one millisecond that make a burst worth waiting for (about 2 ms of starts)
# The error of a claimed slot a calendar excluded by the time it was due (a change within the lookahead).
CALENDAR_SKIP_PREFIX = "excluded by a calendar changed after the slot was claimed: "

__all__ = ["CLAIM_RETRY_MS", "JobEntry", "Scheduler", "ShardRun", "Stats"]


class Scheduler:
    """The loop. ``clock`` gives the wall time slots are compared with (the real one by
    default; a test passes its own and steps the loop with ``claim_due`` and ``dispatch_due``).

    Shared state and who guards it: ``_runs`` (the led shards; the coordinator,
    the release threads, the API, the claimer and the dispatcher) under
    ``_runs_lock``; each shard's jobs and runs under its ``ShardRun.lock``; each
    heap under its own condition; ``stats`` under its own lock.
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
        realtime_dispatcher: bool = False,
        start_lead_max_ms: float = LEAD_MAX_MS,
        lifeline: Lifeline = UNWATCHED,
    ):
        self.engine = engine
        self.node_id = node_id
        self.shard_count = shard_count
        self.allow_shell = allow_shell
        self.executors = Executors(engine=engine, allow_shell=allow_shell, allow_python=allow_python,
                                   workers=workers, http_pool=executor_slots, lifeline=lifeline)
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
        self._runs: dict[int, ShardRun] = {}
        self._runs_lock = threading.Lock()
        self._claims = TimerHeap()  # ClaimDue
        self._dispatch = TimerHeap()  # DispatchDue
        self._closing = False
        self._threads_running = False  # a test steps the loop itself, with nobody to yield to
        self._realtime_dispatcher = realtime_dispatcher  # under SCHED_FIFO (realtime.py)
        self._start_lead = StartLead(start_lead_max_ms)  # 0: the dispatcher never holds the GIL ahead of a start
        self.recorder = Recorder(engine, self._fenced, before_write=self._yield_to_starts, lifeline=lifeline)
        self.marks = RunningMarks(engine, lifeline=lifeline)
        # Deletes expired ticks of the led shards; waits for bursts of starts like the recorder.
        self.pruner = Pruner(engine, self._led_runs, retention_ms=tick_retention_ms, now_ms=self._now_ms,
                             before_batch=self._yield_to_starts, lifeline=lifeline)
        self._ticks: set[asyncio.Task] = set()  # the ticks' coroutines (the loop keeps only weak references)
        self.backfills = BackfillRunner(self)  # the led shards' backfills, each shard's on a thread of its own
        self._lifeline = lifeline
        self._threads = [
            lifeline.thread(self._claim_loop, "claimer"),
            lifeline.thread(self._dispatch_loop, "dispatcher"),
        ]

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self._threads_running = True
        self.recorder.start()
        self.pruner.start()
        for t in self._threads:
            t.start()
        if self._realtime_dispatcher:
            make_realtime(self._threads[1].native_id)

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
        self.pruner.close()
        self.recorder.close()
        self.marks.close()
        self.executors.close()

    async def _cancel_ticks(self) -> None:
        ticks = list(self._ticks)
        for task in ticks:
            task.cancel()
        await asyncio.gather(*ticks, return_exceptions=True)

    # -- ShardWork --------------------------------------------------------------------

    def job_count(self, shard: int) -> int:
        run = self._run_of(shard)
        if run is None:
            return 0
        with run.lock:
            return len(run.jobs)

    def in_flight(self, shard: int) -> int:
        """Runs of the shard's jobs going on now (0 when the shard is not led here)."""
        run = self._run_of(shard)
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
        run = self._run_of(shard)
        return run if run is not None and run.active else None

    def led_shards(self) -> list[int]:
        with self._runs_lock:
            return sorted(self._runs)

    def acquire(self, shard: int, fence: int, stop: threading.Event, session: Session) -> None:
        now = self._now_ms()
        fence_store.raise_fence(self.engine, shard, fence, self.node_id, now)
        if self._imports.get(shard):
            n = job_store.import_jobs(self.engine, self._imports[shard], shard=shard, fence=fence,
                                      node_id=self.node_id, now_ms=now)
            if n:
                log.info("shard %d: imported %d jobs from the jobs file", shard, n, extra={"shard": shard})
        jobs = job_store.load_shard_jobs(self.engine, shard)
        last = tick_store.last_ticks(self.engine, shard)
        orphans = tick_store.unresolved_ticks(self.engine, shard)
        triggers = {j.id: trigger_for(j.schedule) for j in jobs}
        now = self._now_ms()
        plan = plan_takeover(jobs, triggers, last, orphans, fence, now)
        kw = dict(shard=shard, fence=fence)
        if plan.reclaim:
            tick_store.take_over(self.engine, [d.slot for d in plan.reclaim], node_id=self.node_id, **kw)
        if plan.abandon:
            tick_store.abandon_ticks(self.engine, plan.abandon, now_ms=now,
                                     reason="its leader died mid-run and the retry budget is spent", **kw)
            self.stats.add(abandoned=len(plan.abandon))
        if plan.skip:
            tick_store.skip_ticks(self.engine, [SlotClaim(s.job_id, s.scheduled_at_ms) for s in plan.skip],
                                  node_id=self.node_id, now_ms=now, reason="catch-up policy", **kw)
            self.stats.add(skipped=len(plan.skip))
        claimed = []
        # A missed slot a calendar excludes was never owed: not caught up.
        by_id = {j.id: j for j in jobs}
        owed = [s for s in plan.run if not self._calendar_excludes(by_id.get(s.job_id), s.scheduled_at_ms)]
        if owed:
            claimed = tick_store.claim_ticks(self.engine, [SlotClaim(s.job_id, s.scheduled_at_ms) for s in owed],
                                             node_id=self.node_id, now_ms=now, **kw)
            self.stats.add(caught_up=len(claimed))
            metrics.caught_up.inc(len(claimed))
        for job_id, count in plan.beyond_window.items():
            log.warning("shard %d: job %s missed %d slots it will not run (older than its catch-up window, or "
                        "past the %d-slot catch-up cap)", shard, job_id, count, MAX_CATCH_UP_SLOTS,
                        extra={"shard": shard, "job": job_id})
        run = ShardRun(shard, fence, stop, session)
        with run.lock:
            for job in jobs:
                run.jobs[job.id] = JobEntry(job, triggers[job.id], gen=run.next_gen(),
                                            claimed_through=plan.resume_after.get(job.id, now))
            entries = list(run.jobs.values())
        with self._runs_lock:
            self._runs[shard] = run
        # Orphans and missed slots start at their jittered time: at once when it has passed (a
        # caught-up slot is late already), else when it comes (the old leader would have waited too).
        for d in plan.reclaim:
            self._push_dispatch(run, d if d.manual else d._replace(offset_ms=_offset(by_id.get(d.slot.job_id), d.slot)))
        for s in claimed:
            self._push_dispatch(run, Dispatch(s, 1, catch_up=True, offset_ms=_offset(by_id.get(s.job_id), s)))
        for entry in entries:
            self._push_next_claim(run, entry)
        self.backfills.shard_acquired(run)  # a backfill a former leader began continues from its cursor
        log.info("shard %d: leading with fence %d: %d jobs, %d caught up, %d re-claimed, %d skipped, %d abandoned",
                 shard, fence, len(jobs), len(claimed), len(plan.reclaim), len(plan.skip), len(plan.abandon),
                 extra={"shard": shard, "fence": fence})

    def release(self, shard: int, grace_s: float, on_done: Callable[[], None]) -> None:
        run = self._run_of(shard)
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
            log.info("shard %d: %d starts waiting for an executor slot left for the next leader", shard,
                     len(waiting), extra={"shard": shard})

        def drain():
            with run.lock:
                run.idle.wait_for(lambda: run.in_flight == 0, timeout=grace_s)
                still = run.in_flight
            if still:
                log.warning("shard %d: %d ticks still running after %.1fs; cancelling them", shard, still, grace_s)
                run.stop.set()
            self.recorder.flush(shard, timeout_s=max(grace_s, 1.0))
            self._forget(run)
            on_done()

        if grace_s <= 0:
            run.stop.set()
            self._forget(run)
            on_done()
        else:
            # It ends once the shard is drained; raising, it would leave the shard resigning for good.
            self._lifeline.thread(drain, f"release-{shard}", may_end=True).start()

    def set_namespace_settings(self, mapping: dict[str, NamespaceSettings]) -> None:
        """Each namespace's weight (its share of the executor slots under overload) and quota (its
        ``max_running`` executions on this node); a namespace not named runs with the defaults."""
        self._gate.set_settings(mapping)
        self._wake_gate()  # a raised max_running may let waiting starts go on slots free now

    # -- job changes (the API calls these on the shard's leader) ---------------------

    def upsert_job(self, shard: int, job: Job) -> None:
        run = self._run_of(shard)
        if run is None:
            return
        trigger = trigger_for(job.schedule)
        # The new definition owes every slot of its own schedule after it took
        # effect; a slot the old one already claimed is simply not claimed again.
        # Runs of the old definition still going stay on the job's line (run.lines, keyed by job id).
        with run.lock:
            entry = run.jobs[job.id] = JobEntry(job, trigger, gen=run.next_gen(), claimed_through=job.active_since_ms)
        self._push_next_claim(run, entry)

    def calendars_changed(self, names: set[str]) -> None:
        """Calendars ``names`` were put or deleted: every led job that names one is scheduled again
        under them, from its last claimed slot (a slot already claimed is re-checked before it starts)."""
        if not names:
            return
        with self._runs_lock:
            runs = list(self._runs.values())
        for run in runs:
            with run.lock:
                renewed = []
                for job_id, e in list(run.jobs.items()):
                    if e.job.calendars and not names.isdisjoint(e.job.calendars):
                        # A new gen: the heap entry of the old schedule finds it and is dropped.
                        renewed.append(JobEntry(e.job, e.trigger, gen=run.next_gen(), claimed_through=e.claimed_through))
                        run.jobs[job_id] = renewed[-1]
            if renewed:
                self._claims.push_many(self._next_claims(run, renewed))
                log.info("shard %d: %d jobs rescheduled after a change to calendars %s", run.shard, len(renewed),
                         ", ".join(sorted(names)), extra={"shard": run.shard})

    def remove_job(self, shard: int, job_id: str) -> None:
        run = self._run_of(shard)
        if run is not None:
            with run.lock:
                run.jobs.pop(job_id, None)

    def trigger_now(self, shard: int, job_id: str) -> SlotRef:
        """Run ``job_id`` now as an extra, manual tick recorded like any other."""
        run = self._run_of(shard)
        if run is None:
            raise KeyError(job_id)
        with run.lock:
            entry = run.jobs.get(job_id)
            if entry is None:
                raise KeyError(job_id)
            # Refused now, not recorded skipped later: the caller learns why at once.
            if not overlap_allows(entry.job.overlap, run.runs_of(job_id)):
                raise JobRunning(job_id)
        now = self._now_ms()
        # A manual tick takes the current millisecond; if a slot already sits
        # there (a scheduled one, or another trigger), the next free one.
        for at in range(now, now + 50):
            got = tick_store.claim_ticks(self.engine, [SlotClaim(job_id, at, manual=True)], shard=shard,
                                         fence=run.fence, node_id=self.node_id, now_ms=now)
            if got:
                self._push_dispatch(run, Dispatch(got[0], 1, manual=True))
                return got[0]
        raise TriggerBusy(job_id, now)

    def oldest_overdue_s(self) -> float:
        """Seconds since the oldest slot that is due but not started (the next-fire watchdog)."""
        now = self._now_ms()
        claim_top: ClaimDue | None = self._claims.top()
        dispatch_top: DispatchDue | None = self._dispatch.top()
        due = [s for s in (claim_top and claim_top.slot_ms, dispatch_top and dispatch_top.due_ms)
               if s is not None and s < now]
        # A second of slack: claims are taken a lookahead early and started on time.
        return max(0.0, (now - min(due)) / 1000.0 - 1.0) if due else 0.0

    # -- one step of each loop (the threads wait, then call these; a test calls them) --

    def claim_due(self) -> int:
        """Claim every slot whose claim is due now; returns how many claim entries were taken."""
        due = self._claims.take_due(self._now_ms(), CLAIM_BATCH_MS)
        self._claim(due)
        return len(due)

    def dispatch_due(self) -> int:
        """Start every claimed slot due now; returns how many dispatch entries were taken."""
        due = self._dispatch.take_due(self._now_ms(), 0)
        try:
            self._dispatch_many(due)
        finally:
            self._dispatch.handled()
        return len(due)

    # -- shards and heaps ------------------------------------------------------------

    def _led_runs(self) -> list[ShardRun]:
        with self._runs_lock:
            return list(self._runs.values())

    def _run_of(self, shard: int) -> ShardRun | None:
        with self._runs_lock:
            return self._runs.get(shard)

    def _forget(self, run: ShardRun) -> None:
        with self._runs_lock:
            if self._runs.get(run.shard) is run:  # not a newer leadership of the same shard
                del self._runs[run.shard]

    def _current(self, shard: int, fence: int) -> ShardRun | None:
        run = self._run_of(shard)
        return run if run is not None and run.fence == fence and run.active else None

    def _push_next_claim(self, run: ShardRun, entry: JobEntry) -> None:
        self._claims.push_many(self._next_claims(run, [entry]))

    def _next_claims(self, run: ShardRun, entries: Iterable[JobEntry]) -> list[ClaimDue]:
        """The claim-heap entries for each job's next slot (none for a paused job or a trigger that has ended)."""
        out = []
        for entry in entries:
            if entry.job.paused:
                continue
            if entry.job.calendars:  # the one check a job without calendars pays
                nxt = self._next_allowed_slot(entry)
            else:
                nxt = entry.trigger.next_after(entry.claimed_through)
            if nxt is not None:
                out.append(ClaimDue(nxt - self.lookahead_ms, run.shard, run.fence, entry.job.id, entry.gen, nxt))
        return out

    def _next_allowed_slot(self, entry: JobEntry) -> int | None:
        """The job's next slot its calendars allow; None while one of them does not exist (nothing is
        owed then; ``calendars_changed`` schedules it again when the calendar is put)."""
        cals = self.calendars.resolve(entry.job.calendars)
        if isinstance(cals, Unknown):
            log.warning("job %s: %s", entry.job.id, cals.reason, extra={"job": entry.job.id})
            return None
        found = next_allowed(entry.trigger, cals, entry.claimed_through)
        if found.first_skipped_ms is not None:
            metrics.calendar_skips.inc()
        return found.slot_ms

    def _calendar_excludes(self, job: Job | None, slot_ms: int) -> str | None:
        """Why the job's calendars exclude the slot now, or None (always None without calendars)."""
        if job is None or not job.calendars:
            return None
        return self.calendars.allows(job.calendars, slot_ms)

    def _push_dispatch(self, run: ShardRun, d: Dispatch, not_before_ms: int = 0) -> None:
        self._dispatch.push_dispatch(max(d.slot.scheduled_at_ms + d.offset_ms, not_before_ms), run.shard, run.fence, d)

    # -- claim loop -----------------------------------------------------------------------

    def _claim_loop(self) -> None:
        while not self._closing:
            crashpoints.fail_worker()
            # Entries due within CLAIM_BATCH_MS are taken together: one transaction per shard.
            due = self._claims.wait_due(self._now_ms, CLAIM_BATCH_MS, lambda: self._closing)
            self._yield_to_starts()
            self._claim(due)

    def _yield_to_starts(self) -> None:
        """Wait while a burst of starts is under way or about to be (see the module doc)."""
        if not self._threads_running:
            return
        give_up = time.monotonic() + YIELD_TO_STARTS_MAX_MS / 1000
        while not self._closing and time.monotonic() < give_up:
            in_hand, next_due, next_size = self._dispatch.bursts()
            if in_hand < BURST_MIN and (next_size < BURST_MIN or next_due > self._now_ms() + QUIET_BEFORE_BURST_MS):
                return
            time.sleep(0.005)  # polled: only while a burst is near, and nothing on the hot path notifies

    def _claim(self, due: list[ClaimDue]) -> None:
        by_run: dict[tuple[int, int], list[ClaimDue]] = defaultdict(list)
        for c in due:
            by_run[(c.shard, c.fence)].append(c)
        fresh: dict[tuple[int, int], list[ClaimDue]] = {}
        for (shard, fence), items in by_run.items():
            run = self._current(shard, fence)
            if run is None:
                continue  # the shard moved
            with run.lock:  # an entry of an older definition finds a newer gen: a fresher entry exists
                keep = [c for c in items if (e := run.jobs.get(c.job_id)) is not None and e.gen == c.gen]
            if keep:
                fresh[(shard, fence)] = keep
        if fresh:
            self._claim_all(fresh)

    def _claim_all(self, by_run: dict[tuple[int, int], list[ClaimDue]]) -> None:
        """Claim the due slots of every led shard in one fenced transaction."""
        batches = {key: [SlotClaim(c.job_id, c.slot_ms) for c in items] for key, items in by_run.items()}
        try:
            out = tick_store.claim_ticks_many(self.engine, batches, node_id=self.node_id, now_ms=self._now_ms())
        except StoreUnavailable as e:
            log.warning("claiming %d slots failed (%s); retrying", sum(map(len, batches.values())), e)
            self._claims.push_again([c for items in by_run.values() for c in items], self._now_ms() + CLAIM_RETRY_MS)
            return
        for (shard, fence), items in by_run.items():
            if out.is_fenced(shard, fence):
                self._fenced(shard, fence, len(items))
                continue
            run = self._run_of(shard)
            if run is None or run.fence != fence:
                continue
            got = set(out.written.get(shard, ()))
            self.stats.add(claimed=len(got))
            dispatch, follow = [], []
            with run.lock:
                for c in items:
                    entry = run.jobs.get(c.job_id)
                    ref = SlotRef(c.job_id, c.slot_ms)
                    if entry is None or entry.gen != c.gen:
                        # Deleted or replaced while the claim was in flight. The row is claimed in the
                        # store now: dispatched, _start records it skipped (deleted) or runs it under the
                        # new definition; dropped here, it would stay claimed until a takeover.
                        if ref in got:
                            dispatch.append(DispatchDue(c.slot_ms, shard, fence, Dispatch(ref, 1)))
                        continue
                    entry.claimed_through = max(entry.claimed_through, c.slot_ms)
                    if ref in got:
                        if entry.job.jitter_ms:  # the one check a job without jitter pays
                            off = jitter_offset_ms(c.job_id, c.slot_ms, entry.job.jitter_ms)
                            dispatch.append(DispatchDue(c.slot_ms + off, shard, fence,
                                                        Dispatch(ref, 1, offset_ms=off, gen=c.gen)))
                        else:
                            dispatch.append(DispatchDue(c.slot_ms, shard, fence, Dispatch(ref, 1, gen=c.gen)))
                    else:
                        log.warning("shard %d: slot %s@%d was already recorded; not claimed again", shard,
                                    c.job_id, c.slot_ms, extra={"shard": shard, "job": c.job_id, "fence": fence})
                    follow.append(entry)
            self._dispatch.push_many(dispatch)
            self._claims.push_many(self._next_claims(run, follow))

    # -- dispatch loop ------------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        gc_pacer = GcPacer()  # collections go in the gaps between starts (gc_pacing.py)
        lead = self._start_lead  # the GIL is taken before a start is due (gil_lead.py)
        while not self._closing:
            crashpoints.fail_worker()
            try:
                self._dispatch_many(self._wait_for_starts(lead))
            finally:
                self._dispatch.handled()
            next_due = self._dispatch.next_due_ms()
            gc_pacer.between_starts(None if next_due is None else next_due - self._now_ms())

    def _wait_for_starts(self, lead: StartLead) -> list[DispatchDue]:
        """Wait for the next due starts, holding the GIL for their instant if the lead allows; take them."""
        got = self._dispatch.wait_near(self._now_ms_exact, lead.lead_ms(), lambda: self._closing, IDLE_CHECK_S)
        if got is None:
            return []
        top, aimed_at, early = got
        now = self._now_ms_exact()
        if aimed_at is not None and now >= aimed_at:
            lead.observe(now - aimed_at)
        if early and now < top:
            lead.hold_until(time.monotonic() + (top - now) / 1000.0)
        return self._dispatch.take_due(self._now_ms(), 0)

    def _dispatch_many(self, due: list[DispatchDue], interleave: bool = True) -> None:
        groups: dict[tuple[int, int], list[Dispatch]] = defaultdict(list)  # in slot order of first appearance
        for e in due:
            groups[(e.shard, e.fence)].append(e.dispatch)
        burst = _Burst()
        since_look = 0
        for (shard, fence), ds in groups.items():
            for i in range(0, len(ds), LOOK_AGAIN_EVERY):
                part = ds[i:i + LOOK_AGAIN_EVERY] if len(ds) > LOOK_AGAIN_EVERY else ds
                self._start_group(shard, fence, part, burst)
                since_look += len(part)
                if interleave and since_look >= LOOK_AGAIN_EVERY:
                    since_look = 0
                    # Ticks that came due while this burst went on start now, not at its end: a flood's
                    # burst (queued in the gate anyway) must not make another namespace's start late.
                    if more := self._dispatch.take_more_due(self._now_ms()):
                        self._dispatch_many(more, interleave=False)
        # One hand-off to the loop for the whole burst, not a wake-up per tick.
        if burst.on_loop:
            self.executors.loop.call_soon(self._start_on_loop, burst.on_loop)
        # Book-keeping for the ticks that completed inline comes after the whole
        # burst has started, so the last start of a burst waits for no one's records.
        if burst.inline:
            self._completed_inline(burst.inline)
        # Starts this burst queued while slots are free (behind a quota, or beside a flood's backlog kept
        # out of the headroom) are served here, at once: the executors' loop is busiest exactly then.
        if self._gate.waiting and self._gate.busy < self._gate.slots:
            self._serve_waiting(on_loop=False)

    def _completed_inline(self, inline: list[tuple[int, int, Dispatch, int]]) -> None:
        """Record noop ticks that completed at their start (``at``), and their lateness."""
        ok = TickStatus.SUCCEEDED
        results: dict[int, ExecutionResult] = {}  # one per start millisecond: a burst shares a few
        self.recorder.put_many([
            ResultWrite(shard, fence, d.slot, d.attempt,
                        results.get(t) or results.setdefault(t, ExecutionResult(True, t, t)), ok)
            for shard, fence, d, t in inline])
        late = Counter((shard, t - d.slot.scheduled_at_ms - d.offset_ms) for shard, _, d, t in inline)
        for (shard, lateness_ms), count in late.items():
            self._observe_lateness(shard, lateness_ms, count)
        self.stats.add(started=len(inline))
        self.stats.add_status(ok, len(inline))

    def _start_group(self, shard: int, fence: int, ds: list[Dispatch], burst: "_Burst") -> None:
        """Start one shard's due ticks under one acquisition of the shard's lock.

        The stop event and the session are checked before the first tick and
        then every ``GUARD_EVERY`` ticks: a session loss sets the stop event
        from the keepalive thread, without the lock, and must stop a burst
        half-way. Between two checks a few hundred microseconds of starts pass,
        far inside the session's safety margin (``session.SAFETY_MARGIN_S``):
        the lease is still provably held for each of them. (And only a noop
        completes here: a tick with an executor is guarded again by
        ``runner.run_tick`` before its mark and before its executor runs.)
        """
        run = self._run_of(shard)
        if run is None or run.fence != fence:
            return
        with run.lock:
            for k, d in enumerate(ds):
                if not k % GUARD_EVERY and not (run.active and run.session.can_act()):
                    self.stats.add(not_started=len(ds) - k)
                    metrics.not_started.inc(len(ds) - k)
                    for left in ds[k:]:  # a slot that waited in its job's line leaves it
                        self._settle(run, left)
                    return  # the rows stay claimed: whoever leads next re-claims them
                self._start(run, d, burst)

    def _start(self, run: ShardRun, d: Dispatch, burst: "_Burst", gated: bool = False) -> None:
        """One tick, with ``run.lock`` held. ``gated``: it waited for an executor slot and holds one now."""
        job_id = d.slot.job_id
        entry = run.jobs.get(job_id)
        if entry is None:
            self._skip(run, d, "job deleted before its slot")
            return
        job = entry.job
        # Claimed a lookahead ago: a calendar changed since may exclude it now. Not run, recorded skipped.
        if job.calendars and not d.manual and (why := self._calendar_excludes(job, d.slot.scheduled_at_ms)):
            self._skip(run, d, f"{CALENDAR_SKIP_PREFIX}{why}")
            return
        # ... and the job may have been paused or given a new schedule since: a new definition (gen) tells.
        # (A backfill has its own overlap, and a manual run was asked for: neither is judged.)
        if (d.gen != entry.gen and not d.manual and d.overlap is None
                and (why := _disowned(entry, d.slot.scheduled_at_ms))):
            self._skip(run, d, why)
            return
        # A job with nothing started, going or waiting here has no line: it starts (the usual case).
        if (line := run.lines.get(job_id)) is not None:
            verdict = overlap_verdict(d.overlap or job.overlap, going=line.going,  # manual runs too
                                      earlier_unstarted=line.unstarted_before(d.slot.scheduled_at_ms),
                                      catch_up=d.catch_up)
            if verdict is OverlapVerdict.WAIT:
                run.lines.park(d)  # judged again when the job's line moves (job_line.py)
                return
            if verdict is OverlapVerdict.SKIP:
                self._skip(run, d, OVERLAP_SKIP_REASON)
                return
        noop = job.executor.kind is ExecutorKind.NOOP
        if not gated and not self._admit(run, d, job):
            if not noop:  # a waiting noop holds no one up: it ends as it starts
                run.lines.admitting(job_id, d.slot.scheduled_at_ms)
            return  # it waits for a slot; the checks above run again when it gets one (_start_waited)
        if noop:
            # No side effect to guard: it completes here, and the recorder writes it.
            burst.inline.append((run.shard, run.fence, d, self._now_ms()))
            if line is not None:  # it waited in its job's line: the next one's turn
                self._settle(run, d)
            return
        # Handed to the loop, not started: later slots of the job wait for its start (_run_tick).
        run.lines.admitting(job_id, d.slot.scheduled_at_ms)
        run.tick_handed()
        metrics.running_executors.inc()
        burst.on_loop.append((run, d, TickRun(job, d.slot, d.attempt, run.shard, run.fence, self.node_id,
                                              run.stop, run.cancel, d.offset_ms)))

    # -- the executor slots (exec_gate.py) ----------------------------------------------------

    def _admit(self, run: ShardRun, d: Dispatch, job: Job) -> bool:
        """May the start go now? A noop needs a free slot but takes none (it ends as it starts)."""
        noop = job.executor.kind is ExecutorKind.NOOP
        if noop and self._gate.open():  # the hot path: nothing waits, a slot is free
            return True
        if self._gate.enter(namespace_of(d.slot.job_id), (run.shard, run.fence, d), time.monotonic(), holds=not noop):
            return True
        return False

    def _wake_gate(self) -> None:
        if self._gate.waiting:
            self.executors.loop.call_soon(self._serve_waiting)

    def _serve_waiting(self, on_loop: bool = True) -> None:
        """Hand every free slot to the next waiting start, in the queue's order: on the executors' loop
        (an execution ended), or on the dispatcher (``on_loop=False``: its starts go to the loop after)."""
        if self._closing:  # the node stops: what waits stays claimed for the next leader
            return
        while (served := self._gate.next(time.monotonic())) is not None:
            metrics.namespace_wait.observe(served.namespace, served.waited_s)
            if not self._start_waited(*served.item, on_loop=on_loop):
                self._gate.leave(served.namespace)  # it did not become an execution: the slot is free again

    def _start_waited(self, shard: int, fence: int, d: Dispatch, on_loop: bool = True) -> bool:
        """Start a tick that waited, under the guard a burst's ticks pass; True if it now runs on its slot."""
        run = self._current(shard, fence)
        burst = _Burst()
        if run is not None:
            with run.lock:
                if run.active and run.session.can_act():
                    self._start(run, d, burst, gated=True)
                else:
                    self._settle(run, d)  # not started: later slots of its job no longer wait for it
                    run = None
        if run is None:  # the shard moved or its lease is in doubt: the row stays claimed for the next leader
            self.stats.add(not_started=1)
            metrics.not_started.inc()
            return False
        if burst.inline:
            self._completed_inline(burst.inline)
        if burst.on_loop:
            if on_loop:
                self._start_on_loop(burst.on_loop)
            else:
                self.executors.loop.call_soon(self._start_on_loop, burst.on_loop)
            return True
        return False

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
            status = await run_tick(tick, self.marks, self.recorder, self.executors,
                                    self._fenced, lambda late: self._started(shard, late), now_ms=self._now_ms,
                                    on_slot_started=slot_started)
            if status is None:
                self.stats.add(not_started=1)
                metrics.not_started.inc()
            else:
                self.stats.add_status(status)
        except StoreDownBeforeStart as e:
            log.warning("tick %s@%d: %s; trying again in %d ms", job_id, d.slot.scheduled_at_ms, e,
                        CLAIM_RETRY_MS, extra={"shard": shard, "job": job_id, "fence": fence})
            if run.active:
                again = True
                self._push_dispatch(run, d._replace(attempt=e.attempt), not_before_ms=self._now_ms() + CLAIM_RETRY_MS)
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
            self._push_dispatch(run, parked)  # it was due already: at once

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


def _disowned(entry: JobEntry, slot_ms: int) -> str | None:
    job = entry.job
    return disowned_slot(paused=job.paused, active_since_ms=job.active_since_ms, slot_ms=slot_ms,
                         produces_slot=entry.trigger.next_after(slot_ms - 1) == slot_ms)


def _offset(job: Job | None, slot: SlotRef) -> int:
    """The slot's jitter offset under ``job`` (0 for a deleted job or one without jitter)."""
    return jitter_offset_ms(slot.job_id, slot.scheduled_at_ms, job.jitter_ms) if job is not None else 0


@dataclass
class _Burst:
    """What one pass of the dispatcher started: noop ticks completed inline (shard, fence, dispatch,
    at), and the ticks handed to the loop together (run, dispatch, tick)."""

    inline: list[tuple[int, int, Dispatch, int]] = field(default_factory=list)
    on_loop: list[tuple[ShardRun, Dispatch, TickRun]] = field(default_factory=list)
