"""The audit: does the tick store hold exactly one row per owed slot, written under a current fence.

``run_audit`` (``run``) reads a window (``reads``), judges it by the rules in
``shardcron.rules.audit`` and returns an ``AuditReport`` (``report``).
"""

from shardcron.audit.report import AuditReport, JobSummary
from shardcron.audit.run import run_audit
from shardcron.rules.audit import (
    DEFAULT_CLOCK_TOLERANCE_MS,
    DEFAULT_GRACE_MS,
    OVERLAP_SLACK_MS,
    Finding,
    FindingKind,
    find_false_overlap,
    is_overlap_skip,
)

__all__ = [
    "DEFAULT_CLOCK_TOLERANCE_MS",
    "DEFAULT_GRACE_MS",
    "OVERLAP_SLACK_MS",
    "AuditReport",
    "Finding",
    "FindingKind",
    "JobSummary",
    "find_false_overlap",
    "is_overlap_skip",
    "run_audit",
]
