"""Calendar tables: reading a calendar from plain data (TOML, YAML, JSON, iCalendar) and writing it back."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from shardcron.spec.bounds import DAY_MS, MAX_TIME_MS, MIN_TIME_MS, shown
from shardcron.spec.calendar import WEEKDAYS, Calendar, CalendarError, Window, calendar_zone, clock_text

CALENDAR_KEYS = frozenset({"timezone", "exclude_dates", "ics", "windows", "exclude_ranges"})
WINDOW_KEYS = frozenset({"days", "start", "end"})
RANGE_KEYS = frozenset({"from", "to"})

_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # safe in an etcd key and on a command line
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")


def parse_calendar(name: str, mapping: Mapping[str, Any]) -> Calendar:
    """A calendar from plain data, as TOML, YAML or JSON give it. Every refusal names the field.

    Keys: ``timezone`` (IANA, default UTC); ``exclude_dates`` (["2026-12-25", ...]);
    ``ics`` (iCalendar text: all-day events exclude their dates, timed events their
    range); ``windows`` ({"mon-fri": "09:00-18:00", "sat": ["10:00-12:00"]} or
    [{"days": "mon-fri", "start": "09:00", "end": "18:00"}]); ``exclude_ranges``
    ([{"from": "2026-11-24T10:00:00+00:00", "to": ...}], each with a UTC offset).
    """
    reason = check_calendar_name(name)
    if reason:
        raise CalendarError(str(name), "name", reason)
    if not isinstance(mapping, Mapping):
        raise CalendarError(name, "calendar", f"expected a table of settings, got {type(mapping).__name__}")
    for key in mapping:
        if key not in CALENDAR_KEYS:
            raise CalendarError(name, str(key), f"unknown key; expected one of: {', '.join(sorted(CALENDAR_KEYS))}")
    tz_name = _given(mapping, "timezone", "UTC")
    tz = calendar_zone(name, tz_name)
    dates = set(_parse_dates(name, _given(mapping, "exclude_dates", ())))
    ranges = list(_parse_ranges(name, _given(mapping, "exclude_ranges", ())))
    if mapping.get("ics") is not None:
        from shardcron.spec.ics import IcsError, read_ics_exclusions  # icalendar costs ~60 ms to import

        try:
            ics_dates, ics_ranges = read_ics_exclusions(mapping["ics"], tz)
        except IcsError as err:
            raise CalendarError(name, err.where, err.reason) from None
        dates.update(ics_dates)
        ranges.extend(ics_ranges)
    windows = _given(mapping, "windows", None)
    windows = None if windows is None else _parse_windows(name, windows)
    return Calendar(name, tz.key, frozenset(dates), windows, tuple(ranges))


def check_calendar_name(name: object) -> str | None:
    """Why ``name`` cannot name a calendar, or None when it can."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return None
    return f"{shown(name)} must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"


def describe_windows(windows: Sequence[Window] | None) -> str:
    """Windows as a person writes them: ``Mon-Fri 09:00-18:00, Sat 10:00-12:00``; ``-`` for none."""
    if windows is None:
        return "-"
    by_span: dict[tuple[int, int], list[int]] = {}
    for w in windows:
        by_span.setdefault((w.start_ms, w.end_ms), []).append(w.weekday)
    parts = []
    for (start, end), days in by_span.items():
        runs: list[list[int]] = []
        for d in days:  # sorted: windows are merged and sorted
            if runs and d == runs[-1][-1] + 1:
                runs[-1].append(d)
            else:
                runs.append([d])
        names = ",".join(WEEKDAYS[r[0]].title() + (f"-{WEEKDAYS[r[-1]].title()}" if len(r) > 1 else "") for r in runs)
        parts.append(f"{names} {clock_text(start)}-{clock_text(end)}")
    return ", ".join(parts)


def calendar_to_dict(calendar: Calendar) -> dict[str, Any]:
    """The calendar as plain JSON-able data that ``parse_calendar`` reads back to an equal calendar.

    What is stored and served: an .ics file's events are already dates and ranges here,
    a window crossing midnight is already its two days, and instants are epoch ms.
    """
    d: dict[str, Any] = {"timezone": calendar.timezone}
    if calendar.excluded_dates:
        d["exclude_dates"] = sorted(day.isoformat() for day in calendar.excluded_dates)
    if calendar.windows is not None:
        d["windows"] = [
            {"days": WEEKDAYS[w.weekday], "start": clock_text(w.start_ms), "end": clock_text(w.end_ms)}
            for w in calendar.windows
        ]
    if calendar.excluded_ranges:
        d["exclude_ranges"] = [{"from": a, "to": b} for a, b in calendar.excluded_ranges]
    return d


def _given(mapping: Mapping[str, Any], key: str, default: object) -> object:
    """A key present but empty (YAML's ``key:``) reads as absent; any other value is checked."""
    value = mapping.get(key)
    return default if value is None else value


def _list(calendar: str, raw: object, field_: str) -> list[Any]:
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise CalendarError(calendar, field_, f"expected a list, got {shown(raw)}")
    return list(raw)


