"""Runs one tick as a coroutine on the node's loop: guard, mark running (fenced), execute, retry.

The order is the promise. Before every attempt:
1. the shard must still be ours (its stop latch is not set);
2. the session must provably still hold its lease on the monotonic clock
   (``Session.can_act``), which a stop-the-world pause cannot fool
   (``run.cancel.is_set()`` is checks 1 and 2 in one, ``shard_cancel.py``);
3. the row is marked ``running`` in a fenced transaction (shared with the
   marks of the ticks starting alongside it, ``marks.py``); a stale leader's
   mark is rejected and its executor never starts;
4. checks 1 and 2 again: the mark is a database round trip that can block
   (up to the statement timeout) past the end of the lease. A run stopped
   here leaves its row ``running`` under this fence without having started:
   the next leader treats it as an orphan that may have run (retry or
   abandon), which can cost a retry but never runs it twice at once.
Only then does the executor run (``Executors.run``: on the loop for the
asyncio ones, on a worker thread for the blocking ones). The moment the first
attempt is handed to it is the slot's start: the caller hears of it then
(``on_slot_started``: the job's line counts the run as going from there, see
``job_line.py``), and the row records it as ``started_at_ms`` (a later
attempt's mark keeps it), so an overlap skip decided after it is explained by
the row, and one decided before it never counted this run. A failed attempt is
tried again up to the job's ``max_attempts``, after the backoff of
``policies.backoff_ms``, in a sleep that the shard's cancel cuts short (the
shard stopped or the lease lost: the next attempt's guard then refuses it). The
retry loop is written out here: it is a few lines on the path of every tick, and
a general retry library's objects per call cost more than the loop itself.

With tracing on (``spans``), each attempt has a span (``tracing/tick_spans.py``): opened before the
running mark, its trace context handed on with the tick (``TickContext.trace``), ended at the result (the
last attempt's when its row is written). With tracing off the cost is a ``spans is None`` test per step of
an attempt, and no object is made for it.

Why a coroutine and not a worker thread per tick: ``docs/adr/0005-ticks-on-one-event-loop.md``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardcron import clock
from shardcron.errors import FencedOut, StoreUnavailable
from shardcron.executors import Executors
from shardcron.executors.aio import Cancelled
from shardcron.leader.marks import RunningMark, RunningMarks
from shardcron.leader.recorder import Recorder, ResultWrite
from shardcron.leader.shard_cancel import StopOrLeaseLost
from shardcron.model import ExecutionResult, Job, SlotRef, TickContext, TickStatus
from shardcron.rules.policies import backoff_ms
from shardcron.runtime import crashpoints

if TYPE_CHECKING:  # imported only when tracing is on (node.py)
    from shardcron.tracing.tick_spans import TickSpans

log = logging.getLogger(__name__)


class _Abort(Exception):
    """The guard failed: this node must not start the attempt."""


class StoreDownBeforeStart(Exception):
    """The running mark could not be written: the attempt did not start and should be tried again.

    Safe to retry: a row that was never marked running provably never ran.
    """

    def __init__(self, attempt: int, reason: str):
        super().__init__(reason)
        self.attempt = attempt


@dataclass
class TickRun:
    job: Job
    slot: SlotRef
    attempt: int
    shard: int
    fence: int
    node_id: str
    stop: threading.Event
    cancel: StopOrLeaseLost  # the shard's: set when it stops or the lease is lost (``shard_cancel.py``)
    offset_ms: int = 0  # the slot's jitter offset: lateness is measured from slot + offset


async def run_tick(
    run: TickRun,
    marks: RunningMarks,
    recorder: Recorder,
    executors: Executors,
    on_fenced: Callable[[int, int, int], None],
    on_started: Callable[[int], None],
    *,
    now_ms: Callable[[], int] = clock.wall_ms,
    on_slot_started: Callable[[], None] = lambda: None,
    spans: TickSpans | None = None,
    claimed_at_ms: int = 0,
) -> TickStatus | None:
    """Run every attempt the retry policy allows, on the executors' loop. Returns the final status,
    or None when aborted. ``on_started``: each attempt, with its lateness; ``on_slot_started``: once,
    when the first attempt is handed to its executor. ``spans``: the attempts' spans (tracing on), the
    first one's from ``claimed_at_ms`` (0: unknown)."""
    executors.for_kind(run.job.executor.kind)  # a kind this node cannot run fails here, before any mark
    first = run.attempt
    remaining = max(1, run.job.retry.max_attempts - first + 1)
    last_attempt = first + remaining - 1
    state = {"attempt": first - 1}
    slot_started: list[int] = []  # when the first attempt was handed to its executor (once it was)

    async def attempt_once() -> ExecutionResult:
        state["attempt"] += 1
        n = state["attempt"]
        if run.cancel.is_set():
            raise _Abort("shard lost or lease not provably held")
        started = now_ms()
        marked_start = slot_started[0] if slot_started else started  # a later attempt keeps the slot's start
        span = None
        if spans is not None:
            kind = run.job.executor.kind.value
            claimed = claimed_at_ms if n == first else 0
            span = spans.attempt(run.slot, n, run.fence, run.shard, kind, claimed_at_ms=claimed, start_ms=started)
        try:
            await marks.mark(RunningMark(run.shard, run.fence, run.slot, n, marked_start))
        except FencedOut as e:
            if span is not None:
                span.not_started(str(e))
            log.error(
                "shard %d: not starting %s@%d: %s",
                run.shard,
                run.slot.job_id,
                run.slot.scheduled_at_ms,
                e,
                extra={"shard": run.shard, "job": run.slot.job_id, "fence": run.fence},
            )
            on_fenced(run.shard, run.fence, 1)
            raise _Abort(str(e)) from None
        except StoreUnavailable as e:
            if span is not None:
                span.not_started(f"store unavailable: {e}")
            raise StoreDownBeforeStart(n, f"store unavailable, attempt {n} not started: {e}") from None
        if run.cancel.is_set():
            why = (
                "shard lost or lease not provably held once the running mark was written (marked running, not started)"
            )
            if span is not None:
                span.not_started(why)
            raise _Abort(why)
        on_started(started - run.slot.scheduled_at_ms - run.offset_ms)
        if not slot_started:
            slot_started.append(now_ms())
            on_slot_started()
        trace = () if span is None else span.started()
        ctx = TickContext(run.slot.job_id, run.slot.scheduled_at_ms, n, run.fence, run.shard, run.node_id, trace)
        execution = executors.run(run.job.executor, ctx, run.job.timeout_ms / 1000.0, run.cancel)
        result = await (execution if span is None else span.until_result(execution, last_attempt=last_attempt))
        crashpoints.after_dispatch(run.slot.job_id, result.ok)
        return result

    async def sleep_unless_stopped(seconds: float) -> None:
        try:
            with executors.loop.cancelled_by(run.cancel):
                await asyncio.sleep(seconds)
        except Cancelled:
            pass  # the next attempt's guard refuses it

    async def attempts() -> ExecutionResult:
        """Each attempt in turn until one succeeds or none is left; the last one's result."""
        result = await attempt_once()
        for _ in range(remaining - 1):
            if result.ok:
                break
            await sleep_unless_stopped(backoff_ms(run.job.retry, state["attempt"]) / 1000.0)
            result = await attempt_once()
        return result

    try:
        result = await attempts()
    except _Abort as e:
        log.warning(
            "tick %s@%d attempt %d not started: %s",
            run.slot.job_id,
            run.slot.scheduled_at_ms,
            state["attempt"],
            e,
            extra={"shard": run.shard, "job": run.slot.job_id, "fence": run.fence},
        )
        return None
    status = TickStatus.SUCCEEDED if result.ok else TickStatus.FAILED
    if slot_started and result.started_at_ms != slot_started[0]:
        result = result._replace(started_at_ms=slot_started[0])  # the slot's start, not its last attempt's
    recorder.put(ResultWrite(run.shard, run.fence, run.slot, state["attempt"], result, status))
    return status
