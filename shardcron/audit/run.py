"""``run_audit``: read a window from the store, judge it by the audit's rules, and report.

The rules, and what counts as a finding, are ``shardcron.rules.audit``; the
reads are ``reads``; the report is ``report``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping

from sqlalchemy import Engine

from shardcron import clock
from shardcron.audit.reads import audited_jobs, calendar_history, fence_raises, first_row_after
from shardcron.audit.report import AuditReport, DeadlineMiss, JobSummary
from shardcron.clock import rfc3339_ms
from shardcron.errors import ConfigError
from shardcron.jobkey import namespace_of
from shardcron.model import Backfill, Job, Tick
from shardcron.rules.audit import (
    DEFAULT_CLOCK_TOLERANCE_MS,
    DEFAULT_GRACE_MS,
    OVERLAP_SLACK_MS,
    Finding,
    FindingKind,
    added_by_backfill,
    backfilled_slots,
    find_duplicates,
    find_false_overlap,
    find_missing,
    find_stale,
    find_unresolved,
    finding_order,
    is_overlap_skip,
    skipped_at,
    split_pruned,
    window_retention,
)
from shardcron.rules.deadlines import JUDGE_GRACE_MS, DeadlineKind, deadline_of, unraised
from shardcron.rules.notifications import NO_DEFAULTS, NotificationKind, owed_in, target_for
from shardcron.rules.triggers import Trigger, trigger_for
from shardcron.store.backfills import backfills_over
from shardcron.store.notifications import between
from shardcron.store.retention import horizons_of_jobs
from shardcron.store.tick_reads import runs_busy_since, ticks_between


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
    jobs = audited_jobs(engine, job_id)
    rows = ticks_between(engine, from_ms + 1, to_ms + 1, job_id)
    if namespaces is not None:
        jobs = [j for j in jobs if namespace_of(j.id) in namespaces]
        rows = [t for t in rows if namespace_of(t.job_id) in namespaces]
    raises = fence_raises(engine, {t.shard for t in rows})
    horizons = horizons_of_jobs(engine, [j.id for j in jobs])

    per_job: dict[str, JobSummary] = {}
    rows_by_job: dict[str, list[Tick]] = defaultdict(list)
    for t in rows:
        rows_by_job[t.job_id].append(t)
    backfills_of: dict[str, list[Backfill]] = defaultdict(list)
    for b in backfills_over(engine, from_ms + 1, to_ms + 1, [job_id] if job_id is not None else None):
        backfills_of[b.job_id].append(b)
    missing: list[Finding] = []
    history = calendar_history(engine, jobs)
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
            nxt = first_row_after(engine, job.id, to_ms)
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
        missing=sorted(missing, key=finding_order),
        stale_fence=find_stale(rows, raises, clock_tolerance_ms),
        unresolved=find_unresolved(
            rows,
            now_ms=now,
            grace_ms=grace_ms,
            live_leaders=live_leaders,
            jitter_ms={j.id: j.jitter_ms for j in jobs if j.jitter_ms},
        ),
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
    report.notification_missing = _missing_notifications(
        engine, jobs, rows_by_job, from_ms, to_ms, settled_before_ms=now - grace_ms
    )
    for f in report.notification_missing:
        per_job[f.job_id].notification_missing += 1
    judged_before = now - grace_ms
    for job in jobs:
        for j in unraised(job, rows_by_job.get(job.id, []), judged_before_ms=judged_before):
            report.deadline_unraised.append(
                Finding(FindingKind.DEADLINE_UNRAISED, job.id, j.scheduled_at_ms, f"{j.kind.value} missed, not raised")
            )
            per_job[job.id].deadline_unraised += 1
    report.deadline_unraised.sort(key=finding_order)
    report.deadlines_missed = [
        DeadlineMiss(t.job_id, t.scheduled_at_ms, kind) for t in rows for kind in t.missed_deadlines
    ]
    for m in report.deadlines_missed:
        if m.job_id in per_job:
            per_job[m.job_id].deadlines_missed += 1
    return report


def _missing_notifications(
    engine: Engine,
    jobs: list[Job],
    rows_by_job: Mapping[str, list[Tick]],
    from_ms: int,
    to_ms: int,
    *,
    settled_before_ms: int,
) -> list[Finding]:
    """A failed slot (or a recovery) of a job with its own on_failure (on_recovery) and no notification
    row, once the grace has passed since it settled. A node's default notifications are not in the store,
    so jobs covered only by them are not checked; a suppressed row counts as present (it is recorded)."""
    wanted = {
        j.id: frozenset(
            k
            for k, spec in ((NotificationKind.ON_FAILURE, j.on_failure), (NotificationKind.ON_RECOVERY, j.on_recovery))
            if spec is not None
        )
        for j in jobs
        if j.on_failure is not None or j.on_recovery is not None
    }
    # A recorded miss of a job whose alert has a target of its own (on_deadline, else its on_failure).
    alerted = {j.id: j for j in jobs if target_for(j, NotificationKind.DEADLINE, NO_DEFAULTS) is not None}
    if not wanted and not alerted:
        return []
    present = {(n.job_id, n.scheduled_at_ms, n.kind) for n in between(engine, from_ms + 1, to_ms + 1)}
    out: list[Finding] = []
    for job_id, kinds in wanted.items():
        for slot, kind in owed_in(rows_by_job.get(job_id, []), kinds, settled_before_ms=settled_before_ms):
            if (job_id, slot, kind) not in present:
                out.append(Finding(FindingKind.NOTIFICATION_MISSING, job_id, slot, f"{kind.value} owed, no row"))
    for job_id, job in alerted.items():
        for t in rows_by_job.get(job_id, []):
            for missed_kind in t.missed_deadlines:
                judged_at = t.scheduled_at_ms + (deadline_of(job, DeadlineKind(missed_kind)) or 0) + JUDGE_GRACE_MS
                owed = (job_id, t.scheduled_at_ms, NotificationKind(missed_kind))
                if judged_at < settled_before_ms and owed not in present:
                    out.append(
                        Finding(
                            FindingKind.NOTIFICATION_MISSING, job_id, t.scheduled_at_ms, f"{missed_kind} owed, no row"
                        )
                    )
    return sorted(out, key=finding_order)


def _false_overlap(engine: Engine, rows: list[Tick], from_ms: int) -> list[Finding]:
    """``find_false_overlap`` over the window's rows; a job with findings is judged again with its
    earlier runs that could still have been in flight at its first such skip."""
    found = find_false_overlap(rows)
    if not found:
        return found
    rows_of: dict[str, list[Tick]] = defaultdict(list)
    for t in rows:
        rows_of[t.job_id].append(t)
    out: list[Finding] = []
    for job_id in sorted({f.job_id for f in found}):
        first = min(skipped_at(t) for t in rows_of[job_id] if is_overlap_skip(t))
        out += find_false_overlap(
            rows_of[job_id]
            + runs_busy_since(engine, job_id, scheduled_up_to_ms=from_ms, busy_from_ms=first - OVERLAP_SLACK_MS)
        )
    return sorted(out, key=finding_order)


def _tail_unwritten(job: Job, trigger: Trigger, present: Mapping[int, int | None], from_ms: int, until: int) -> bool:
    """Whether an owed-looking slot follows the job's last row in the window: then the
    first row after the window is needed to tell whether those slots were caught up."""
    after = max(from_ms, job.active_since_ms, max(present, default=from_ms))
    nxt = trigger.next_after(after)
    return nxt is not None and nxt <= until


__all__ = ["run_audit"]
