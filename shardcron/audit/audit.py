"""The audit: does the tick store hold exactly one row per owed slot, written under a current fence?

``run_audit`` reads the jobs, the ticks of a time window and the fence log,
and hands them to five pure rules (one table-driven unit test each):

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
    slot catch-up leaves without a row (``policies.plan_catch_up``), whatever
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
    executor (``scheduling/job_line.py``). The skip is legitimate only while a
    run goes on; one without a run is a slot silently not run, the failure of a
    leader that lost count of its runs, or that judged a live slot before the
    earlier slot it waited behind had started.

notification missing
    A failed slot of a job with its own ``on_failure`` (or a recovery, for
    ``on_recovery``) with no row in ``notifications``, more than ``grace_ms``
    after the tick settled (``notifications.owed.owed_in``).

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
the deletes below it (``scheduling.retention.is_pruned``).

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
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from sqlalchemy import Engine, select

from shardcron import clock
from shardcron.clock import rfc3339_ms
from shardcron.errors import ConfigError, JobNotFound
from shardcron.model import Backfill, Job, Tick, TickStatus
from shardcron.rules.calendar_history import History, Verdict, Version
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.policies import OVERLAP_SKIP_REASON
from shardcron.rules.retention import PruneState, audit_range_state, is_pruned
from shardcron.rules.triggers import Trigger, slots_between, trigger_for
from shardcron.store.engine import reading
from shardcron.store.backfills import backfills_over
from shardcron.store.jobs import get_job, list_jobs
from shardcron.store.retention import horizons_of_jobs
from shardcron.store.schema import fence_log, ticks
from shardcron.store.ticks import runs_busy_since, ticks_between
from shardcron.jobkey import display_key, namespace_of, split_key

DEFAULT_GRACE_MS = 60_000
DEFAULT_CLOCK_TOLERANCE_MS = 0
# A run's row gets its finished_at_ms before its leader counts the run as over
# (the result is queued, then the worker returns): a skip decided this soon
# after a run finished may have seen it still going, and is no finding.
OVERLAP_SLACK_MS = 1000
_JOB_PAGE = 1000
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


@dataclass
class JobSummary:
    job_id: str
    state: str = "active"  # active | paused | deleted (ticks without a job row)
    slots_checked: int = 0
    ticks: int = 0  # rows in the window, manual ones included
    duplicates: int = 0
    missing: int = 0
    excused: int = 0  # missing, but beyond the catch-up window: not a finding
    calendar_excluded: int = 0  # slots its calendars excluded: not owed
    pruned: int = 0  # absent below the job's retention horizon: deleted by retention, not a finding
    stale_fence: int = 0
    unresolved: int = 0
    false_overlap: int = 0
    backfilled: int = 0  # rows in the window a backfill added
    notification_missing: int = 0

    @property
    def findings(self) -> int:
        return (self.duplicates + self.missing + self.stale_fence + self.unresolved + self.false_overlap
                + self.notification_missing)


@dataclass
class AuditReport:
    slots_checked: int
    duplicates: list[Finding]
    missing: list[Finding]
    stale_fence: list[Finding]
    unresolved: list[Finding]
    per_job: dict[str, JobSummary]
    excused: int = 0
    ticks_checked: int = 0
    from_ms: int = 0
    to_ms: int = 0
    now_ms: int = 0
    false_overlap: list[Finding] = field(default_factory=list)
    calendar_excluded: int = 0
    pruned: int = 0
    retention: PruneState = PruneState.INTACT  # the window as the audited jobs' horizons leave it
    notification_missing: list[Finding] = field(default_factory=list)

    def clean(self) -> bool:
        return not (self.duplicates or self.missing or self.stale_fence or self.unresolved or self.false_overlap
                    or self.notification_missing)

    def findings(self) -> dict[FindingKind, list[Finding]]:
        return {
            FindingKind.DUPLICATE: self.duplicates,
            FindingKind.MISSING: self.missing,
            FindingKind.STALE_FENCE: self.stale_fence,
            FindingKind.UNRESOLVED: self.unresolved,
            FindingKind.FALSE_OVERLAP: self.false_overlap,
            FindingKind.NOTIFICATION_MISSING: self.notification_missing,
        }

    def to_dict(self) -> dict:
        return {
            "clean": self.clean(),
            "from_ms": self.from_ms,
            "to_ms": self.to_ms,
            "now_ms": self.now_ms,
            "slots_checked": self.slots_checked,
            "ticks_checked": self.ticks_checked,
            "excused": self.excused,
            "calendar_excluded": self.calendar_excluded,
            "pruned": self.pruned,
            "retention": self.retention.value,
            "duplicates": [_finding_dict(f) for f in self.duplicates],
            "missing": [_finding_dict(f) for f in self.missing],
            "stale_fence": [_finding_dict(f) for f in self.stale_fence],
            "unresolved": [_finding_dict(f) for f in self.unresolved],
            "false_overlap": [_finding_dict(f) for f in self.false_overlap],
            "notification_missing": [_finding_dict(f) for f in self.notification_missing],
            "per_job": {display_key(job_id): {**asdict(s), "job_id": split_key(job_id).id,
                                              "namespace": split_key(job_id).namespace}
                        for job_id, s in sorted(self.per_job.items())},
        }


def _finding_dict(f: Finding) -> dict:
    d = asdict(f)
    d["kind"] = f.kind.value
    d["job_id"], d["namespace"] = split_key(f.job_id)[::-1]
    return d


# -- the rules: pure ---------------------------------------------------------------------


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
    out = []
    for (job_id, at), same in by_slot.items():
        if len(same) > 1:
            fences = ", ".join(f"fence {r.fence} on {r.node_id} ({TickStatus(r.status).value})" for r in same)
            out.append(Finding(FindingKind.DUPLICATE, job_id, at, f"{len(same)} rows for one slot: {fences}",
                               shard=same[0].shard))
    return sorted(out, key=_order)


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
    missing, excused = [], []
    for s in slots:
        if s in present:
            continue
        i = bisect_right(have, s)
        if i < len(have):
            after = have[i]
            written_at = present[after] if present[after] is not None else after
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
    def below(slots):
        return tuple(s for s in slots if is_pruned(s, horizon_ms))

    def above(slots):
        return tuple(s for s in slots if not is_pruned(s, horizon_ms))

    return PrunedSplit(found.slots_checked, above(found.missing), above(found.excused),
                       below(found.missing) + below(found.excused))


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
        b.from_ms <= slot_ms < b.to_ms and claimed_at_ms >= b.created_at_ms for b in backfills)


def backfilled_slots(rows: Iterable[Tick], backfills: Sequence[Backfill]) -> set[int]:
    """The slots of one job's scheduled rows that its backfills added."""
    return {t.scheduled_at_ms for t in rows
            if backfills and not t.manual and added_by_backfill(t.scheduled_at_ms, t.claimed_at_ms, backfills)}


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

    out = []
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
            out.append(Finding(
                FindingKind.STALE_FENCE, t.job_id, t.scheduled_at_ms,
                f"{' and '.join(late)} under fence {t.fence}, after fence {newer.fence} was raised at "
                f"{rfc3339_ms(newer.raised_at_ms)} by {newer.node_id}",
                shard=t.shard, fence=t.fence, node_id=t.node_id, status=TickStatus(t.status).value,
            ))
    return sorted(out, key=_order)


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
    out = []
    for t in rows:
        status = TickStatus(t.status)
        if status not in _UNRESOLVED or t.scheduled_at_ms >= now_ms - grace_ms:
            continue
        if jitter_ms and not t.manual and jitter_ms.get(t.job_id) and \
                t.scheduled_at_ms + jitter_offset_ms(t.job_id, t.scheduled_at_ms, jitter_ms[t.job_id]) >= now_ms - grace_ms:
            continue
        if live_leaders is not None and live_leaders(t.shard):
            continue
        why = "its shard has no live leader" if live_leaders is not None else "leaders not checked"
        out.append(Finding(
            FindingKind.UNRESOLVED, t.job_id, t.scheduled_at_ms,
            f"still {status.value} {(now_ms - t.scheduled_at_ms) / 1000:.0f}s after its slot; {why}",
            shard=t.shard, fence=t.fence, node_id=t.node_id, status=status.value,
        ))
    return sorted(out, key=_order)


