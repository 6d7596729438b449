"""A job's schedule: parsing a schedule table, its bounds, the shortest gap between its slots, and its jitter."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from croniter import CroniterBadDateError, croniter

from shardcron.clock import wall_ms
from shardcron.errors import InvalidJob
from shardcron.model import Schedule, ScheduleKind
from shardcron.spec.bounds import CRON_HORIZON_MS, DAY_MS, MAX_DURATION_MS, MAX_JITTER_MS, check_time_ms, shown
from shardcron.spec.cron import CronTrigger
from shardcron.spec.durations import format_duration_ms, load_timezone, parse_duration_ms, parse_time_ms
from shardcron.spec.fields import check_keys, whole_number

# The keys each level of a job takes. Anything else is refused, naming the key:
# a misspelled key that were ignored would silently change what the job does
# (``timzone`` would run it in UTC).
SCHEDULE_KEYS = frozenset({"cron", "every", "interval_ms", "at", "at_ms", "timezone", "tz"})


def validate_cron(expr: str, field: str = "schedule.cron") -> str:
    """``expr`` with its white space normalised, if it is a valid cron expression (5 fields, or 6 with seconds first)."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidJob(field, "must be a cron expression of 5 fields, or 6 with seconds first")
    expr = " ".join(expr.split())
    n = len(expr.split(" "))
    if n not in (5, 6):
        raise InvalidJob(field, f"{shown(expr)} has {n} fields; expected 5, or 6 with seconds first")
    if not _valid_cron(expr):
        raise InvalidJob(field, f"{shown(expr)} is not a valid cron expression")
    return expr


@functools.lru_cache(maxsize=4096)
def _valid_cron(expr: str) -> bool:
    # A fleet's jobs share a few hundred expressions; parsing each again costs
    # most of a job's validation (100,000 jobs in one PutJobs burst).
    return croniter.is_valid(expr, second_at_beginning=True)


def parse_schedule(d: Mapping[str, Any], *, bounded: bool = True) -> Schedule:
    """The schedule table; ``bounded``: also check its bounds (``check_schedule_bounds``)."""
    schedule = _parse_schedule_fields(d)
    if bounded:
        check_schedule_bounds(schedule)
    return schedule


def check_schedule_bounds(schedule: Schedule, now_ms: int | None = None) -> None:
    """Refuse a schedule outside its bounds (``bounds.py``): an interval longer than ten years, a single run
    outside years 1970-9999, a cron expression with no slot in the ten years from ``now_ms`` (the clock)."""
    if (
        schedule.kind is ScheduleKind.INTERVAL
        and schedule.interval_ms is not None
        and schedule.interval_ms > MAX_DURATION_MS
    ):
        raise InvalidJob(
            "schedule.interval_ms",
            f"{shown(schedule.interval_ms)} ms is longer than the limit of ten years ({MAX_DURATION_MS} ms)",
        )
    if schedule.kind is ScheduleKind.ONCE and schedule.at_ms is not None:
        check_time_ms(schedule.at_ms, "schedule.at")
    if schedule.kind is ScheduleKind.CRON and schedule.cron is not None:
        day = (wall_ms() if now_ms is None else now_ms) // DAY_MS
        if not _cron_fires_within(schedule.cron, schedule.timezone, day):
            raise InvalidJob(
                "schedule.cron",
                f"{shown(schedule.cron)} never fires in the next ten years (a date "
                "that does not exist, such as February 30?); it would never run",
            )


@functools.lru_cache(maxsize=4096)
def _cron_fires_within(expr: str, timezone: str, day: int) -> bool:
    """Whether ``expr`` has a slot in the ten years from the start of ``day`` (days since the epoch).
    Cached per day: a fleet shares a few hundred expressions, and the answer moves only over years."""
    start = day * DAY_MS
    slot = CronTrigger(expr, timezone).next_after(start)
    return slot is not None and slot <= start + CRON_HORIZON_MS


def _parse_schedule_fields(d: Mapping[str, Any]) -> Schedule:
    check_keys(d, SCHEDULE_KEYS, "schedule")
    tz = d.get("timezone", d.get("tz", "UTC")) or "UTC"
    load_timezone(tz)
    given = [k for k in ("cron", "every", "interval_ms", "at", "at_ms") if d.get(k) not in (None, "")]
    if len(given) != 1:
        raise InvalidJob("schedule", "give exactly one of cron, every (interval) or at (single run)")
    key = given[0]
    if key == "cron":
        return Schedule(ScheduleKind.CRON, cron=validate_cron(d["cron"]), timezone=tz)
    if key in ("every", "interval_ms"):
        raw = d[key]
        ms = (
            whole_number(raw, "schedule.interval_ms")
            if key == "interval_ms"
            else parse_duration_ms(raw, "schedule.every")
        )
        if ms <= 0:
            raise InvalidJob(f"schedule.{key}", f"the interval must be positive, got {shown(raw)}")
        return Schedule(ScheduleKind.INTERVAL, interval_ms=ms, timezone=tz)
    at = d["at_ms"] if key == "at_ms" else d["at"]
    return Schedule(ScheduleKind.ONCE, at_ms=parse_time_ms(at, tz, "schedule.at"), timezone=tz)


_DAY_S = 86_400


def shortest_gap_ms(schedule: Schedule, *, below_ms: int | None = None) -> int | None:
    """The shortest time between two consecutive slots of ``schedule``; None for a single run.

    For cron, on a day without a DST change (a change only ever merges slots).
    ``below_ms``: the caller only needs to know whether the gap is shorter than
    this; a cron gap that provably is not may be answered by a lower bound at
    least this long, which spares walking the calendar of a cron with day fields.
    """
    if schedule.kind is ScheduleKind.INTERVAL:
        return schedule.interval_ms
    if schedule.kind is ScheduleKind.CRON:
        within_day, overnight, exact = _cron_gaps_s(schedule.cron)
        if not exact and (below_ms is None or overnight * 1000 < below_ms):
            overnight = _cron_overnight_walked_s(schedule.cron)
        return min(g for g in (within_day, overnight) if g is not None) * 1000
    return None