def _parse_dates(calendar: str, raw: object) -> Iterable[date]:
    for i, item in enumerate(_list(calendar, raw, "exclude_dates")):
        if isinstance(item, date) and not isinstance(item, datetime):  # TOML and YAML give bare dates as dates
            yield item
            continue
        try:
            if not isinstance(item, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", item.strip()):
                raise ValueError
            yield date.fromisoformat(item.strip())
        except ValueError:
            raise CalendarError(
                calendar, f"exclude_dates[{i}]", f"expected a date as YYYY-MM-DD, got {shown(item)}"
            ) from None


def _parse_instant(calendar: str, raw: object, field_: str) -> int:
    """An instant with a UTC offset, or epoch ms (as the API sends it), within years 1970-9999 (``bounds.py``)."""
    ms = raw if isinstance(raw, int) and not isinstance(raw, bool) else _instant_ms(calendar, raw, field_)
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise CalendarError(
            calendar, field_, f"{shown(raw)} is outside 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z"
        )
    return ms


def _instant_ms(calendar: str, raw: object, field_: str) -> int:
    dt = raw
    if isinstance(raw, str):
        try:
            dt = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
        except ValueError:
            dt = None
    if not isinstance(dt, datetime):
        raise CalendarError(
            calendar, field_, f"expected an ISO-8601 time such as 2026-11-24T10:00:00+00:00, got {shown(raw)}"
        )
    if dt.utcoffset() is None:
        raise CalendarError(calendar, field_, f"{shown(raw)} has no UTC offset; add one such as Z or +01:00")
    return (dt - _EPOCH_UTC) // _MS


def _parse_ranges(calendar: str, raw: object) -> Iterable[tuple[int, int]]:
    for i, item in enumerate(_list(calendar, raw, "exclude_ranges")):
        where = f"exclude_ranges[{i}]"
        if not isinstance(item, Mapping) or set(item) != RANGE_KEYS:
            raise CalendarError(calendar, where, f"expected a table with exactly 'from' and 'to', got {shown(item)}")
        start = _parse_instant(calendar, item["from"], f"{where}.from")
        end = _parse_instant(calendar, item["to"], f"{where}.to")
        if start >= end:
            raise CalendarError(
                calendar, where, f"'from' ({shown(item['from'])}) must be before 'to' ({shown(item['to'])})"
            )
        yield start, end


def _parse_windows(calendar: str, raw: object) -> tuple[Window, ...]:
    """Either form; a window whose end is before its start crosses midnight into the next day."""
    specs: list[tuple[str, object, object, object]] = []  # (field, days, start, end)
    if isinstance(raw, Mapping):
        for days, spans in raw.items():
            where = f"windows.{days}"
            for j, span in enumerate([spans] if isinstance(spans, str) else _list(calendar, spans, where)):
                at = where if isinstance(spans, str) else f"{where}[{j}]"
                if not isinstance(span, str) or span.count("-") != 1:
                    raise CalendarError(calendar, at, f"expected HH:MM-HH:MM such as 09:00-18:00, got {shown(span)}")
                start, end = span.split("-")
                specs.append((at, days, start, end))
    else:
        for i, item in enumerate(_list(calendar, raw, "windows")):
            where = f"windows[{i}]"
            if not isinstance(item, Mapping) or set(item) != WINDOW_KEYS:
                raise CalendarError(calendar, where, f"expected a table with days, start and end, got {shown(item)}")
            specs.append((where, item["days"], item["start"], item["end"]))
    if not specs:
        raise CalendarError(calendar, "windows", "is empty; leave it out to allow every hour")
    out: list[Window] = []
    for where, days, start_text, end_text in specs:
        start_ms = _parse_clock(calendar, start_text, f"{where}.start", allow_24=False)
        end_ms = _parse_clock(calendar, end_text, f"{where}.end", allow_24=True)
        if start_ms == end_ms:
            raise CalendarError(calendar, where, f"{start_text}-{end_text} is empty; for a whole day write 00:00-24:00")
        for weekday in _parse_days(calendar, days, f"{where}.days"):
            if start_ms < end_ms:
                out.append(Window(weekday, start_ms, end_ms))
            else:  # crosses midnight: the rest of today, then the start of tomorrow
                out.append(Window(weekday, start_ms, DAY_MS))
                if end_ms > 0:
                    out.append(Window((weekday + 1) % 7, 0, end_ms))
    return tuple(out)


def _parse_clock(calendar: str, text: object, field_: str, allow_24: bool) -> int:
    m = _CLOCK.fullmatch(text.strip()) if isinstance(text, str) else None
    if m:
        hour, minute = int(m.group(1)), int(m.group(2))
        if (hour < 24 and minute < 60) or (allow_24 and hour == 24 and minute == 0):
            return (hour * 60 + minute) * 60_000
    allowed = "00:00 to 24:00" if allow_24 else "00:00 to 23:59"
    raise CalendarError(calendar, field_, f"expected a wall-clock time HH:MM from {allowed}, got {shown(text)}")


def _parse_days(calendar: str, raw: object, field_: str) -> list[int]:
    """ "mon", "mon-fri", "fri-mon" (wraps), "sat,sun", "*", or a list of those."""
    parts = raw if isinstance(raw, list | tuple) else str(raw).split(",") if isinstance(raw, str) else None
    if not parts:
        raise CalendarError(calendar, field_, f"expected days such as mon-fri or sat,sun, got {shown(raw)}")
    out: list[int] = []
    for part in parts:
        text = part.strip().lower() if isinstance(part, str) else None
        ends = text.split("-") if text else []
        if text == "*":
            out.extend(range(7))
        elif 1 <= len(ends) <= 2 and all(e in WEEKDAYS for e in ends):
            first, last = WEEKDAYS.index(ends[0]), WEEKDAYS.index(ends[-1])
            out.extend((first + k) % 7 for k in range((last - first) % 7 + 1))
        else:
            raise CalendarError(
                calendar,
                field_,
                f"{shown(part)} is not a day or range of days; "
                f"use {', '.join(WEEKDAYS)}, a range such as mon-fri, or *",
            )
    return out
