"""Retention planning, pure: how far back ticks are kept, how to delete the rest, what the audit may expect.

Two rules, either or both:

* ``--tick-retention 30d``: a tick whose slot is older than ``now - retention``
  may be deleted. The default keeps everything (``None``), so nothing changes
  for a cluster that does not ask.
* ``history_limit = N`` on a job: only its newest N ticks are kept.

The horizon
    Rows with ``scheduled_at < horizon`` may be gone. The leader RECORDS the new
    horizon (under its fence) BEFORE deleting below it, so whenever the audit
    reads, every absent row lies below a recorded horizon and reads "pruned",
    never "missing". A recorded horizon only moves forward (``advance_horizon``):
    a new leader whose clock lags must not pull it back, or rows already deleted
    would turn into "missing".

    The horizon never comes closer to now than the longest catch-up window of
    the shard's jobs: catch-up decides what was missed from the rows it finds,
    and a slot deleted inside the window would look missed and run twice.

What is never deleted, whatever the horizon (``may_delete``)
    * a tick still claimed or running: the next leader settles it (``settle_orphan``);
    * each job's newest tick: ``jobs get`` shows the last run, and catch-up
      counts missed slots from it.

Deleting in bounded batches, off the hot path
    Each DELETE takes at most ``batch`` rows; ``next_batch_size`` steers the size so
    that a statement lasts about ``DELETE_TARGET_MS``, and ``pause_after_batch_ms``
    rests in proportion, so that pruning takes at most ``DELETE_DUTY`` of the
    store's time and the lateness of running jobs does not suffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from shardcron.errors import InvalidJob
from shardcron.model import TickStatus
from shardcron.spec.durations import parse_duration_ms
from shardcron.spec.retention import RetentionError

KEEP_EVERYTHING = frozenset({"", "none", "forever", "off"})
MIN_RETENTION_MS = 1_000
MIN_DELETE_BATCH = 100
MAX_DELETE_BATCH = 10_000
DELETE_TARGET_MS = 50  # one DELETE holds its locks about this long
DELETE_DUTY = 0.2  # pruning uses at most a fifth of the store's time
_UNFINISHED = frozenset({TickStatus.CLAIMED, TickStatus.RUNNING})


def parse_retention_ms(text: str | int | float | None, field: str = "--tick-retention") -> int | None:
    """``"30d"``, ``"12h"``, ``"1d12h"`` as ms; absent, ``none`` or ``forever``: keep everything (None)."""
    if text is None or (isinstance(text, str) and text.strip().lower() in KEEP_EVERYTHING):
        return None
    try:
        ms = parse_duration_ms(text, field)
    except InvalidJob as err:
        raise RetentionError(field, f"{err.reason}; or none to keep everything") from None
    if ms < MIN_RETENTION_MS:
        # 0 would delete every finished tick the moment it is written: surely a slip.
        raise RetentionError(field, f"must be at least 1s, got {text!r}; use none to keep everything")
    return ms


def retention_horizon_ms(now_ms: int, retention_ms: int | None, longest_catchup_window_ms: int = 0) -> int | None:
    """Rows with ``scheduled_at`` below this may be deleted; None: keep everything."""
    if retention_ms is None:
        return None
    return now_ms - max(retention_ms, longest_catchup_window_ms)


def advance_horizon(recorded_ms: int | None, proposed_ms: int | None) -> int | None:
    """The horizon to record: never behind the one already recorded."""
    if recorded_ms is None:
        return proposed_ms
    if proposed_ms is None:
        return recorded_ms
    return max(recorded_ms, proposed_ms)


def history_cutoff_ms(job_slots: Sequence[int], history_limit: int | None) -> int | None:
    """The oldest slot a job keeps under its history limit (delete below it); None: delete nothing.

    ``job_slots`` are the job's recorded slots in any order (the store can pass just
    the newest ``history_limit`` of them).
    """
    if history_limit is None or len(job_slots) < history_limit:
        return None
    return sorted(job_slots, reverse=True)[history_limit - 1]


def may_delete(slot_ms: int, status: TickStatus, newest_of_job: bool, horizon_ms: int | None) -> bool:
    """Whether one tick row may be deleted under ``horizon_ms`` (see the module docstring)."""
    if horizon_ms is None or slot_ms >= horizon_ms:
        return False
    return status not in _UNFINISHED and not newest_of_job


def next_batch_size(
    size: int,
    elapsed_ms: float,
    target_ms: float = DELETE_TARGET_MS,
    lo: int = MIN_DELETE_BATCH,
    hi: int = MAX_DELETE_BATCH,
) -> int:
    """The next DELETE's row limit, steered toward ``target_ms`` a statement.

    Scaled by target/elapsed, but at most doubled (one quick batch may have hit
    cached pages) and at least quartered (one slow one may have waited on a lock).
    """
    factor = 2.0 if elapsed_ms <= 0 else min(2.0, max(0.25, target_ms / elapsed_ms))
    return max(lo, min(hi, int(size * factor)))


PRUNE_EVERY_MIN_MS = 1_000
PRUNE_EVERY_MAX_MS = 60_000
PRUNE_EVERY_HISTORY_ONLY_MS = 10_000


def prune_every_ms(retention_ms: int | None) -> int:
    """How often a leader looks for ticks to prune: a tenth of the retention, between 1 s and 1 min
    (so the table holds at most about 10 % more than the retention asks); 10 s when only
    jobs' history limits prune."""
    if retention_ms is None:
        return PRUNE_EVERY_HISTORY_ONLY_MS
    return max(PRUNE_EVERY_MIN_MS, min(PRUNE_EVERY_MAX_MS, retention_ms // 10))


def history_prune_every_ms(shortest_gap_ms: int | None, history_limit: int) -> int:
    """How often a leader prunes one job's history: when about a tenth of its limit in new ticks
    can have come (at least every 10 s apart; a one-off schedule as rarely as that). One fenced
    transaction per job per pass would otherwise be thousands a second on a shard of many jobs."""
    if shortest_gap_ms is None:
        return PRUNE_EVERY_HISTORY_ONLY_MS
    return max(PRUNE_EVERY_HISTORY_ONLY_MS, shortest_gap_ms * max(1, history_limit // 10))


def prune_before_ms(before_ms: int, now_ms: int, longest_catchup_window_ms: int) -> int:
    """``db prune --before``'s horizon: ``before_ms``, but never nearer now than the longest catch-up
    window (as the leaders' horizon; see the module docstring). Refuses a time in the future."""
    if before_ms > now_ms:
        raise RetentionError("--before", "must not be in the future")
    return min(before_ms, now_ms - longest_catchup_window_ms)


def pause_after_batch_ms(elapsed_ms: float, duty: float = DELETE_DUTY) -> int:
    """How long to rest after a batch that took ``elapsed_ms``, to keep pruning at ``duty`` of the time."""
    if not 0 < duty <= 1:
        raise ValueError(f"duty must be in (0, 1], got {duty}")
    return round(max(0.0, elapsed_ms) * (1 - duty) / duty)


class PruneState(StrEnum):
    INTACT = "intact"  # no row of the range can have been pruned
    PARTIALLY_PRUNED = "partially pruned"  # rows before the horizon may be gone; after it, must be there
    PRUNED = "pruned"  # the whole range is below the horizon


def effective_horizon(shard_horizon_ms: int | None, job_horizon_ms: int | None = None) -> int | None:
    """The shard's retention horizon and the job's history-limit horizon: the later applies."""
    return advance_horizon(shard_horizon_ms, job_horizon_ms)


def audit_range_state(
    from_ms: int, to_ms: int, shard_horizon_ms: int | None, job_horizon_ms: int | None = None
) -> PruneState:
    """What the audit may expect of ``[from_ms, to_ms)`` given the recorded horizons."""
    if from_ms >= to_ms:
        raise ValueError(f"an audit range must not be empty: {from_ms} >= {to_ms}")
    horizon = effective_horizon(shard_horizon_ms, job_horizon_ms)
    if horizon is None or horizon <= from_ms:
        return PruneState.INTACT
    if horizon >= to_ms:
        return PruneState.PRUNED
    return PruneState.PARTIALLY_PRUNED


def is_pruned(slot_ms: int, shard_horizon_ms: int | None, job_horizon_ms: int | None = None) -> bool:
    """Whether an absent slot is explained by pruning (else the audit calls it missing)."""
    horizon = effective_horizon(shard_horizon_ms, job_horizon_ms)
    return horizon is not None and slot_ms < horizon


__all__ = [
    "DELETE_DUTY",
    "DELETE_TARGET_MS",
    "MAX_DELETE_BATCH",
    "MIN_DELETE_BATCH",
    "PruneState",
    "advance_horizon",
    "audit_range_state",
    "effective_horizon",
    "history_cutoff_ms",
    "is_pruned",
    "may_delete",
    "next_batch_size",
    "parse_retention_ms",
    "pause_after_batch_ms",
    "history_prune_every_ms",
    "prune_before_ms",
    "prune_every_ms",
    "retention_horizon_ms",
]
