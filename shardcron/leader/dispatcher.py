"""The dispatcher: takes due claimed slots off the dispatch heap and starts them, under the guard.

The dispatch heap holds claimed slots, due at the slot itself (plus the job's
jitter offset, ``jitter.jitter_offset_ms``, for a job with one). At that
moment the tick starts, after the guard (shard still ours, lease provably
held). A noop tick completes inline; the others of a burst are handed to the
node's asyncio loop in one go, one coroutine each (``tick_results.py``,
``runner.run_tick``), which marks the row running under the fence first.

The dispatcher waits for the top of the heap with one timed ``Condition.wait``
to its due instant (``TimerHeap.wait_due``, on the wall clock with its
fraction, so it wakes at the instant and not up to a millisecond after); a
push of an earlier top wakes it sooner. Nothing polls, and no other thread is
held back for it: a burst's starts are pure Python, batched per shard and
handed to the loop in one go, so the burst is short.

A burst is started in parts of ``LOOK_AGAIN_EVERY`` starts; between two parts
the dispatcher takes what came due since the burst began and starts it first.
A burst of one namespace's thousands of starts (most of which will wait in the
gate anyway) then delays another namespace's start by one part, not by the
whole burst.

Executor slots (``exec_gate.py``). At most ``executor_slots`` executions run
at once. A start that finds none free waits in the gate, by namespace; so
does every later start, noop included, while anything waits. Each run that
ends (``_done``, on the loop) hands its slot to the next start the queue
picks (``_serve_waiting``), which passes the burst's guard and ``_start``'s
checks again at that moment and records its real start. Nothing is dropped:
a released shard's waiting starts are taken out and counted not started,
their rows left claimed for the next leader. With nothing waiting a noop
pays one unlocked check (``ExecGate.open``); a start with an executor takes
its slot under the gate's lock.

Overlap (``job_line.py``, ``policies.overlap_verdict``): a slot is skipped only
while an earlier run of its job has started and not finished; behind an earlier
slot that is due and not started it waits in the job's line, in slot order.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from shardcron import metrics
from shardcron.jobkey import namespace_of
from shardcron.leader.heap import DispatchDue
from shardcron.leader.recorder import ResultWrite
from shardcron.leader.runner import TickRun
from shardcron.leader.scheduler_state import SchedulerState
from shardcron.leader.shard_run import JobEntry, ShardRun
from shardcron.model import ExecutionResult, ExecutorKind, Job, TickStatus
from shardcron.rules.policies import OVERLAP_SKIP_REASON, OverlapVerdict, disowned_slot, overlap_verdict
from shardcron.rules.takeover import Dispatch
from shardcron.runtime import crashpoints

GUARD_EVERY = 64  # a burst re-checks its shard and session this often (see _start_group)
LOOK_AGAIN_EVERY = 64  # starts of a burst between two looks for ticks due since it began (_dispatch_many)
# The error of a claimed slot a calendar excluded by the time it was due (a change within the lookahead).
CALENDAR_SKIP_PREFIX = "excluded by a calendar changed after the slot was claimed: "


class Dispatcher(SchedulerState):
    """The ``Scheduler``'s start side (a base class of it; the state it reads is ``SchedulerState``)."""

    def push_dispatch(self, run: ShardRun, d: Dispatch, not_before_ms: int = 0) -> None:
        self._dispatch.push_dispatch(max(d.slot.scheduled_at_ms + d.offset_ms, not_before_ms), run.shard, run.fence, d)

    # -- dispatch loop ------------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        while not self._closing:
            crashpoints.fail_worker()
            self._dispatch_many(self._dispatch.wait_due(self._now_ms_exact, 0, lambda: self._closing))

    def _dispatch_many(self, due: list[DispatchDue], interleave: bool = True) -> None:
        groups: dict[tuple[int, int], list[Dispatch]] = defaultdict(list)  # in slot order of first appearance
        for e in due:
            groups[(e.shard, e.fence)].append(e.dispatch)
        burst = _Burst()
        since_look = 0
        for (shard, fence), ds in groups.items():
            for i in range(0, len(ds), LOOK_AGAIN_EVERY):
                part = ds[i : i + LOOK_AGAIN_EVERY] if len(ds) > LOOK_AGAIN_EVERY else ds
                self._start_group(shard, fence, part, burst)
                since_look += len(part)
                if interleave and since_look >= LOOK_AGAIN_EVERY:
                    since_look = 0
                    # Ticks that came due while this burst went on start now, not at its end: a flood's
                    # burst (queued in the gate anyway) must not make another namespace's start late.
                    if more := self._dispatch.take_due(self._now_ms(), 0):
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
        self.recorder.put_many(
            [
                ResultWrite(
                    shard,
                    fence,
                    d.slot,
                    d.attempt,
                    results.get(t) or results.setdefault(t, ExecutionResult(True, t, t)),
                    ok,
                )
                for shard, fence, d, t in inline
            ]
        )
        late = Counter((shard, t - d.slot.scheduled_at_ms - d.offset_ms) for shard, _, d, t in inline)
        for (shard, lateness_ms), count in late.items():
            self._observe_lateness(shard, lateness_ms, count)
        self.stats.add(started=len(inline))
        self.stats.add_status(ok, len(inline))
        if self.tick_spans is not None:
            for shard, fence, d, t in inline:
                self.tick_spans.completed_inline(
                    d.slot, d.attempt, fence, shard, claimed_at_ms=d.claimed_at_ms, at_ms=t
                )

    def _start_group(self, shard: int, fence: int, ds: list[Dispatch], burst: _Burst) -> None:
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
        run = self.led.run_of(shard)
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

    def _start(self, run: ShardRun, d: Dispatch, burst: _Burst, gated: bool = False) -> None:
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
        if (
            d.gen != entry.gen
            and not d.manual
            and d.overlap is None
            and (why := _disowned(entry, d.slot.scheduled_at_ms))
        ):
            self._skip(run, d, why)
            return
        # A job with nothing started, going or waiting here has no line: it starts (the usual case).
        if (line := run.lines.get(job_id)) is not None:
            verdict = overlap_verdict(
                d.overlap or job.overlap,
                going=line.going,  # manual runs too
                earlier_unstarted=line.unstarted_before(d.slot.scheduled_at_ms),
                catch_up=d.catch_up,
            )
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
        burst.on_loop.append(
            (
                run,
                d,
                TickRun(job, d.slot, d.attempt, run.shard, run.fence, self.node_id, run.stop, run.cancel, d.offset_ms),
            )
        )

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
        run = self.led.current(shard, fence)
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


def _disowned(entry: JobEntry, slot_ms: int) -> str | None:
    job = entry.job
    return disowned_slot(
        paused=job.paused,
        active_since_ms=job.active_since_ms,
        slot_ms=slot_ms,
        produces_slot=entry.trigger.next_after(slot_ms - 1) == slot_ms,
    )


@dataclass
class _Burst:
    """What one pass of the dispatcher started: noop ticks completed inline (shard, fence, dispatch,
    at), and the ticks handed to the loop together (run, dispatch, tick)."""

    inline: list[tuple[int, int, Dispatch, int]] = field(default_factory=list)
    on_loop: list[tuple[ShardRun, Dispatch, TickRun]] = field(default_factory=list)