def is_overlap_skip(t: Tick) -> bool:
    return TickStatus(t.status) is TickStatus.SKIPPED and (t.error or "").startswith(OVERLAP_SKIP_REASON)


def _skipped_at(t: Tick) -> int:
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
    out = []
    for t in skips:
        decided = _skipped_at(t)
        earlier = [r for r in runs.get(t.job_id, ()) if r.scheduled_at_ms <= decided]
        if any(is_going_at(r, decided, slack_ms) for r in earlier):
            continue
        out.append(Finding(
            FindingKind.FALSE_OVERLAP, t.job_id, t.scheduled_at_ms,
            f"skipped at {rfc3339_ms(decided)} as overlapping, but no earlier run of the job had started and "
            f"not finished ({_why_not_going(earlier, decided)})",
            shard=t.shard, fence=t.fence, node_id=t.node_id, status=TickStatus(t.status).value,
        ))
    return sorted(out, key=_order)


def is_going_at(r: Tick, at_ms: int, slack_ms: int = 0) -> bool:
    """Whether run ``r`` had started by ``at_ms`` and not finished (more than ``slack_ms``) before it."""
    return (r.started_at_ms is not None and r.started_at_ms <= at_ms
            and (r.finished_at_ms is None or r.finished_at_ms >= at_ms - slack_ms))


