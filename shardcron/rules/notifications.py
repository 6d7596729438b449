"""Which notifications a settled tick owes: pure decisions, table-tested.

A failed slot (``failed``, or ``abandoned`` when its leader died and the retry budget was spent)
owes ``on_failure`` once; the retries are over by then, since a tick is settled only after its
last attempt. A succeeded slot owes ``on_recovery`` once when the job's previous settled slot
(skipped slots and unfinished ones pass over, as in ``failures_in_a_row``) failed. Manual runs
count like scheduled ones: a manual run that succeeds after failures is a recovery.

A slot that misses a deadline (``rules/deadlines.py``) owes one notification of that deadline's kind
(``start_deadline``, ``deadline``, ``heartbeat``), sent to the job's ``on_deadline``, else to where its
``on_failure`` goes.

The spec is the job's own, else the node's default (``--notify-on-failure`` /
``--notify-on-recovery``); only the default is rate limited (``notification_rate.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from shardcron.model import ExecutorSpec, Job, Tick, TickStatus


class NotificationKind(StrEnum):
    ON_FAILURE = "on_failure"
    ON_RECOVERY = "on_recovery"
    # A missed deadline, by its kind (rules.deadlines.DeadlineKind's values).
    START_DEADLINE = "start_deadline"
    DEADLINE = "deadline"
    HEARTBEAT = "heartbeat"

    @property
    def is_deadline(self) -> bool:
        return self in DEADLINE_KINDS


class NotificationStatus(StrEnum):
    """A notification row's status.

    claimed -> sent        (the executor reported success)
    claimed -> claimed     (a round of send attempts failed: tried again after ``retry_after_ms``)
    claimed -> failed      (still failing ``GIVE_UP_AFTER_MS`` after the claim: recorded, counted, given up)
    suppressed             (over the default's rate limit: recorded and counted, never sent)
    """

    CLAIMED = "claimed"
    SENT = "sent"
    FAILED = "failed"
    SUPPRESSED = "suppressed"


class Source(StrEnum):
    JOB = "job"  # the job's own on_failure / on_recovery
    DEFAULT = "default"  # the node's --notify-on-failure / --notify-on-recovery


DEADLINE_KINDS = frozenset({NotificationKind.START_DEADLINE, NotificationKind.DEADLINE, NotificationKind.HEARTBEAT})
FAILED_STATUSES = frozenset({TickStatus.FAILED, TickStatus.ABANDONED})
# What "the previous settled slot" means for recovery: a skipped slot did not run, so it neither
# ends nor continues a failure streak.
_SETTLED_RUNS = FAILED_STATUSES | {TickStatus.SUCCEEDED}


@dataclass(frozen=True)
class Defaults:
    """The node's cluster-wide notifications (None: none)."""

    on_failure: ExecutorSpec | None = None
    on_recovery: ExecutorSpec | None = None

    def of(self, kind: NotificationKind) -> ExecutorSpec | None:
        return self.on_failure if kind is NotificationKind.ON_FAILURE else self.on_recovery


NO_DEFAULTS = Defaults()


@dataclass(frozen=True)
class Target:
    spec: ExecutorSpec
    source: Source


def target_for(job: Job, kind: NotificationKind, defaults: Defaults) -> Target | None:
    """Where ``kind`` of ``job`` goes: its own spec, else the default, else nowhere (None). A missed
    deadline goes to the job's on_deadline, else where its on_failure goes."""
    if kind.is_deadline:
        if job.on_deadline is not None:
            return Target(job.on_deadline, Source.JOB)
        kind = NotificationKind.ON_FAILURE
    own = job.on_failure if kind is NotificationKind.ON_FAILURE else job.on_recovery
    if own is not None:
        return Target(own, Source.JOB)
    default = defaults.of(kind)
    return Target(default, Source.DEFAULT) if default is not None else None


# A notification whose round of send attempts failed (its receiver down) is tried again after a
# back-off that doubles from RETRY_FIRST_MS to RETRY_MAX_MS, until GIVE_UP_AFTER_MS after its claim.
RETRY_FIRST_MS = 10_000
RETRY_MAX_MS = 15 * 60_000
GIVE_UP_AFTER_MS = 24 * 3_600_000


def retry_after_ms(failed_rounds: int) -> int:
    """The wait before the next round of sends, after ``failed_rounds`` (>= 1) rounds failed."""
    return min(RETRY_MAX_MS, RETRY_FIRST_MS << min(failed_rounds - 1, 30))


def gives_up(claimed_at_ms: int, now_ms: int) -> bool:
    """Whether a notification still failing at ``now_ms`` is given up (recorded ``failed``)."""
    return now_ms - claimed_at_ms >= GIVE_UP_AFTER_MS


def wants(job: Job, kind: NotificationKind, defaults: Defaults) -> bool:
    return target_for(job, kind, defaults) is not None


def owed_kind(status: TickStatus, previous: TickStatus | None) -> NotificationKind | None:
    """The notification a tick settled as ``status`` owes, given the job's previous settled run's
    status (None: no earlier run); None when it owes none."""
    if status in FAILED_STATUSES:
        return NotificationKind.ON_FAILURE
    if status is TickStatus.SUCCEEDED and previous in FAILED_STATUSES:
        return NotificationKind.ON_RECOVERY
    return None


def counts_as_previous(status: TickStatus) -> bool:
    """Whether a row can be "the previous settled run" of a recovery (see the module doc)."""
    return status in _SETTLED_RUNS


def owed_in(
    rows: Iterable[Tick], kinds: frozenset[NotificationKind], *, settled_before_ms: int
) -> list[tuple[int, NotificationKind]]:
    """The notifications a job's ``rows`` (ticks in slot order, one job) owe, as (slot, kind), for the
    ``kinds`` the job has a spec for. Rows settled at or after ``settled_before_ms`` are left out: their
    notification may still be on its way (the audit's grace). The first row's previous run is unknown
    (before the window), so it can owe on_failure but not on_recovery."""
    out: list[tuple[int, NotificationKind]] = []
    previous: TickStatus | None = None
    for t in rows:
        if not counts_as_previous(t.status):
            continue
        kind = owed_kind(t.status, previous)
        previous = t.status
        if kind in kinds and t.finished_at_ms is not None and t.finished_at_ms < settled_before_ms:
            out.append((t.scheduled_at_ms, kind))
    return out
