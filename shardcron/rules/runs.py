"""Next and last run: what ``jobs get`` and ``jobs list`` say about a job's runs. Pure.

``next_run`` is the next *owed* slot: the first slot of the job's trigger after
it took effect (``active_since_ms``) whose start, ``slot + jitter_offset_ms``,
is still ahead. A slot already past but not yet started because of its jitter
is still the next one. A paused job, or a schedule that has ended, has none.
Calendars plug in through ``calendars.next_allowed``: pass the job's calendars
and the answer skips the slots they exclude and says why (``skipped_ms``,
``skip_reason``), looking no further than its search horizon (about four
years); with none, it is the trigger's next slot, however far.

``failures_in_a_row`` counts, newest first, the final ticks that failed or were
abandoned, stopping at the first that succeeded. A skipped tick (overlap or
catch-up policy) neither breaks nor extends the run: nothing ran, so it says
nothing about whether the job works. Neither does an unfinished one
(claimed, running). The store computes the same count in SQL
(``store.tick_reads.last_runs``); this is its definition and its test oracle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from shardcron.clock import rfc3339_ms
from shardcron.model import Job, JobRuns, TickStatus
from shardcron.rules.calendars import next_allowed
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.triggers import Trigger, trigger_for
from shardcron.spec.calendar import Calendar

FAILURES = frozenset({TickStatus.FAILED, TickStatus.ABANDONED})


@dataclass(frozen=True)
class NextRun:
    slot_ms: int  # the owed slot: the tick's identity
    start_ms: int  # slot_ms + the slot's jitter offset: when it starts
    skipped_ms: int | None = None  # the first slot a calendar excluded on the way, if any
    skip_reason: str | None = None


def next_run(job: Job, trigger: Trigger, now_ms: int, calendars: Sequence[Calendar] = ()) -> NextRun | None:
    """The job's next owed slot whose start is after ``now_ms``; None when paused or ended."""
    if job.paused:
        return None
    # A slot up to one jitter old may not have started yet; jitter < the gap, so at most
    # one such slot, and two steps always reach a slot that starts after now.
    after = max(job.active_since_ms, now_ms - job.jitter_ms)
    skipped, reason = None, None
    for _ in range(3):
        if calendars:
            found = next_allowed(trigger, calendars, after)
            slot = found.slot_ms
            if skipped is None:
                skipped, reason = found.first_skipped_ms, found.skip_reason
        else:  # no calendar: the trigger's own next slot, without next_allowed's search horizon
            slot = trigger.next_after(after)
        if slot is None:
            return None
        start = slot + jitter_offset_ms(job.id, slot, job.jitter_ms)
        if start > now_ms:
            return NextRun(slot, start, skipped, reason)
        after = slot
    return None  # unreachable while jitter < the schedule's gap (jobspec refuses the rest)


def failures_in_a_row(statuses_newest_first: Iterable[TickStatus]) -> int:
    """Failed or abandoned ticks before the newest succeeded one; skipped and unfinished ones pass over."""
    n = 0
    for status in statuses_newest_first:
        if status is TickStatus.SUCCEEDED:
            break
        if status in FAILURES:
            n += 1
    return n


def job_runs(
    job: Job,
    now_ms: int,
    *,
    last_scheduled_at_ms: int | None = None,
    last_status: TickStatus | None = None,
    failures: int = 0,
    last_missed_deadlines: tuple[str, ...] = (),
    trigger: Trigger | None = None,
    calendars: Sequence[Calendar] = (),
) -> JobRuns:
    """The answer for one job: its next run computed here, its last tick (and the deadlines it
    missed) and failures in a row as the store read them (``store.tick_reads.last_runs``)."""
    last = JobRuns(now_ms, None, None, last_scheduled_at_ms, last_status, failures, None, last_missed_deadlines)
    nxt = next_run(job, trigger or trigger_for(job.schedule), now_ms, calendars)
    if nxt is None:
        return last
    return replace(last, next_slot_ms=nxt.slot_ms, next_start_ms=nxt.start_ms, next_reason=next_reason(nxt))


def next_reason(nxt: NextRun) -> str | None:
    """Why the next slot is not sooner: the first slot a calendar excluded on the way, and why."""
    if nxt.skipped_ms is None:
        return None
    return f"slots from {rfc3339_ms(nxt.skipped_ms)} excluded: {nxt.skip_reason}"


__all__ = ["FAILURES", "NextRun", "failures_in_a_row", "job_runs", "next_reason", "next_run"]
