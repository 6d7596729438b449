"""Backfill planning, pure: which slots of a range a backfill still owes, in what batches, at what pace.

``shardcron jobs backfill JOB --from T --to T`` runs the job's slots in
``[from, to)`` (half-open, so ``[a, b)`` then ``[b, c)`` cover a span once) that

* the trigger produces,
* every calendar of the job allows (an excluded slot is not owed: not run, not
  missing), and
* have no tick row yet: a recorded slot, whatever its status, is never run again.

The plan depends on the range and on the rows, never on how far a previous
attempt got. A successor leader after a failover re-reads the recorded slots and
plans again: what ran before the failover has rows now and drops out, so every
slot runs once. ``cursor_ms`` only saves re-reading what is known to be done.

Pace: ``rate_per_s`` slots a second, in batches of ``batch_size``; slot ``i`` of the
backfill (counting from 0) may start at ``started_ms + ceil(i * 1000 / rate)``.

Overlap: the job's ``Overlap`` values, with the live loop's meaning. ALLOW starts
each slot at its pace whatever is running. SKIP starts a slot only when no run of
the job is going; otherwise the slot is recorded as skipped with the live loop's
``OVERLAP_SKIP_REASON`` (the audit already knows such rows). A runner that keeps
its own backfill runs one at a time therefore skips only on a collision with a
live run.

Limits: a range holding more than ``MAX_BACKFILL_SLOTS`` trigger slots is refused
(split it), and so is a rate that is not positive.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import islice

from shardcron.abc import Trigger
from shardcron.errors import ShardcronError
from shardcron.model import Overlap
from shardcron.rules.calendars import allowed_by_all, next_instant_all_allow
from shardcron.rules.policies import overlap_allows
from shardcron.rules.triggers import IntervalTrigger
from shardcron.spec.calendar import Calendar

MAX_BACKFILL_SLOTS = 1_000_000
MAX_BATCH_SIZE = 10_000
DEFAULT_BATCH_SIZE = 100
_PER_SECOND = {"s": 1.0, "m": 1 / 60, "min": 1 / 60, "h": 1 / 3600}


class BackfillError(ShardcronError, ValueError):
    """A backfill request is malformed. ``field`` names the offending option."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class BackfillRequest:
    from_ms: int  # inclusive
    to_ms: int  # exclusive
    rate_per_s: float
    batch_size: int = DEFAULT_BATCH_SIZE
    overlap: Overlap = Overlap.SKIP
    slot_count: int = 0  # trigger slots in the range, before rows and calendars are considered


def parse_rate(text: str | int | float, field: str = "--rate") -> float:
    """``"10/s"``, ``"600/m"``, ``"3600/h"`` or a bare number (per second), as slots per second."""
    if isinstance(text, bool):
        raise BackfillError(field, f"expected a rate such as 10/s, got {text!r}")
    if isinstance(text, int | float):
        count, unit = float(text), "s"
    else:
        number, _, unit = str(text).strip().lower().partition("/")
        try:
            count = float(number)
        except ValueError:
            raise BackfillError(field, f"expected a rate such as 10/s or 600/m, got {text!r}") from None
        unit = unit.strip() or "s"
        if unit not in _PER_SECOND:
            raise BackfillError(field, f"{text!r}: the unit must be /s, /m or /h")
    rate = count * _PER_SECOND[unit]
    if not math.isfinite(rate) or rate <= 0:
        raise BackfillError(field, f"must be a positive rate, got {text!r}")
    return rate


def parse_overlap(text: str | Overlap, field: str = "--overlap") -> Overlap:
    try:
        return Overlap(text.lower() if isinstance(text, str) else text)
    except ValueError:
        raise BackfillError(field, f"{text!r} is not one of: {', '.join(o.value for o in Overlap)}") from None