def _why_not_going(earlier: Sequence[Tick], at_ms: int) -> str:
    """What the earlier runs were doing at ``at_ms``, for the finding's message."""
    late = [r for r in earlier if r.started_at_ms is None or r.started_at_ms > at_ms]
    if late:
        first = min(late, key=lambda r: r.scheduled_at_ms)
        when = f": it started at {rfc3339_ms(first.started_at_ms)}" if first.started_at_ms is not None else ""
        return f"slot {rfc3339_ms(first.scheduled_at_ms)} was claimed and had not started{when}"
    last = max((r.finished_at_ms for r in earlier if r.finished_at_ms is not None), default=None)
    return f"the last one finished at {rfc3339_ms(last)}" if last is not None else "none had run"


def _order(f: Finding) -> tuple[int, str]:
    return (f.scheduled_at_ms, f.job_id)


# -- the audit: reads, then the rules ------------------------------------------------------


def run_audit(
    engine: Engine,
    *,
    from_ms: int,
    to_ms: int,
    job_id: str | None = None,
    now_ms: int | None = None,
    live_leaders: Callable[[int], bool] | None = None,
    grace_ms: int = DEFAULT_GRACE_MS,
    clock_tolerance_ms: int = DEFAULT_CLOCK_TOLERANCE_MS,
    namespaces: frozenset[str] | None = None,
) -> AuditReport:
    """Audit the slots in ``(from_ms, to_ms]`` of every job (or of the job keyed ``job_id``; or of the
    jobs of ``namespaces``).

    Reads: the jobs (pages of 1000), the window's ticks (one query), the fence
    log (one query), and, only for a job whose last slots in the window have no
    row, its first row after the window (one query each); only for a job with
    an overlap skip no run in the window explains, its runs before the window
    that could (one query each).
    """
    if from_ms >= to_ms:
        raise ConfigError(f"the audit window is empty: from {rfc3339_ms(from_ms)} is not before to {rfc3339_ms(to_ms)}")
    if grace_ms < 0 or clock_tolerance_ms < 0:
        raise ConfigError("grace and clock tolerance must not be negative")
    now = clock.wall_ms() if now_ms is None else now_ms
    jobs = _jobs(engine, job_id)
    rows = ticks_between(engine, from_ms + 1, to_ms + 1, job_id)
    if namespaces is not None:
        jobs = [j for j in jobs if namespace_of(j.id) in namespaces]
        rows = [t for t in rows if namespace_of(t.job_id) in namespaces]
    raises = _fence_raises(engine, {t.shard for t in rows})
    horizons = horizons_of_jobs(engine, [j.id for j in jobs])

    per_job: dict[str, JobSummary] = {}
    rows_by_job: dict[str, list] = defaultdict(list)
    for t in rows:
        rows_by_job[t.job_id].append(t)
    backfills_of: dict[str, list[Backfill]] = defaultdict(list)
    for b in backfills_over(engine, from_ms + 1, to_ms + 1, [job_id] if job_id is not None else None):
        backfills_of[b.job_id].append(b)
    missing: list[Finding] = []
    history = _calendar_history(engine, jobs)
    for job in jobs:
        summary = per_job[job.id] = JobSummary(job.id, state="paused" if job.paused else "active")
        mine = rows_by_job.get(job.id, [])
        summary.ticks = len(mine)
        present = {t.scheduled_at_ms: t.claimed_at_ms for t in mine if not t.manual}
        filled = backfilled_slots(mine, backfills_of.get(job.id, []))
        present.update(dict.fromkeys(filled))  # claimed "at their slot": they excuse no earlier slot
        summary.backfilled = len(filled)
        trigger = trigger_for(job.schedule)
        if _tail_unwritten(job, trigger, present, from_ms, min(to_ms, now)):
            nxt = _first_row_after(engine, job.id, to_ms)
            if nxt is not None:
                filled_late = added_by_backfill(*nxt, backfills_over(engine, nxt[0], nxt[0] + 1, [job.id]))
                present[nxt[0]] = None if filled_late else nxt[1]
        judge = (lambda s, names=job.calendars: history.judge(names, s)) if job.calendars else None
        found = find_missing(job, present, from_ms, to_ms, now_ms=now, trigger=trigger, judge=judge)
        result = split_pruned(found, horizons.get(job.id))
        summary.slots_checked = result.slots_checked
        summary.calendar_excluded = found.calendar_excluded
        summary.missing, summary.excused, summary.pruned = len(result.missing), len(result.excused), len(result.pruned)
        missing += [Finding(FindingKind.MISSING, job.id, s, "no tick row") for s in result.missing]
    for job_id_, mine in rows_by_job.items():
        if job_id_ not in per_job:
            per_job[job_id_] = JobSummary(job_id_, state="deleted", ticks=len(mine))

    report = AuditReport(
        slots_checked=sum(s.slots_checked for s in per_job.values()),
        duplicates=find_duplicates(rows),
        missing=sorted(missing, key=_order),
        stale_fence=find_stale(rows, raises, clock_tolerance_ms),
        unresolved=find_unresolved(rows, now_ms=now, grace_ms=grace_ms, live_leaders=live_leaders,
                                   jitter_ms={j.id: j.jitter_ms for j in jobs if j.jitter_ms}),
        false_overlap=_false_overlap(engine, rows, from_ms),
        per_job=per_job,
        excused=sum(s.excused for s in per_job.values()),
        calendar_excluded=sum(s.calendar_excluded for s in per_job.values()),
        pruned=sum(s.pruned for s in per_job.values()),
        retention=window_retention(from_ms, to_ms, [horizons.get(j.id) for j in jobs]),
        ticks_checked=len(rows),
        from_ms=from_ms,
        to_ms=to_ms,
        now_ms=now,
    )
    for f in report.duplicates:
        per_job[f.job_id].duplicates += 1
    for f in report.stale_fence:
        per_job[f.job_id].stale_fence += 1
    for f in report.unresolved:
        per_job[f.job_id].unresolved += 1
    for f in report.false_overlap:
        per_job[f.job_id].false_overlap += 1
    report.notification_missing = _missing_notifications(engine, jobs, rows_by_job, from_ms, to_ms,
                                                         settled_before_ms=now - grace_ms)
    for f in report.notification_missing:
        per_job[f.job_id].notification_missing += 1
    return report


