"""The audit's rules: what counts as a finding, as pure functions over a window's rows.

One piece: this docstring defines each kind of finding, and each rule below implements one of them.

``shardcron.audit.run_audit`` reads the jobs, the ticks of a time window and
the fence log, and hands them to these rules (one table-driven unit test each):

duplicates
    More than one row for one (job, scheduled time). The primary key makes
    this impossible, so a finding means the schema itself is broken.
missing
    A slot the job's trigger produced in the window, owed, and without a row.
    A slot is owed when it falls after the job's ``active_since_ms`` (a new,
    changed or resumed job owes no backlog) and, for a paused job, no later than
    its last row (a paused job is owed nothing from the pause on, and a leader
    does not catch up a paused job's backlog). A slot is *excused*, counted
    but not a finding, when it was already older than the job's catch-up
    window when the first row after it was written: that is the one kind of
    slot catch-up leaves without a row (``rules.policies.plan_catch_up``), whatever
    the policy, since ``latest`` and ``none`` record skipped rows inside the
    window. The "when" is that row's ``claimed_at_ms``, the catching-up
    leader's own clock, the same reading it planned with; with no row after
    the slot yet, it is the audit's ``now``: such a slot is still owed if a
    leader came back now.
stale fence
    A row whose (current) fence is lower than a fence its shard had already
    raised when the row was claimed or its run started: a deposed leader's
    write got through. A new leader that adopts an orphan rewrites its fence
    (``ticks.take_over``), so only the row's current fence is compared, and an
    adopted row's old claim time, which precedes the raise, is no finding.
    Claim and start times are the writer's wall clock and raise times the
    raiser's: ``clock_tolerance_ms`` absorbs the skew between them.
unresolved
    A row still ``claimed`` or ``running`` more than ``grace_ms`` after its
    slot whose shard has no live leader to settle it (``live_leaders``; when
    not given, every such row is reported).
false overlap
    A slot recorded ``skipped`` by the overlap policy ("the previous run is
    still going") when no earlier run of the job had *started* and not
    finished at the moment of the skip (the skipped row's ``finished_at_ms``):
    no row of the job that was not itself skipped had a ``started_at_ms`` at or
    before the skip and was unresolved, or finished later than
    ``OVERLAP_SLACK_MS`` before it. A row merely claimed then (a catch-up slot
    waiting its turn) explains nothing: overlap means a run handed to its
    executor (``leader/job_line.py``). The skip is legitimate only while a
    run goes on; one without a run is a slot silently not run, the failure of a
    leader that lost count of its runs, or that judged a live slot before the
    earlier slot it waited behind had started.

notification missing
    A failed slot of a job with its own ``on_failure`` (or a recovery, for
    ``on_recovery``) with no row in ``notifications``, more than ``grace_ms``
    after the tick settled (``rules.notifications.owed_in``).

Jitter moves a slot's start, never its identity: the row of a jittered slot is
still keyed by the unjittered time (and claimed before it), so the missing rule
looks for it there; the unresolved rule's grace runs from its jittered start.

Calendars exclude slots: a slot the job's calendars excluded when it fell is
not owed, so it is neither missing nor counted as checked; it is counted as
``calendar_excluded``. Each slot is judged by the calendar versions in force at
it (``calendar_history``: every version is kept with the time it took effect),
so changing a calendar does not rewrite the past; for a few seconds after a
change a slot the two versions judge differently may go either way.

Retention deletes old rows, so an absent slot below the job's recorded horizon
(its shard's, from ``--tick-retention`` or ``db prune``, or its own, from its
``history_limit``; ``store.retention.horizons_of_jobs``) is counted ``pruned``,
never missing nor excused: the horizon is written in the same transaction as
the deletes below it (``rules.retention.is_pruned``).

A backfill (``shardcron jobs backfill``) adds ordinary rows, claimed long
after their slot: a slot it filled is present (before the job's
``active_since_ms`` it is simply an extra row, never a finding), but its late
claim time says nothing about when the live schedule caught up, so it excuses
no earlier slot: it counts as claimed at its own slot (``backfilled_slots``).
Without the backfill those earlier slots would have been judged by a later
row, which excuses no fewer, so a backfill never hides a finding.

Manual runs (TriggerJob) are extra rows, never owed: they are ignored by the
missing and duplicate rules and checked by the other two. Rows of a deleted
job are checked for fences and resolution and summarised as ``deleted``.

The window is ``(from_ms, to_ms]``, like ``triggers.slots_between``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from shardcron.clock import rfc3339_ms
from shardcron.model import Backfill, Job, Tick, TickStatus
from shardcron.rules.calendar_history import Verdict
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.policies import OVERLAP_SKIP_REASON
from shardcron.rules.retention import PruneState, audit_range_state, is_pruned
from shardcron.rules.triggers import Trigger, slots_between, trigger_for

DEFAULT_GRACE_MS = 60_000
DEFAULT_CLOCK_TOLERANCE_MS = 0
# A run's row gets its finished_at_ms before its leader counts the run as over
# (the result is queued, then the worker returns): a skip decided this soon
# after a run finished may have seen it still going, and is no finding.
OVERLAP_SLACK_MS = 1000
_UNRESOLVED = frozenset({TickStatus.CLAIMED, TickStatus.RUNNING})


class FindingKind(StrEnum):
    DUPLICATE = "duplicate"
    MISSING = "missing"
    STALE_FENCE = "stale_fence"
    UNRESOLVED = "unresolved"
    FALSE_OVERLAP = "false_overlap"
    NOTIFICATION_MISSING = "notification_missing"


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    job_id: str
    scheduled_at_ms: int
    detail: str
    shard: int | None = None  # None for a missing slot: there is no row to read it from
    fence: int | None = None
    node_id: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class FenceRaise:
    """A ``fence_log`` row: ``fence`` became shard ``shard``'s fence at ``raised_at_ms`` (raiser's clock)."""

    shard: int
    fence: int
    node_id: str
    raised_at_ms: int


@dataclass(frozen=True)
class MissingSlots:
    slots_checked: int
    missing: tuple[int, ...]
    excused: tuple[int, ...]
    calendar_excluded: int = 0


def find_duplicates(rows: Iterable[Tick]) -> list[Finding]:
    """One finding per (job, slot) that has more than one scheduled (non-manual) row."""
    by_slot: dict[tuple[str, int], list[Tick]] = defaultdict(list)
    for r in rows:
        if not r.manual:
            by_slot[(r.job_id, r.scheduled_at_ms)].append(r)
    out: list[Finding] = []
    for (job_id, at), same in by_slot.items():
        if len(same) > 1:
            fences = ", ".join(f"fence {r.fence} on {r.node_id} ({TickStatus(r.status).value})" for r in same)
            out.append(
                Finding(
                    FindingKind.DUPLICATE, job_id, at, f"{len(same)} rows for one slot: {fences}", shard=same[0].shard
                )
            )
    return sorted(out, key=finding_order)


def find_missing(
    job: Job,
    present: Mapping[int, int | None],
    from_ms: int,
    to_ms: int,
    *,
    now_ms: int,
    trigger: Trigger | None = None,
    judge: Callable[[int], Verdict] | None = None,
) -> MissingSlots:
    """The owed slots of ``job`` in ``(from_ms, to_ms]`` with no row, and those excused (see the module doc).

    ``present``: scheduled slot -> ``claimed_at_ms`` of the job's scheduled
    (non-manual) rows; it may also hold rows after ``to_ms``, which are not
    checked but tell when the slots before them were caught up. A row without
    a claim time counts as claimed at its slot. ``judge``: the job's calendars'
    verdict on a slot (``calendar_history.History.judge``); an excluded slot is
    not owed, and one just after a change that flips it is owed only if it has a row.
    """
    start = max(from_ms, job.active_since_ms)
    until = min(to_ms, now_ms)
    if job.paused:
        until = min(until, max(present, default=start))
    if until <= start:
        return MissingSlots(0, (), ())
    slots = slots_between(trigger or trigger_for(job.schedule), start, until)
    excluded = 0
    if judge is not None:
        owed = []
        for s in slots:
            verdict = judge(s)
            if verdict is Verdict.OWED or (verdict is Verdict.EITHER and s in present):
                owed.append(s)
            else:
                excluded += 1
        slots = owed
    have = sorted(present)
    missing: list[int] = []
    excused: list[int] = []
    for s in slots:
        if s in present:
            continue
        i = bisect_right(have, s)
        if i < len(have):
            after = have[i]
            claimed = present[after]
            written_at = claimed if claimed is not None else after
        else:
            written_at = now_ms
        (excused if s < written_at - job.catchup_window_ms else missing).append(s)
    return MissingSlots(len(slots), tuple(missing), tuple(excused), excluded)


@dataclass(frozen=True)
class PrunedSplit:
    slots_checked: int
    missing: tuple[int, ...]
    excused: tuple[int, ...]
    pruned: tuple[int, ...]


def split_pruned(found: MissingSlots, horizon_ms: int | None) -> PrunedSplit:
    """``find_missing``'s absent slots, those below the job's retention horizon set apart as pruned."""

    def below(slots: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s for s in slots if is_pruned(s, horizon_ms))

    def above(slots: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s for s in slots if not is_pruned(s, horizon_ms))

    return PrunedSplit(
        found.slots_checked, above(found.missing), above(found.excused), below(found.missing) + below(found.excused)
    )


def window_retention(from_ms: int, to_ms: int, horizons: Iterable[int | None]) -> PruneState:
    """The audit window ``(from_ms, to_ms]`` under the jobs' horizons: pruned when every job's part of it
    is below its horizon, intact when none is, else partially pruned."""
    states = {audit_range_state(from_ms + 1, to_ms + 1, h) for h in horizons} or {PruneState.INTACT}
    return states.pop() if len(states) == 1 else PruneState.PARTIALLY_PRUNED


def added_by_backfill(slot_ms: int, claimed_at_ms: int | None, backfills: Iterable[Backfill]) -> bool:
    """Whether one job's scheduled row was added by one of its backfills: in its range, and
    claimed once it existed (a backfill covers only the past, whose slots the live schedule
    had claimed before)."""
    return claimed_at_ms is not None and any(
        b.from_ms <= slot_ms < b.to_ms and claimed_at_ms >= b.created_at_ms for b in backfills
    )


def backfilled_slots(rows: Iterable[Tick], backfills: Sequence[Backfill]) -> set[int]:
    """The slots of one job's scheduled rows that its backfills added."""
    return {
        t.scheduled_at_ms
        for t in rows
        if backfills and not t.manual and added_by_backfill(t.scheduled_at_ms, t.claimed_at_ms, backfills)
    }