def count_slots(trigger: Trigger, from_ms: int, to_ms: int, cap: int) -> int:
    """The trigger's slots in ``[from_ms, to_ms)``, counting no further than ``cap + 1``.

    Interval slots are counted by arithmetic, so refusing a year of every-second
    slots does not first walk a million of them.
    """
    if to_ms <= from_ms:
        return 0
    if isinstance(trigger, IntervalTrigger):
        first = trigger.next_after(from_ms - 1)
        return 0 if first is None or first >= to_ms else min(cap + 1, (to_ms - 1 - first) // trigger.interval_ms + 1)
    n, after = 0, from_ms - 1
    while n <= cap:
        slot = trigger.next_after(after)
        if slot is None or slot >= to_ms:
            break
        n, after = n + 1, slot
    return n


def validate_backfill(
    trigger: Trigger,
    from_ms: int,
    to_ms: int,
    rate_per_s: float,
    batch_size: int = DEFAULT_BATCH_SIZE,
    overlap: str | Overlap = Overlap.SKIP,
    max_slots: int = MAX_BACKFILL_SLOTS,
) -> BackfillRequest:
    """The request, checked; every refusal names the option."""
    for name, value in (("--from", from_ms), ("--to", to_ms)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BackfillError(name, f"expected epoch milliseconds, got {value!r}")
    if from_ms >= to_ms:
        raise BackfillError("--to", f"must be after --from ({from_ms} >= {to_ms})")
    if (
        isinstance(rate_per_s, bool)
        or not isinstance(rate_per_s, int | float)
        or not math.isfinite(rate_per_s)
        or rate_per_s <= 0
    ):
        raise BackfillError("--rate", f"must be a positive number of slots a second, got {rate_per_s!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise BackfillError("--batch", f"must be a whole number from 1 to {MAX_BATCH_SIZE}, got {batch_size!r}")
    mode = parse_overlap(overlap)
    count = count_slots(trigger, from_ms, to_ms, max_slots)
    if count > max_slots:
        raise BackfillError(
            "--from/--to", f"the range holds more than {max_slots:,} slots of the job; split it into smaller ranges"
        )
    return BackfillRequest(from_ms, to_ms, float(rate_per_s), batch_size, mode, count)


def owed_slots(
    trigger: Trigger, calendars: Sequence[Calendar], from_ms: int, to_ms: int, recorded: Collection[int]
) -> Iterator[int]:
    """The slots in ``[from_ms, to_ms)`` still owed, ascending: allowed by every calendar, not recorded.

    Excluded stretches are jumped over as ``calendars.next_allowed`` does. The
    walk visits each trigger slot of the range at most once, so it is bounded by
    the range's slot count (which ``validate_backfill`` bounded).
    """
    recorded = recorded if isinstance(recorded, set | frozenset | dict) else set(recorded)
    until = to_ms - 1
    after = from_ms - 1
    while True:
        slot = trigger.next_after(after)
        if slot is None or slot > until:
            return
        if allowed_by_all(calendars, slot):
            if slot not in recorded:
                yield slot
            after = slot
            continue
        opening = next_instant_all_allow(calendars, slot, until)
        if opening is None:
            return
        after = opening - 1  # opening > slot: progress


@dataclass(frozen=True)
class BackfillPage:
    slots: tuple[int, ...]  # owed, ascending, at most the batch size
    cursor_ms: int | None  # plan the next page from after this slot; None: the range is done


def backfill_page(
    trigger: Trigger,
    calendars: Sequence[Calendar],
    request: BackfillRequest,
    recorded: Collection[int],
    cursor_ms: int | None = None,
) -> BackfillPage:
    """The next batch of owed slots after ``cursor_ms`` (from the range's start when None)."""
    start = request.from_ms if cursor_ms is None else max(request.from_ms, cursor_ms + 1)
    page = tuple(islice(owed_slots(trigger, calendars, start, request.to_ms, recorded), request.batch_size))
    done = len(page) < request.batch_size
    return BackfillPage(page, None if done else page[-1])


def slot_not_before_ms(started_ms: int, index: int, rate_per_s: float) -> int:
    """When the backfill's slot number ``index`` (from 0) may start, at ``rate_per_s``."""
    if index < 0 or rate_per_s <= 0:
        raise ValueError(f"index must be >= 0 and the rate positive, got {index} and {rate_per_s}")
    return started_ms + math.ceil(index * 1000 / rate_per_s)


class BackfillAction(StrEnum):
    RUN = "run"
    SKIP = "skip"  # record the slot as skipped with policies.OVERLAP_SKIP_REASON


def backfill_slot_action(overlap: Overlap, running_now: int) -> BackfillAction:
    """The live loop's overlap rule, applied to a backfilled slot (see the module docstring)."""
    return BackfillAction.RUN if overlap_allows(overlap, running_now) else BackfillAction.SKIP


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_BACKFILL_SLOTS",
    "MAX_BATCH_SIZE",
    "BackfillAction",
    "BackfillError",
    "BackfillPage",
    "BackfillRequest",
    "backfill_page",
    "backfill_slot_action",
    "count_slots",
    "owed_slots",
    "parse_overlap",
    "parse_rate",
    "slot_not_before_ms",
    "validate_backfill",
]
