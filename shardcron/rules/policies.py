"""The scheduling decisions, as pure functions: catch-up, overlap, a changed job's claimed slots, orphans, retry
backoff.

The loop gathers the facts (which slots were missed, how many runs are going,
what a tick's row says) and asks these functions what to do; it then does the
I/O. Keeping the decisions here means every branch is a row in a table test.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from shardcron.model import CatchUp, Overlap, RetryPolicy, TickStatus


@dataclass(frozen=True)
class CatchUpPlan:
    run: tuple[int, ...]  # slots to claim and run
    skip: tuple[int, ...]  # slots to record as skipped, so no slot is silently missed
    beyond_window: int  # missed slots older than now - window: not recorded, only counted and logged


def plan_catch_up(policy: CatchUp, window_ms: int, missed: Sequence[int], now_ms: int) -> CatchUpPlan:
    """Split the slots that passed while no leader could run them into run / skip / too old.

    A slot is in the window when ``slot >= now_ms - window_ms``. Slots older than
    that are only counted: after a long outage a job could owe thousands of
    slots, and writing a skipped row for each would flood the store with rows
    nobody asked for. Inside the window every slot gets a row (run or skipped),
    so an operator can see exactly what happened to each.

    ALL runs every slot in the window, LATEST runs the most recent one and skips
    the others (a job whose runs supersede each other, such as a sync), NONE
    skips them all and carries on from the next slot. A window of 0 leaves only
    a slot due exactly now in the window.

    ``missed`` is expected ascending and all ``<= now_ms``; it is sorted and
    de-duplicated anyway, because LATEST must pick the latest and a slot must not
    be claimed twice. A slot after ``now_ms`` is not missed: that is a caller bug.
    """
    if window_ms < 0:
        raise ValueError(f"window_ms must not be negative, got {window_ms}")
    slots = sorted(set(missed))
    if slots and slots[-1] > now_ms:
        raise ValueError(f"slot {slots[-1]} is after now ({now_ms}); it is not missed yet")
    cutoff = now_ms - window_ms
    beyond = bisect_left(slots, cutoff)  # slots is sorted: everything before this index is too old
    in_window = tuple(slots[beyond:])
    if policy is CatchUp.ALL:
        return CatchUpPlan(run=in_window, skip=(), beyond_window=beyond)
    if policy is CatchUp.LATEST:
        return CatchUpPlan(run=in_window[-1:], skip=in_window[:-1], beyond_window=beyond)
    if policy is CatchUp.NONE:
        return CatchUpPlan(run=(), skip=in_window, beyond_window=beyond)
    raise ValueError(f"unknown catch-up policy {policy!r}")


# The error a slot skipped by the overlap policy is recorded with; the audit
# recognises such rows by it (``audit.find_false_overlap``).
OVERLAP_SKIP_REASON = "overlap policy: the previous run is still going"


def overlap_allows(policy: Overlap, running_now: int) -> bool:
    """Whether a run may start while ``running_now`` started runs of the job go on (a manual
    trigger asks this at once; a due slot asks ``overlap_verdict``, which also keeps slot order).

    SKIP (the default) starts one only when nothing of the job is running: a
    job slower than its period would otherwise pile up runs without bound.
    ALLOW always starts it, for jobs whose runs are independent. Every policy
    allows a start when nothing runs (the dispatcher relies on it to skip the call).
    """
    if running_now < 0:
        raise ValueError(f"running_now must not be negative, got {running_now}")
    if policy is Overlap.ALLOW:
        return True
    if policy is Overlap.SKIP:
        return running_now == 0
    raise ValueError(f"unknown overlap policy {policy!r}")


class OverlapVerdict(StrEnum):
    START = "start"  # it goes on to its executor slot and starts
    SKIP = "skip"  # recorded skipped with OVERLAP_SKIP_REASON: a run of the job has started and goes on
    WAIT = "wait"  # it queues behind the job's earlier slots and is judged again when the line moves


def overlap_verdict(policy: Overlap, *, going: int, earlier_unstarted: bool, catch_up: bool) -> OverlapVerdict:
    """What a due slot does about the job's other runs (``job_line.py`` holds the facts).

    ``going``: runs of the job that have started (been handed to their executor) and not
    finished; a run waiting out a retry backoff has started and counts. ``earlier_unstarted``:
    an earlier slot of the job is due here and has not started (waiting in the line, for an
    executor slot, or on its way to its executor).

    Overlap is about runs that have *started*. Under SKIP a slot behind an unstarted earlier
    slot waits its turn (slots of a job start in slot order); at its turn it starts when
    nothing goes, and is skipped when a run goes, unless it is a catch-up slot, which waits
    for that run instead, so that catch-up "all" runs every missed slot, in turn. ALLOW
    starts every slot at once, whatever else of the job waits or goes.
    """
    if going < 0:
        raise ValueError(f"going must not be negative, got {going}")
    if policy is Overlap.ALLOW:
        return OverlapVerdict.START
    if policy is not Overlap.SKIP:
        raise ValueError(f"unknown overlap policy {policy!r}")
    if earlier_unstarted:
        return OverlapVerdict.WAIT
    if not going:
        return OverlapVerdict.START
    return OverlapVerdict.WAIT if catch_up else OverlapVerdict.SKIP


class OrphanAction(StrEnum):
    RECLAIM = "reclaim"  # it never started: claim it under the new fence and run it normally
    RETRY = "retry"  # it may have run: run it again as the next attempt
    ABANDON = "abandon"  # it may have run and the retry budget is spent: mark it abandoned


PAUSED_SKIP_REASON = "job paused before its slot started"
RESCHEDULED_SKIP_REASON = "job's schedule changed before its slot started"


def disowned_slot(*, paused: bool, active_since_ms: int, produces_slot: bool, slot_ms: int) -> str | None:
    """Why a slot claimed a lookahead ago is no longer the job's to run, as the job stands now; None to run it.

    A slot is claimed about a second before it is due. A pause, or a put with a
    new schedule, that returns in between means the caller was told the job no
    longer runs then: starting the slot anyway would contradict an answer
    already given. So it is recorded skipped, never silently dropped. A slot at
    or before the new definition's ``active_since_ms`` was owed by the old one
    (a late catch-up) and still runs. Manual runs and backfills are not judged
    here: each was asked for explicitly.
    """
    if paused:
        return PAUSED_SKIP_REASON
    if slot_ms > active_since_ms and not produces_slot:
        return RESCHEDULED_SKIP_REASON
    return None


def settle_orphan(status: TickStatus, attempt: int, retry: RetryPolicy, could_have_started: bool) -> OrphanAction:
    """What a new leader does with a tick it finds claimed or running under an older fence.

    The old leader died (or was fenced out) somewhere between claiming the tick
    and recording its result. Only a CLAIMED tick whose executor provably never
    started (``could_have_started`` is False, e.g. the claim is younger than the
    point where the old leader would have begun the run) is safe to run as if
    fresh: that is the one case where exactly-once survives. Any other orphan
    may already have had its side effects, so running it again is an at-least-once
    retry, and it spends the job's retry budget like a failure would.
    """
    if status not in (TickStatus.CLAIMED, TickStatus.RUNNING):
        raise ValueError(f"a {status.value} tick is not an orphan")
    if status is TickStatus.CLAIMED and not could_have_started:
        return OrphanAction.RECLAIM
    return OrphanAction.RETRY if attempt < retry.max_attempts else OrphanAction.ABANDON


def backoff_ms(retry: RetryPolicy, attempt: int) -> int:
    """The delay before attempt ``attempt + 1``, after attempt ``attempt`` failed.

    Exponential (initial, 2x, 4x, ...) so that a struggling endpoint gets room to
    recover, capped so that a late retry still happens within a bounded time.
    """
    if attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {attempt}")
    # Bounding the exponent keeps a huge attempt number from building a huge int;
    # 2**62 ms is far beyond any cap.
    return min(retry.backoff_max_ms, retry.backoff_initial_ms << min(attempt - 1, 62))


__all__ = [
    "OVERLAP_SKIP_REASON",
    "CatchUpPlan",
    "OrphanAction",
    "OverlapVerdict",
    "backoff_ms",
    "overlap_allows",
    "overlap_verdict",
    "plan_catch_up",
    "settle_orphan",
]