def find_stale(rows: Iterable[Tick], raises: Iterable[FenceRaise], tolerance_ms: int = 0) -> list[Finding]:
    """Rows claimed or started after a higher fence than their own was raised for their shard.

    A row is stale when, for some raise of its shard with ``fence`` above the
    row's, ``raised_at_ms < claimed_at_ms - tolerance_ms`` (or the same with
    ``started_at_ms``). The earliest such raise is named.
    """
    # Per shard: fences ascending, and for each position the earliest raise of
    # that fence or any higher one.
    by_shard: dict[int, list[FenceRaise]] = defaultdict(list)
    for r in raises:
        by_shard[r.shard].append(r)
    index: dict[int, tuple[list[int], list[FenceRaise]]] = {}
    for shard, rs in by_shard.items():
        rs.sort(key=lambda r: r.fence)
        earliest: list[FenceRaise] = [rs[-1]] * len(rs)
        for i in range(len(rs) - 2, -1, -1):
            earliest[i] = rs[i] if rs[i].raised_at_ms <= earliest[i + 1].raised_at_ms else earliest[i + 1]
        index[shard] = ([r.fence for r in rs], earliest)

    out: list[Finding] = []
    for t in rows:
        if t.shard not in index:
            continue
        fences, earliest = index[t.shard]
        i = bisect_right(fences, t.fence)
        if i == len(fences):
            continue  # no higher fence was ever raised
        newer = earliest[i]
        late = [
            f"{what} at {rfc3339_ms(at)}"
            for what, at in (("claimed", t.claimed_at_ms), ("started", t.started_at_ms))
            if at is not None and newer.raised_at_ms < at - tolerance_ms
        ]
        if late:
            out.append(
                Finding(
                    FindingKind.STALE_FENCE,
                    t.job_id,
                    t.scheduled_at_ms,
                    f"{' and '.join(late)} under fence {t.fence}, after fence {newer.fence} was raised at "
                    f"{rfc3339_ms(newer.raised_at_ms)} by {newer.node_id}",
                    shard=t.shard,
                    fence=t.fence,
                    node_id=t.node_id,
                    status=TickStatus(t.status).value,
                )
            )
    return sorted(out, key=finding_order)


