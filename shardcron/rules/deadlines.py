"""Deadlines: when a slot's work must have started, succeeded or been acked, and whether it missed. Pure.

A job may set three, each measured from the slot's scheduled time (not its jittered start):

- ``start_deadline``: the tick must start (its first attempt handed to the executor) by then. A slot
  that never starts misses it: skipped (overlap, catch-up), abandoned, or still waiting for a leader or
  a free executor slot when it comes.
- ``deadline``: the slot must have succeeded by then; with a ``heartbeat`` too, it must also have been
  acked by then (the work's real end is in a worker, which says so with ``jobs ack``).
- ``heartbeat``: the slot must be acked by then.

Each (slot, kind) is judged once, at its due time plus ``JUDGE_GRACE_MS`` (a result that came just
before the due time is written by then: the judgement goes through the same writer, after it), by
whichever node leads the shard then, or by the first leader after that if none did. The judgement
itself is a conditional update of the tick row under the shard's fence (``store/deadlines.py``),
which ``missed`` mirrors: a missed deadline is recorded on the row once, whoever judges it.

Manual runs (TriggerJob) have no deadlines: they are not slots of the schedule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from shardcron.model import Job, Tick, TickStatus

# After the due time, how long a judgement waits: the result of a tick that ended just before the
# due time is written by then (results are batched for a few milliseconds).
JUDGE_GRACE_MS = 1000
# How far back, beyond a job's longest deadline, a new leader looks at its slots to judge them: its
# catch-up window (after a longer outage the older slots have no tick to judge anyway), at least this.
MIN_LOOKBACK_MS = 3_600_000


class DeadlineKind(StrEnum):
    """A deadline's kind; its value is the job file's key, the metric's ``kind`` and the alert's kind."""

    START = "start_deadline"
    FINISH = "deadline"
    HEARTBEAT = "heartbeat"


KINDS = tuple(DeadlineKind)


class Judgement(NamedTuple):
    """One deadline of one slot, to be judged at ``due_ms + JUDGE_GRACE_MS``."""

    job_id: str
    scheduled_at_ms: int
    kind: DeadlineKind
    due_ms: int
    needs_ack: bool  # FINISH of a job with a heartbeat: succeeded is not enough without the ack

    @property
    def judge_at_ms(self) -> int:
        return self.due_ms + JUDGE_GRACE_MS


@dataclass(frozen=True)
class SlotState:
    """What a tick row says about a slot, as far as its deadlines are concerned."""

    status: TickStatus
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    acked_at_ms: int | None = None


def deadline_of(job: Job, kind: DeadlineKind) -> int | None:
    if kind is DeadlineKind.START:
        return job.start_deadline_ms
    if kind is DeadlineKind.FINISH:
        return job.deadline_ms
    return job.heartbeat_ms


def has_deadlines(job: Job) -> bool:
    return job.start_deadline_ms is not None or job.deadline_ms is not None or job.heartbeat_ms is not None


def lookback_since_ms(job: Job, now_ms: int) -> int:
    """The earliest slot of ``job`` a new leader judges (or claims the alert of) on taking its shard at
    ``now_ms``: its longest deadline and its catch-up window (at least ``MIN_LOOKBACK_MS``) before it,
    never before the job took effect."""
    longest = max((ms for kind in KINDS if (ms := deadline_of(job, kind)) is not None), default=0)
    window = max(job.catchup_window_ms, MIN_LOOKBACK_MS)
    return max(job.active_since_ms, now_ms - longest - JUDGE_GRACE_MS - window)


def judgements_for(job: Job, scheduled_at_ms: int) -> list[Judgement]:
    """The deadlines a slot of ``job`` must meet (none for a job without deadlines)."""
    needs_ack = job.heartbeat_ms is not None
    out = []
    for kind in KINDS:
        after = deadline_of(job, kind)
        if after is not None:
            out.append(Judgement(job.id, scheduled_at_ms, kind, scheduled_at_ms + after, needs_ack))
    return out


def missed(j: Judgement, state: SlotState | None) -> bool:
    """Whether the slot missed ``j``, judged at or after its due time (``state``: the row then; None:
    the slot has no row, so it never started)."""
    if state is None:
        return True
    if j.kind is DeadlineKind.START:
        return state.started_at_ms is None or state.started_at_ms > j.due_ms
    if j.kind is DeadlineKind.HEARTBEAT:
        return not _acked_by(state, j.due_ms)
    succeeded = (
        state.status is TickStatus.SUCCEEDED and state.finished_at_ms is not None and state.finished_at_ms <= j.due_ms
    )
    return not succeeded or (j.needs_ack and not _acked_by(state, j.due_ms))


def unraised(job: Job, rows: Iterable[Tick], *, judged_before_ms: int) -> list[Judgement]:
    """The deadlines of ``job``'s scheduled ``rows`` (its ticks) that the rule says were missed, judged
    before ``judged_before_ms``, and are not recorded missed on their row: a leader that should have
    raised them did not (the audit's finding)."""
    out = []
    for t in rows:
        if t.manual:
            continue
        state = SlotState(t.status, t.started_at_ms, t.finished_at_ms, t.acked_at_ms)
        for j in judgements_for(job, t.scheduled_at_ms):
            if j.judge_at_ms < judged_before_ms and j.kind.value not in t.missed_deadlines and missed(j, state):
                out.append(j)
    return out


def _acked_by(state: SlotState, due_ms: int) -> bool:
    return state.acked_at_ms is not None and state.acked_at_ms <= due_ms


def describe_miss(j: Judgement, state: SlotState | None) -> str:
    """One line saying what happened instead, for the log and the alert."""
    late = _late(j.due_ms - j.scheduled_at_ms)
    if state is None:
        return f"no tick was recorded for the slot {late} after it"
    if j.kind is DeadlineKind.START:
        if state.started_at_ms is not None:
            return f"started {_late(state.started_at_ms - j.scheduled_at_ms)} after its slot (deadline {late})"
        return f"not started {late} after its slot (it is {state.status.value})"
    if j.kind is DeadlineKind.HEARTBEAT:
        return f"not acked {late} after its slot"
    if state.status is TickStatus.SUCCEEDED and state.finished_at_ms is not None and state.finished_at_ms <= j.due_ms:
        return f"succeeded but not acked {late} after its slot"
    if state.status is TickStatus.SUCCEEDED and state.finished_at_ms is not None:
        return f"succeeded {_late(state.finished_at_ms - j.scheduled_at_ms)} after its slot (deadline {late})"
    return f"not succeeded {late} after its slot (it is {state.status.value})"


def _late(ms: int) -> str:
    s = ms / 1000
    if s < 120:
        return f"{s:g}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"
