"""The audit's rules: what counts as a finding, as pure functions over a window's rows.

``shardcron.audit.run_audit`` reads the jobs, the ticks of a window
``(from_ms, to_ms]`` (like ``triggers.slots_between``) and the fence log, and
hands them to these rules, one per kind of finding:

duplicates
    More than one row for one (job, scheduled time): the schema is broken.
missing
    A slot the trigger produced, owed (after ``active_since_ms``; for a paused
    job no later than its last row), not excluded by the calendar versions in
    force at it, not below the job's retention horizon (``pruned``), and
    without a row. A slot already older than the catch-up window when the first
    row after it was claimed (``claimed_at_ms``; a backfilled row counts as
    claimed at its own slot; with no later row, ``now``) is *excused*.
stale fence
    A row whose current fence is lower than a fence its shard had raised when
    the row was claimed or started, give or take ``clock_tolerance_ms``.
unresolved
    A row ``claimed`` or ``running`` more than ``grace_ms`` after its (jittered)
    start on a shard with no live leader (``live_leaders``; all if not given).
false overlap
    A slot ``skipped`` by the overlap policy when no non-skipped row of the job
    had started at or before the skip and was unresolved or finished later than
    ``OVERLAP_SLACK_MS`` before it; a merely claimed row explains nothing.
notification missing
    A failed slot (or recovery) of a job with ``on_failure`` (``on_recovery``)
    and no ``notifications`` row ``grace_ms`` after it settled.

Jittered rows are keyed by the unjittered slot. Manual runs are never owed;
rows of deleted jobs are checked for fences and resolution (``deleted``).
See docs/explanation/guarantees.md ("How the audit judges a slot") for why.
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
    DEADLINE_UNRAISED = "deadline_unraised"  # a deadline the rule says was missed, not recorded missed


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