def find_unresolved(
    rows: Iterable[Tick],
    *,
    now_ms: int,
    grace_ms: int = DEFAULT_GRACE_MS,
    live_leaders: Callable[[int], bool] | None = None,
    jitter_ms: Mapping[str, int] | None = None,
) -> list[Finding]:
    """Rows still claimed or running more than ``grace_ms`` after their start was due, on a shard no
    leader will settle them on (every shard, when ``live_leaders`` is not given).

    ``jitter_ms``: job id -> its jitter. A jittered slot's row is claimed at the slot (its identity)
    but starts up to the jitter later, so its grace runs from ``slot + jitter_offset_ms``.
    """
    out: list[Finding] = []
    for t in rows:
        status = TickStatus(t.status)
        if status not in _UNRESOLVED or t.scheduled_at_ms >= now_ms - grace_ms:
            continue
        if (
            jitter_ms
            and not t.manual
            and jitter_ms.get(t.job_id)
            and t.scheduled_at_ms + jitter_offset_ms(t.job_id, t.scheduled_at_ms, jitter_ms[t.job_id])
            >= now_ms - grace_ms
        ):
            continue
        if live_leaders is not None and live_leaders(t.shard):
            continue
        why = "its shard has no live leader" if live_leaders is not None else "leaders not checked"
        out.append(
            Finding(
                FindingKind.UNRESOLVED,
                t.job_id,
                t.scheduled_at_ms,
                f"still {status.value} {(now_ms - t.scheduled_at_ms) / 1000:.0f}s after its slot; {why}",
                shard=t.shard,
                fence=t.fence,
                node_id=t.node_id,
                status=status.value,
            )
        )
    return sorted(out, key=finding_order)


