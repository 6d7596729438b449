"""The state the parts of the ``Scheduler`` share, named once with its types and its guards.

``Scheduler`` (``loop.py``) is made of parts, one module each: the claimer
(``claimer.py``), the dispatcher (``dispatcher.py``), the tick's end on the
executors' loop (``tick_results.py``) and the API's job changes
(``job_changes.py``). Each part is a base class of ``Scheduler`` over this
one; ``Scheduler.__init__`` sets every attribute declared here.

Shared state and who guards it: ``led`` (the led shards; the coordinator,
the release threads, the API, the claimer and the dispatcher) under its own
lock; each shard's jobs and runs under its ``ShardRun.lock``; each heap under
its own condition; ``stats`` under its own lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from shardcron.coordination.calendar_book import CalendarBook
    from shardcron.executors import Executors
    from shardcron.leader.deadlines import DeadlineWatch
    from shardcron.leader.exec_gate import ExecGate
    from shardcron.leader.heap import ClaimDue, TimerHeap
    from shardcron.leader.led_shards import LedShards
    from shardcron.leader.marks import RunningMarks
    from shardcron.leader.recorder import Recorder
    from shardcron.leader.shard_run import JobEntry, ShardRun
    from shardcron.leader.stats import Stats
    from shardcron.model import Job
    from shardcron.rules.takeover import Dispatch
    from shardcron.tracing.tick_spans import TickSpans


class SchedulerState:
    engine: Engine
    node_id: str
    lookahead_ms: int
    calendars: CalendarBook
    stats: Stats
    executors: Executors
    recorder: Recorder
    marks: RunningMarks
    deadlines: DeadlineWatch
    led: LedShards
    _gate: ExecGate[tuple[int, int, Dispatch]]
    _claims: TimerHeap  # ClaimDue
    _dispatch: TimerHeap  # DispatchDue
    _closing: bool
    _ticks: set[asyncio.Task[None]]
    _report_fenced: Callable[[int, int], None]
    _now_ms: Callable[[], int]
    _now_ms_exact: Callable[[], float]
    tick_spans: TickSpans | None  # the ticks' spans when tracing is on (tracing/tick_spans.py)

    # What one part calls on another (declared here, defined in the part named).
    push_dispatch: Callable[..., None]  # dispatcher.py: (run, dispatch, not_before_ms=0)
    _serve_waiting: Callable[..., None]  # dispatcher.py: (on_loop=True)
    _calendar_excludes: Callable[[Job | None, int], str | None]  # claimer.py
    _next_claims: Callable[[ShardRun, Iterable[JobEntry]], list[ClaimDue]]  # claimer.py
    _push_next_claim: Callable[[ShardRun, JobEntry], None]  # claimer.py
    _push_left_owed: Callable[[ShardRun, JobEntry, Job | None], None]  # claimer.py
    _start_on_loop: Callable[..., None]  # tick_results.py
    _skip: Callable[[ShardRun, Dispatch, str], None]  # tick_results.py
    _settle: Callable[[ShardRun, Dispatch], None]  # tick_results.py
    _observe_lateness: Callable[..., None]  # tick_results.py: (shard, lateness_ms, count=1)
    _fenced: Callable[..., None]  # tick_results.py: (shard, fence, count=1)