def _calendar_history(engine: Engine, jobs: list[Job]) -> History:
    """Every version of the calendars these jobs name (one query; none when no job names one)."""
    names = {n for j in jobs for n in j.calendars}
    if not names:
        return History({})
    from shardcron.store.calendars import calendar_history

    versions: dict[str, list[Version]] = defaultdict(list)
    for v in calendar_history(engine, names):
        versions[v.name].append(Version(v.effective_at_ms, v.calendar))
    return History(versions)
def _missing_notifications(engine: Engine, jobs: list[Job], rows_by_job: Mapping[str, list], from_ms: int,
                           to_ms: int, *, settled_before_ms: int) -> list[Finding]:
    """A failed slot (or a recovery) of a job with its own on_failure (on_recovery) and no notification
    row, once the grace has passed since it settled. A node's default notifications are not in the store,
    so jobs covered only by them are not checked; a suppressed row counts as present (it is recorded)."""
    from shardcron.rules.notifications import NotificationKind, owed_in
    from shardcron.store.notifications import between

    wanted = {j.id: frozenset(k for k, spec in ((NotificationKind.ON_FAILURE, j.on_failure),
                                                (NotificationKind.ON_RECOVERY, j.on_recovery)) if spec is not None)
              for j in jobs if j.on_failure is not None or j.on_recovery is not None}
    if not wanted:
        return []
    present = {(n.job_id, n.scheduled_at_ms, n.kind) for n in between(engine, from_ms + 1, to_ms + 1)}
    out = []
    for job_id, kinds in wanted.items():
        for slot, kind in owed_in(rows_by_job.get(job_id, []), kinds, settled_before_ms=settled_before_ms):
            if (job_id, slot, kind) not in present:
                out.append(Finding(FindingKind.NOTIFICATION_MISSING, job_id, slot, f"{kind.value} owed, no row"))
    return sorted(out, key=_order)