def skipped_at(t: Tick) -> int:
    """When the leader decided to skip: the row's finish time (its slot if unset)."""
    return t.finished_at_ms if t.finished_at_ms is not None else t.scheduled_at_ms


def find_false_overlap(rows: Iterable[Tick], slack_ms: int = OVERLAP_SLACK_MS) -> list[Finding]:
    """Rows skipped by the overlap policy while no earlier run of their job had started and not finished.

    A skip is judged at its row's ``finished_at_ms`` (when the leader decided;
    its slot when unset). A run covers it when the run's row is of the same
    job, not skipped, scheduled no later than that moment, had started by
    then (``started_at_ms`` set and not after it: a row only claimed, or
    started later, was not going), and either is still unresolved or finished
    no more than ``slack_ms`` before it. ``rows`` may hold a job's earlier rows
    too (runs before an audit window can cover skips inside it); every overlap
    skip given is judged.
    """
    runs: dict[str, list[Tick]] = defaultdict(list)
    skips: list[Tick] = []
    for t in rows:
        if is_overlap_skip(t):
            skips.append(t)
        elif TickStatus(t.status) is not TickStatus.SKIPPED:
            runs[t.job_id].append(t)
    out: list[Finding] = []
    for t in skips:
        decided = skipped_at(t)
        earlier = [r for r in runs.get(t.job_id, ()) if r.scheduled_at_ms <= decided]
        if any(is_going_at(r, decided, slack_ms) for r in earlier):
            continue
        out.append(
            Finding(
                FindingKind.FALSE_OVERLAP,
                t.job_id,
                t.scheduled_at_ms,
                f"skipped at {rfc3339_ms(decided)} as overlapping, but no earlier run of the job had started and "
                f"not finished ({_why_not_going(earlier, decided)})",
                shard=t.shard,
                fence=t.fence,
                node_id=t.node_id,
                status=TickStatus(t.status).value,
            )
        )
    return sorted(out, key=finding_order)


def is_going_at(r: Tick, at_ms: int, slack_ms: int = 0) -> bool:
    """Whether run ``r`` had started by ``at_ms`` and not finished (more than ``slack_ms``) before it."""
    return (
        r.started_at_ms is not None
        and r.started_at_ms <= at_ms
        and (r.finished_at_ms is None or r.finished_at_ms >= at_ms - slack_ms)
    )


def _why_not_going(earlier: Sequence[Tick], at_ms: int) -> str:
    """What the earlier runs were doing at ``at_ms``, for the finding's message."""
    late = [r for r in earlier if r.started_at_ms is None or r.started_at_ms > at_ms]
    if late:
        first = min(late, key=lambda r: r.scheduled_at_ms)
        when = f": it started at {rfc3339_ms(first.started_at_ms)}" if first.started_at_ms is not None else ""
        return f"slot {rfc3339_ms(first.scheduled_at_ms)} was claimed and had not started{when}"
    last = max((r.finished_at_ms for r in earlier if r.finished_at_ms is not None), default=None)
    return f"the last one finished at {rfc3339_ms(last)}" if last is not None else "none had run"


def finding_order(f: Finding) -> tuple[int, str]:
    """How findings are listed: by slot, then job."""
    return (f.scheduled_at_ms, f.job_id)


def is_overlap_skip(t: Tick) -> bool:
    """Whether ``t`` is a slot the overlap policy skipped ("the previous run is still going")."""
    return TickStatus(t.status) is TickStatus.SKIPPED and (t.error or "").startswith(OVERLAP_SKIP_REASON)


__all__ = [
    "DEFAULT_CLOCK_TOLERANCE_MS",
    "DEFAULT_GRACE_MS",
    "OVERLAP_SLACK_MS",
    "FenceRaise",
    "Finding",
    "FindingKind",
    "MissingSlots",
    "PrunedSplit",
    "added_by_backfill",
    "backfilled_slots",
    "find_duplicates",
    "find_false_overlap",
    "find_missing",
    "find_stale",
    "find_unresolved",
    "finding_order",
    "is_going_at",
    "is_overlap_skip",
    "skipped_at",
    "split_pruned",
    "window_retention",
]
