"""The audit's report: its findings and per-job counts, and their JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from shardcron.jobkey import display_key, split_key
from shardcron.rules.audit import Finding, FindingKind
from shardcron.rules.retention import PruneState


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
    deadlines_missed: int = 0  # recorded missed: what the job's alerts are for, not a finding
    deadline_unraised: int = 0

    @property
    def findings(self) -> int:
        return (
            self.duplicates
            + self.missing
            + self.stale_fence
            + self.unresolved
            + self.false_overlap
            + self.notification_missing
            + self.deadline_unraised
        )


class DeadlineMiss(NamedTuple):
    """A deadline recorded missed on a slot of the window (``kind``: start_deadline, deadline, heartbeat)."""

    job_id: str
    scheduled_at_ms: int
    kind: str


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
    deadline_unraised: list[Finding] = field(default_factory=list)
    deadlines_missed: list[DeadlineMiss] = field(default_factory=list)  # reported, not findings

    def clean(self) -> bool:
        return not (
            self.duplicates
            or self.missing
            or self.stale_fence
            or self.unresolved
            or self.false_overlap
            or self.notification_missing
            or self.deadline_unraised
        )

    def findings(self) -> dict[FindingKind, list[Finding]]:
        return {
            FindingKind.DUPLICATE: self.duplicates,
            FindingKind.MISSING: self.missing,
            FindingKind.STALE_FENCE: self.stale_fence,
            FindingKind.UNRESOLVED: self.unresolved,
            FindingKind.FALSE_OVERLAP: self.false_overlap,
            FindingKind.NOTIFICATION_MISSING: self.notification_missing,
            FindingKind.DEADLINE_UNRAISED: self.deadline_unraised,
        }

    def to_dict(self) -> dict[str, Any]:
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
            "duplicates": [finding_dict(f) for f in self.duplicates],
            "missing": [finding_dict(f) for f in self.missing],
            "stale_fence": [finding_dict(f) for f in self.stale_fence],
            "unresolved": [finding_dict(f) for f in self.unresolved],
            "false_overlap": [finding_dict(f) for f in self.false_overlap],
            "notification_missing": [finding_dict(f) for f in self.notification_missing],
            "deadline_unraised": [finding_dict(f) for f in self.deadline_unraised],
            "deadlines_missed": [
                {
                    "job_id": split_key(m.job_id).id,
                    "namespace": split_key(m.job_id).namespace,
                    "scheduled_at_ms": m.scheduled_at_ms,
                    "kind": m.kind,
                }
                for m in self.deadlines_missed
            ],
            "per_job": {
                display_key(job_id): {
                    **asdict(s),
                    "job_id": split_key(job_id).id,
                    "namespace": split_key(job_id).namespace,
                }
                for job_id, s in sorted(self.per_job.items())
            },
        }


def finding_dict(f: Finding) -> dict[str, Any]:
    """One finding as JSON: its kind by value, its job id split from its namespace."""
    d = asdict(f)
    d["kind"] = f.kind.value
    d["job_id"], d["namespace"] = split_key(f.job_id)[::-1]
    return d


__all__ = ["AuditReport", "DeadlineMiss", "JobSummary", "finding_dict"]