def _false_overlap(engine: Engine, rows: list, from_ms: int) -> list[Finding]:
    """``find_false_overlap`` over the window's rows; a job with findings is judged again with its
    earlier runs that could still have been in flight at its first such skip."""
    found = find_false_overlap(rows)
    if not found:
        return found
    rows_of = defaultdict(list)
    for t in rows:
        rows_of[t.job_id].append(t)
    out = []
    for job_id in sorted({f.job_id for f in found}):
        first = min(_skipped_at(t) for t in rows_of[job_id] if is_overlap_skip(t))
        out += find_false_overlap(rows_of[job_id] + runs_busy_since(engine, job_id, scheduled_up_to_ms=from_ms,
                                                                       busy_from_ms=first - OVERLAP_SLACK_MS))
    return sorted(out, key=_order)


def _jobs(engine: Engine, job_id: str | None) -> list[Job]:
    if job_id is not None:
        try:
            return [get_job(engine, job_id)]
        except JobNotFound:
            return []  # deleted: its ticks are still audited
    out: list[Job] = []
    while True:
        page = list_jobs(engine, limit=_JOB_PAGE, after_id=out[-1].id if out else None)
        out += page
        if len(page) < _JOB_PAGE:
            return out


def _tail_unwritten(job: Job, trigger: Trigger, present: Mapping[int, int | None], from_ms: int, until: int) -> bool:
    """Whether an owed-looking slot follows the job's last row in the window: then the
    first row after the window is needed to tell whether those slots were caught up."""
    after = max(from_ms, job.active_since_ms, max(present, default=from_ms))
    nxt = trigger.next_after(after)
    return nxt is not None and nxt <= until


def _first_row_after(engine: Engine, job_id: str, after_ms: int) -> tuple[int, int | None] | None:
    q = (
        select(ticks.c.scheduled_at_ms, ticks.c.claimed_at_ms)
        .where(ticks.c.job_id == job_id, ticks.c.scheduled_at_ms > after_ms, ticks.c.manual == False)  # noqa: E712
        .order_by(ticks.c.scheduled_at_ms)
        .limit(1)
    )
    with reading(engine) as conn:
        row = conn.execute(q).first()
    return (row.scheduled_at_ms, row.claimed_at_ms) if row else None


def _fence_raises(engine: Engine, shards: Iterable[int]) -> list[FenceRaise]:
    shards = sorted(set(shards))
    if not shards:
        return []
    q = select(fence_log).where(fence_log.c.shard.in_(shards))
    with reading(engine) as conn:
        return [FenceRaise(r.shard, r.fence, r.node_id, r.raised_at_ms) for r in conn.execute(q)]


__all__ = [
    "DEFAULT_CLOCK_TOLERANCE_MS",
    "DEFAULT_GRACE_MS",
    "AuditReport",
    "FenceRaise",
    "Finding",
    "JobSummary",
    "FindingKind",
    "MissingSlots",
    "OVERLAP_SLACK_MS",
    "find_duplicates",
    "find_false_overlap",
    "is_going_at",
    "find_missing",
    "find_stale",
    "find_unresolved",
    "rfc3339_ms",
    "run_audit",
    "split_pruned",
    "window_retention",
]