@functools.lru_cache(maxsize=4096)
def _cron_gaps_s(expr: str) -> tuple[int | None, int, bool]:
    """(the shortest gap within a day or None, the overnight gap, whether that one is exact), from the fields.

    A day's slots are hours x minutes x seconds in lexicographic order, so the
    shortest gap is between neighbours in one field (the finer fields at their
    last and first values): no need to list the day's 86,400 slots. Overnight,
    from the day's last slot to the next day's first, is exact when every day
    runs, else a lower bound (the next running day may be later).
    """
    fields = croniter(expr, second_at_beginning=True).expanded
    minutes, hours = _values(fields[0], 60), _values(fields[1], 24)
    seconds = _values(fields[5], 60) if len(fields) > 5 else [0]
    gaps = [
        gap
        for gap in (
            _neighbour_gap(seconds, 1, 0),
            _neighbour_gap(minutes, 60, seconds[-1] - seconds[0]),
            _neighbour_gap(hours, 3600, minutes[-1] * 60 + seconds[-1] - minutes[0] * 60 - seconds[0]),
        )
        if gap is not None
    ]
    day_span = (hours[-1] - hours[0]) * 3600 + (minutes[-1] - minutes[0]) * 60 + seconds[-1] - seconds[0]
    every_day = fields[2] == ["*"] and fields[4] == ["*"]
    return (min(gaps) if gaps else None), _DAY_S - day_span, every_day


@functools.lru_cache(maxsize=256)
def _cron_overnight_walked_s(expr: str) -> int:
    """From each running day's last slot to the next slot, the shortest, over a few hundred running days."""
    fields = croniter(expr, second_at_beginning=True).expanded
    minute, hour = _values(fields[0], 60)[-1], _values(fields[1], 24)[-1]
    second = _values(fields[5], 60)[-1] if len(fields) > 5 else 0
    day_fields = " ".join(expr.split(" ")[-3:])  # day of month, month, day of week
    last_of_day = croniter(f"{second} {minute} {hour} {day_fields}", datetime(2030, 1, 1), second_at_beginning=True)
    gaps = []
    try:
        for _ in range(400):
            t = last_of_day.get_next(datetime)
            gaps.append(int((croniter(expr, t, second_at_beginning=True).get_next(datetime) - t).total_seconds()))
    except (CroniterBadDateError, OverflowError, ValueError):
        pass  # no more slots (a date that never comes, or past year 9999): the gaps found so far are all there are
    # None found (an expression that never fires, read back from the store): the fields' own overnight bound,
    # a lower bound of any real gap, so a rate computed from it (a namespace's quota) is never understated.
    return min(gaps, default=_cron_gaps_s(expr)[1])


def _values(field: list[Any], size: int) -> list[int]:
    return list(range(size)) if field == ["*"] else sorted(int(x) for x in field)


def _neighbour_gap(values: list[int], unit_s: int, finer_span_s: int) -> int | None:
    """The shortest step between neighbouring ``values``, less the span of the finer fields it skips."""
    if len(values) < 2:
        return None
    return min(b - a for a, b in zip(values, values[1:], strict=False)) * unit_s - finer_span_s


def jitter_field(raw: Any, schedule: Schedule, *, bounded: bool) -> int:
    """The job's jitter in ms (absent: 0); when ``bounded`` (not read back from the store), refused when
    longer than ``bounds.MAX_JITTER_MS`` or not shorter than the schedule's shortest gap."""
    if raw is None or raw == "":
        return 0  # the usual case: nothing parsed, no gap computed
    jitter_ms = parse_jitter(raw, "jitter")
    if bounded and jitter_ms > MAX_JITTER_MS:
        raise InvalidJob(
            "jitter", f"{format_duration_ms(jitter_ms)} is longer than the limit of {format_duration_ms(MAX_JITTER_MS)}"
        )
    if jitter_ms and bounded:  # a stored job's jitter was checked against its gap when it was admitted
        # below_ms: only "is the gap at most the jitter?" matters, which spares walking a cron's calendar.
        check_jitter(jitter_ms, shortest_gap_ms(schedule, below_ms=jitter_ms + 1), "jitter")
    return jitter_ms


def parse_jitter(text: str | int | float | None, field: str = "jitter") -> int:
    """``"30s"``, ``"1m30s"``, ``"250ms"`` or seconds as a number, as ms; absent or empty is 0."""
    if text is None or text == "":
        return 0
    ms = parse_duration_ms(text, field)
    if ms < 0:
        raise InvalidJob(field, f"must not be negative, got {text!r}")
    return ms


def check_jitter(jitter_ms: int, shortest_gap_ms: int | None, field: str = "jitter") -> int:
    """Refuse a jitter that is not shorter than the gap between two slots (``shortest_gap_ms``).

    Two slots ``gap`` apart get offsets in ``[0, jitter)``; only ``jitter <= gap`` keeps
    their starts in order, and ``jitter < gap`` keeps them from starting in the same
    millisecond. ``None`` (a single slot) admits any jitter.
    """
    if shortest_gap_ms is not None and jitter_ms >= shortest_gap_ms:
        raise InvalidJob(
            field,
            f"{format_duration_ms(jitter_ms)} is not shorter than the schedule's shortest gap "
            f"({format_duration_ms(shortest_gap_ms)}); slots could start out of order",
        )
    return jitter_ms
