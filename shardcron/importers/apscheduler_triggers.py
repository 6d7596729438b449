"""APScheduler 3 triggers as shardcron schedules: cron, interval and date; the rest refused with the reason.

``schedule_keys(trigger, now, notes)`` gives the job's schedule keys (and ``jitter``), appends to ``notes``
what is approximated, and raises ``EntryRefused`` for a trigger shardcron cannot express.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

from shardcron.importers.translate import EntryRefused, cron_field, ms_text

# APScheduler numbers weekdays from Monday (0) and cron from Sunday (0).
_CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("day_of_week", 0, 6))


def schedule_keys(trigger: Any, now: datetime, notes: list[str]) -> dict[str, Any]:
    from apscheduler.triggers.cron import CronTrigger
    from apscheduler.triggers.date import DateTrigger
    from apscheduler.triggers.interval import IntervalTrigger

    if isinstance(trigger, CronTrigger):
        keys = {"cron": cron_expression(trigger), "timezone": zone_name(trigger.timezone)}
        _bounds(trigger, now, notes)
        if changes_clocks(trigger.timezone, now.year):
            notes.append(DST_NOTE)
    elif isinstance(trigger, IntervalTrigger):
        keys = _interval(trigger, now, notes)
    elif isinstance(trigger, DateTrigger):
        return {"at": trigger.run_date.isoformat(), "timezone": zone_name(trigger.run_date.tzinfo)}
    else:
        cls = type(trigger)
        raise EntryRefused(
            f"{cls.__module__}.{cls.__qualname__} ({trigger}) has no shardcron equivalent; "
            "a job per part (for OrTrigger) may express it"
        )
    if trigger.jitter:
        keys["jitter"] = ms_text(round(trigger.jitter * 1000))
        notes.append(
            f"APScheduler delayed each run by a new random 0-{trigger.jitter}s; shardcron delays every slot of "
            "the job by the same offset in [0, jitter)"
        )
    return keys


DST_NOTE = (
    "At clock changes the two differ: in the hour the clocks go back APScheduler ran a slot at both "
    "occurrences, shardcron runs it once, at the first; a slot in the hour the clocks skip APScheduler ran "
    "that much later (01:30 at 02:30), shardcron runs it at the change (02:00); and APScheduler 3.11 skips "
    "a midnight on the 1st of a month after the clocks go forward (1 April 2026 in Lisbon), which shardcron runs"
)


def changes_clocks(zone: tzinfo, year: int) -> bool:
    """Whether ``zone`` moves its clocks in ``year`` (its offset in January and July differ)."""
    return datetime(year, 1, 1, tzinfo=zone).utcoffset() != datetime(year, 7, 1, tzinfo=zone).utcoffset()


def cron_expression(trigger: Any) -> str:
    """The cron expression with exactly the trigger's values: 5 fields, or 6 (seconds first) unless it fires
    only at second 0. Refused: a restricted year or week, ``last``/``2nd fri`` style days, and a day of the
    month together with a weekday (APScheduler needs both to match, cron either)."""
    fields = {f.name: f for f in trigger.fields}
    for name in ("year", "week"):
        if not fields[name].is_default and str(fields[name]) != "*":
            raise EntryRefused(f"{name}={fields[name]} has no cron equivalent (cron has no {name} field)")
    text = {name: cron_field(_values(fields[name], low, high), low, high) for name, low, high in _CRON_FIELDS}
    text["day_of_week"] = cron_field(((v + 1) % 7 for v in _values(fields["day_of_week"], 0, 6)), 0, 6)
    if text["day"] != "*" and text["day_of_week"] != "*":
        raise EntryRefused(
            f"day={fields['day']} and day_of_week={fields['day_of_week']} are both given: APScheduler runs "
            "when both match, cron when either does"
        )
    seconds = cron_field(_values(fields["second"], 0, 59), 0, 59)
    five = " ".join(text[name] for name, _, _ in _CRON_FIELDS)
    return five if seconds == "0" else f"{seconds} {five}"


def _values(field: Any, low: int, high: int) -> set[int]:
    """Every value a cron field's expressions admit (``*``, ``a-b``, ``/step``, names), by their own bounds."""
    from apscheduler.triggers.cron.expressions import RangeExpression

    values: set[int] = set()
    for expr in field.expressions:
        if type(expr).__name__ in ("WeekdayPositionExpression", "LastDayOfMonthExpression"):
            raise EntryRefused(f"{field.name}={field} depends on the month's length or weekdays; cron has no such day")
        first, last = low, high
        if isinstance(expr, RangeExpression):
            first = expr.first
            last = expr.last if expr.last is not None else high
        elif type(expr).__name__ != "AllExpression":
            raise EntryRefused(f"{field.name}={field}: a {type(expr).__name__} has no cron equivalent")
        values.update(range(first, last + 1, expr.step or 1))
    return values


def _interval(trigger: Any, now: datetime, notes: list[str]) -> dict[str, Any]:
    ms = round(trigger.interval_length * 1000)
    if ms <= 0:
        raise EntryRefused(f"the interval must be positive, got {trigger.interval}")
    start_ms = round(trigger.start_date.timestamp() * 1000)
    if start_ms % ms:
        notes.append(
            f"APScheduler ran this every {trigger.interval} from its start_date {trigger.start_date.isoformat()}; "
            f"shardcron runs it at whole multiples of {ms_text(ms)} since 1970-01-01 00:00 UTC, "
            f"{ms_text(start_ms % ms)} earlier in each period"
        )
    _bounds(trigger, now, notes)
    return {"every": ms_text(ms), "timezone": zone_name(trigger.timezone)}


def _bounds(trigger: Any, now: datetime, notes: list[str]) -> None:
    """Refuse an end date (shardcron's schedules do not end); note a start date still ahead."""
    if trigger.end_date is not None:
        raise EntryRefused(
            f"it ends at {trigger.end_date.isoformat()}; shardcron's schedules do not end (delete the job then, "
            "or give its last run as a single run)"
        )
    if trigger.start_date is not None and trigger.start_date > now:
        notes.append(
            f"APScheduler starts it at {trigger.start_date.isoformat()}; shardcron runs its slots from when the "
            "job is applied: apply it paused, and resume it then"
        )


def zone_name(zone: tzinfo | None) -> str:
    """The IANA name of an APScheduler timezone (zoneinfo or pytz); refused when it has none."""
    if zone is None or zone is UTC:
        return "UTC"
    name = getattr(zone, "key", None) or getattr(zone, "zone", None)
    if not isinstance(name, str):
        raise EntryRefused(f"its timezone {zone!r} has no IANA name (such as Europe/Lisbon)")
    return name
