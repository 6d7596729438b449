"""Exclusions read from iCalendar (.ics) text, with the icalendar library. Pure.

* An all-day VEVENT excludes its local dates: DTSTART up to DTEND, exclusive
  (RFC 5545); one day when there is neither DTEND nor DURATION.
* A timed VEVENT excludes ``[DTSTART, DTEND)`` (or DTSTART + DURATION). A floating
  time (no TZID, no Z) is read on the calendar's wall clock.
* Cancelled events are ignored.
* Repeating events (RRULE, RDATE) are refused, not expanded: an unbounded rule
  has no last date, and holiday feeds list each occurrence anyway.

Only ``calendar_tables.parse_calendar`` imports this module, and only when a calendar
has ``ics``: icalendar costs about 60 ms to import, which a node that merely
evaluates calendars need not pay.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta

import icalendar

MAX_EVENT_DAYS = 366  # a longer all-day event is most likely a mistake; exclude_ranges says it better
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


class IcsError(ValueError):
    """``where`` is ``"ics"`` or ``"ics: event 'NAME'"``; the calendar adds its own name."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


def read_ics_exclusions(text: object, tz: zoneinfo.ZoneInfo) -> tuple[set[date], list[tuple[int, int]]]:
    """The excluded dates and the excluded ``[from_ms, to_ms)`` ranges the text's VEVENTs describe."""
    if not isinstance(text, str | bytes):
        raise IcsError("ics", f"expected iCalendar text, got {type(text).__name__}")
    try:
        parsed = icalendar.Calendar.from_ical(text)
    except Exception as err:  # the parser's errors vary by input (ValueError, IndexError, ...): all mean "not ics"
        raise IcsError("ics", f"not iCalendar text ({err})") from err
    dates: set[date] = set()
    ranges: list[tuple[int, int]] = []
    for i, event in enumerate(parsed.walk("VEVENT")):
        where = f"ics: event {str(event.get('SUMMARY') or event.get('UID') or i)!r}"
        errors = getattr(event, "errors", None)  # icalendar collects bad property values here
        if errors:
            prop, why = errors[0]
            raise IcsError(where, f"{prop}: {why}")
        if str(event.get("STATUS", "")).upper() == "CANCELLED":
            continue
        for prop in ("RRULE", "RDATE"):
            if prop in event:
                raise IcsError(where, f"repeats ({prop}); list each occurrence as its own event or in exclude_dates")
        if "DTSTART" not in event:
            raise IcsError(where, "has no DTSTART")
        start = event.decoded("DTSTART")
        end = event.decoded("DTEND") if "DTEND" in event else None
        duration = event.decoded("DURATION") if "DURATION" in event else None
        if isinstance(start, datetime):
            ranges.append(_timed_range(where, start, end, duration, tz))
        else:
            dates.update(_all_day_dates(where, start, end, duration))
    return dates, ranges


def _timed_range(
    where: str, start: datetime, end: object, duration: timedelta | None, tz: zoneinfo.ZoneInfo
) -> tuple[int, int]:
    if end is None:
        if duration is None:
            raise IcsError(where, "a timed event needs DTEND or DURATION to exclude a range")
        end = start + duration
    if not isinstance(end, datetime):
        raise IcsError(where, f"DTEND {end} is a date but DTSTART {start} is a time")
    a, b = _aware_ms(start, tz), _aware_ms(end, tz)
    if a >= b:
        raise IcsError(where, f"DTEND {end} is not after DTSTART {start}")
    return a, b


def _all_day_dates(where: str, start: date, end: object, duration: timedelta | None) -> list[date]:
    end = start + (duration if duration is not None else timedelta(days=1)) if end is None else end
    if isinstance(end, datetime):
        raise IcsError(where, f"DTEND {end} is a time but DTSTART {start} is a date")
    if not isinstance(end, date):
        raise IcsError(where, f"DTEND {end} is not a date")
    days = (end - start).days
    if not 0 < days <= MAX_EVENT_DAYS:
        raise IcsError(
            where,
            f"spans {days} days from {start} to {end}; an all-day event must last "
            f"1 to {MAX_EVENT_DAYS} days (use exclude_ranges for longer)",
        )
    return [start + timedelta(days=k) for k in range(days)]


def _aware_ms(dt: datetime, tz: zoneinfo.ZoneInfo) -> int:
    if dt.tzinfo is None:  # a floating time: the calendar's wall clock
        dt = dt.replace(tzinfo=tz)
    return (dt - _EPOCH_UTC) // _MS


__all__ = ["MAX_EVENT_DAYS", "IcsError", "read_ics_exclusions"]
