"""Calendars: which instants a job's slots may fall on. Pure, and in integer epoch ms (UTC).

A ``Calendar`` excludes instants in three ways, checked in this order (the
first that applies is the reason ``why_excluded`` gives):

1. excluded ranges: absolute UTC intervals ``[from, to)``;
2. excluded dates (holidays): whole local days in the calendar's timezone;
3. windows (business hours): when a calendar has any, an instant is allowed only
   inside one, e.g. Mon-Fri 09:00-18:00 Europe/Lisbon. Without windows every
   hour of a day that is not excluded is allowed.

A job may use several calendars; a slot is owed only when every one allows it
(``allowed_by_all``). An excluded slot is not owed: it is not run, nor missing.

Windows are local wall-clock times
    An instant is inside a window when its local weekday and its local
    wall-clock time ``t`` satisfy ``start <= t < end``. Nothing more: the rules on
    DST days follow from it, and they are the rules a person reading a wall
    clock would apply.

    * Spring forward (the gap): local times that do not exist are in no window.
      A window 01:00-03:00 on 2026-03-08 America/New_York (02:00 EST -> 03:00 EDT)
      holds 01:00-02:00 EST only (06:00Z-07:00Z): one real hour. The same
      window on 2026-03-29 Europe/Lisbon (01:00 WET -> 02:00 WEST) holds 02:00-03:00
      WEST (01:00Z-02:00Z): it opens at the transition instant, the first instant
      whose wall clock reads 01:00 or later. A window wholly inside the gap
      (02:00-02:30 New York) is empty that day.
    * Fall back (the repeated hour): both passes read the same wall clock, so
      both are inside. A window 01:00-02:00 on 2026-11-01 New York
      (02:00 EDT -> 01:00 EST) holds 05:00Z-07:00Z: two real hours. A window
      01:30-03:00 holds 01:30-02:00 EDT (05:30Z-06:00Z), closes while the clock
      reads 01:00-01:30 EST again, and reopens at 01:30 EST (06:30Z). A cron
      trigger still fires once in the repeated hour (``triggers.py``); an interval
      trigger fires through both passes, as it fires by real time.
    * A window may cross midnight: ``fri: 22:00-02:00`` is Fri 22:00-24:00 plus
      Sat 00:00-02:00 (it belongs to the day it starts on). ``24:00`` is allowed as
      an end. A window whose start equals its end is refused: it could mean
      nothing or the whole day.
    * Excluded dates are local dates too: a holiday on a DST day lasts the 23 or
      25 real hours of that day.

Searching forward
    ``next_allowed_instant(ms)`` is the first allowed instant ``>= ms``. It jumps
    rather than steps: an allowed stretch can only begin where an excluded range
    ends, where the wall clock reaches a window start (in either pass of a
    repeated hour), or at a UTC offset transition, so only those instants are
    tried. ``next_allowed`` uses it so that a trigger firing every second under a
    window that excludes 15 hours a day is asked for two slots, not 54,000.
    A search gives up (returns None) past ``SEARCH_HORIZON_MS`` (four years) or
    after ``MAX_CANDIDATES`` trigger slots: a calendar that allows nothing for
    that long is taken to allow nothing.
"""

from __future__ import annotations

import re
import zoneinfo
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from shardcron.abc import Trigger
from shardcron.spec.bounds import MAX_TIME_MS, MIN_TIME_MS, shown
from shardcron.errors import ShardcronError
from shardcron.rules.triggers import _transition_ms  # the one search for a tz transition; shared, not copied

DAY_MS = 86_400_000
SEARCH_HORIZON_MS = 4 * 366 * DAY_MS
MAX_CANDIDATES = 10_000
CALENDAR_KEYS = frozenset({"timezone", "exclude_dates", "ics", "windows", "exclude_ranges"})
WINDOW_KEYS = frozenset({"days", "start", "end"})
RANGE_KEYS = frozenset({"from", "to"})
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # index = datetime.weekday()

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=timezone.utc)
_EPOCH_DATE = _EPOCH.date()
_MS = timedelta(milliseconds=1)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # safe in an etcd key and on a command line
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")
# An offset stays within -12h..+14h, so local day D lies within these bounds of its naive midnight.
_DAY_REACH_BEFORE = 15 * 3_600_000
_DAY_REACH_AFTER = DAY_MS + 13 * 3_600_000


class CalendarError(ShardcronError, ValueError):
    """A calendar definition is malformed. ``field`` names the offending field."""

    def __init__(self, calendar: str, field: str, reason: str):
        super().__init__(f"calendar {shown(calendar)}: {field}: {reason}")
        self.calendar = calendar
        self.field = field
        self.reason = reason


@dataclass(frozen=True, order=True)
class Window:
    """Allowed wall-clock times on one weekday: ``[start_ms, end_ms)`` after local midnight."""

    weekday: int  # 0 = Monday, as datetime.weekday()
    start_ms: int
    end_ms: int  # DAY_MS: until midnight

    def __str__(self) -> str:
        return f"{WEEKDAYS[self.weekday].title()} {_clock(self.start_ms)}-{_clock(self.end_ms)}"


@dataclass(frozen=True)
class Calendar:
    name: str
    timezone: str = "UTC"
    excluded_dates: frozenset[date] = frozenset()
    windows: tuple[Window, ...] | None = None  # None: no business hours, every hour allowed
    excluded_ranges: tuple[tuple[int, int], ...] = ()  # half-open [from_ms, to_ms), UTC
    # Derived in __post_init__; not part of the value.
    _tz: zoneinfo.ZoneInfo = field(init=False, repr=False, compare=False)
    _by_day: tuple[tuple[Window, ...], ...] = field(init=False, repr=False, compare=False)
    _range_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here, so equal calendars compare equal
        set_(self, "_tz", _zone(self.name, self.timezone))
        set_(self, "excluded_dates", frozenset(self.excluded_dates))
        if self.windows is not None:
            set_(self, "windows", _merge_windows(self.name, self.windows))
            set_(self, "_by_day", tuple(tuple(w for w in self.windows if w.weekday == d) for d in range(7)))
        else:
            set_(self, "_by_day", ())
        set_(self, "excluded_ranges", _merge_ranges(self.name, self.excluded_ranges))
        set_(self, "_range_starts", tuple(a for a, _ in self.excluded_ranges))

    # --- questions ------------------------------------------------------------------

    def allows(self, slot_ms: int) -> bool:
        return self._broken_rule(slot_ms) is None

    def why_excluded(self, slot_ms: int) -> str | None:
        """A short reason the slot is excluded, or None when it is allowed."""
        rule = self._broken_rule(slot_ms)
        if rule is None:
            return None
        kind, detail = rule
        if kind == "range":
            what = f"excluded range {_iso(detail[0])}..{_iso(detail[1])}"
        elif kind == "holiday":
            what = f"holiday {detail.isoformat()}"
        else:
            day = self._by_day[detail]
            hours = ", ".join(f"{_clock(w.start_ms)}-{_clock(w.end_ms)}" for w in day) or "(no window)"
            what = f"outside business hours {WEEKDAYS[detail].title()} {hours} {self.timezone}"
        return f"{what} (calendar {self.name!r})"

    def next_allowed_instant(self, ms: int, until_ms: int | None = None) -> int | None:
        """The first instant ``>= ms`` this calendar allows; None if there is none by ``until_ms``.

        ``until_ms`` defaults to ``ms + SEARCH_HORIZON_MS``.
        """
        until = ms + SEARCH_HORIZON_MS if until_ms is None else until_ms
        t = ms
        while t <= until:
            inside = self._range_containing(t)
            if inside is not None:
                t = inside[1]
                continue
            if self._local_allows(t):
                return t
            opening = self._next_local_opening(t, until)
            if opening is None:
                return None
            t = opening
        return None

    # --- the rules ------------------------------------------------------------------

    def _broken_rule(self, ms: int) -> tuple[str, object] | None:
        inside = self._range_containing(ms)
        if inside is not None:
            return "range", inside
        local = datetime.fromtimestamp(ms // 1000, self._tz)
        if local.date() in self.excluded_dates:
            return "holiday", local.date()
        if self.windows is not None and not self._in_window(local, ms):
            return "hours", local.weekday()
        return None

    def _local_allows(self, ms: int) -> bool:
        """The date and window rules only (the caller has dealt with ranges)."""
        local = datetime.fromtimestamp(ms // 1000, self._tz)
        if local.date() in self.excluded_dates:
            return False
        return self.windows is None or self._in_window(local, ms)

    def _in_window(self, local: datetime, ms: int) -> bool:
        wall = ((local.hour * 60 + local.minute) * 60 + local.second) * 1000 + ms % 1000
        return any(w.start_ms <= wall < w.end_ms for w in self._by_day[local.weekday()])

    def _range_containing(self, ms: int) -> tuple[int, int] | None:
        i = bisect_right(self._range_starts, ms) - 1
        if i >= 0 and ms < self.excluded_ranges[i][1]:
            return self.excluded_ranges[i]
        return None

    # --- the search -----------------------------------------------------------------

    def _next_local_opening(self, after_ms: int, until_ms: int) -> int | None:
        """The first instant ``> after_ms`` the date and window rules allow, trying only openings.

        Days are walked in order from the day before ``after_ms``'s local date (an
        opening of that day may lie after ``after_ms`` in a repeated hour near
        midnight). This relies on the local date never running backwards at a
        transition, which holds for every fall-back that does not cross midnight.
        """
        day = datetime.fromtimestamp(after_ms // 1000, self._tz).date() - timedelta(days=1)
        while _naive_ms(day) - _DAY_REACH_BEFORE <= until_ms:
            if day not in self.excluded_dates:
                for candidate in sorted(self._openings_on(day)):
                    if after_ms < candidate <= until_ms and self._local_allows(candidate):
                        return candidate
            day += timedelta(days=1)
        return None

    def _openings_on(self, day: date) -> set[int]:
        """Where an allowed stretch of local ``day`` can begin: each window start, read in
        both passes of a repeated hour, and a UTC offset transition on that day."""
        starts = [w.start_ms for w in self._by_day[day.weekday()]] if self.windows is not None else [0]
        midnight = _naive_ms(day)
        out: set[int] = set()
        for start in starts:
            for fold in (0, 1):
                instant = self._instant_of(midnight + start, fold)
                if instant is not None:
                    out.add(instant)
        lo, hi = midnight - _DAY_REACH_BEFORE, midnight + _DAY_REACH_AFTER
        if self._offset_ms(lo) != self._offset_ms(hi):
            transition = _transition_ms(self._tz, lo, hi)
            # Only this day's own: the reach spans parts of its neighbours, and an opening
            # of a later day offered here would be found before an earlier one of this day.
            if datetime.fromtimestamp(transition // 1000, self._tz).date() == day:
                out.add(transition)
        return out

    def _instant_of(self, naive_ms: int, fold: int) -> int | None:
        """The instant whose wall clock reads ``naive_ms`` in pass ``fold``; None in a gap."""
        naive = (_EPOCH + naive_ms * _MS).replace(fold=fold)
        instant = naive_ms - self._tz.utcoffset(naive) // _MS
        return instant if instant + self._offset_ms(instant) == naive_ms else None

    def _offset_ms(self, ms: int) -> int:
        return datetime.fromtimestamp(ms // 1000, self._tz).utcoffset() // _MS


# --- several calendars ----------------------------------------------------------------

def allowed_by_all(calendars: Iterable[Calendar], slot_ms: int) -> bool:
    return all(c.allows(slot_ms) for c in calendars)


def first_exclusion(calendars: Iterable[Calendar], slot_ms: int) -> str | None:
    """The reason of the first calendar (in the job's order) that excludes the slot."""
    for c in calendars:
        reason = c.why_excluded(slot_ms)
        if reason is not None:
            return reason
    return None


def next_instant_all_allow(calendars: Sequence[Calendar], ms: int, until_ms: int) -> int | None:
    """The first instant ``>= ms`` every calendar allows, or None by ``until_ms``.

    Each calendar in turn moves ``t`` to its own next allowed instant; when a full
    round leaves ``t`` where it is, all agree. Every move is forward, to one of
    finitely many openings before ``until_ms``, so the loop ends.
    """
    t = ms
    while t <= until_ms:
        moved = False
        for c in calendars:
            nxt = c.next_allowed_instant(t, until_ms)
            if nxt is None:
                return None
            if nxt != t:
                t, moved = nxt, True
        if not moved:
            return t
    return None


@dataclass(frozen=True)
class NextSlot:
    """The answer of ``next_allowed``: the slot, and why the slots before it were not."""

    slot_ms: int | None  # the first slot every calendar allows; None: none within the bounds
    first_skipped_ms: int | None = None  # the first slot a calendar excluded on the way
    skip_reason: str | None = None  # why; what ``jobs get`` shows beside the next slot
    examined: int = 0  # trigger slots looked at (a bound, and a test of the jumping)


def next_allowed(trigger: Trigger, calendars: Sequence[Calendar], after_ms: int, limit: int = MAX_CANDIDATES,
                 horizon_ms: int = SEARCH_HORIZON_MS) -> NextSlot:
    """The first slot of ``trigger`` after ``after_ms`` that every calendar allows.

    Looks at no more than ``limit`` slots and no further than ``after_ms + horizon_ms``.
    After an excluded slot it asks the trigger for its first slot at or after the
    next instant all calendars allow (``next_after(opening - 1)``), skipping the
    excluded stretch in one step.
    """
    until = after_ms + horizon_ms
    after, first_skipped, reason = after_ms, None, None
    for examined in range(1, limit + 1):
        slot = trigger.next_after(after)
        if slot is None or slot > until:
            return NextSlot(None, first_skipped, reason, examined - 1)
        excluded = first_exclusion(calendars, slot)
        if excluded is None:
            return NextSlot(slot, first_skipped, reason, examined)
        if first_skipped is None:
            first_skipped, reason = slot, excluded
        opening = next_instant_all_allow(calendars, slot, until)
        if opening is None:
            return NextSlot(None, first_skipped, reason, examined)
        after = opening - 1  # opening > slot, since slot is excluded: always progress
    return NextSlot(None, first_skipped, reason, limit)


# --- parsing ------------------------------------------------------------------------------

def parse_calendar(name: str, mapping: Mapping) -> Calendar:
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
    tz = _zone(name, tz_name)
    dates = set(_parse_dates(name, _given(mapping, "exclude_dates", ())))
    ranges = list(_parse_ranges(name, _given(mapping, "exclude_ranges", ())))
    if mapping.get("ics") is not None:
        from shardcron.rules.ics import IcsError, read_ics_exclusions  # icalendar costs ~60 ms to import

        try:
            ics_dates, ics_ranges = read_ics_exclusions(mapping["ics"], tz)
        except IcsError as err:
            raise CalendarError(name, err.where, err.reason) from None
        dates.update(ics_dates)
        ranges.extend(ics_ranges)
    windows = _given(mapping, "windows", None)
    windows = None if windows is None else _parse_windows(name, windows)
    return Calendar(name, tz_name, frozenset(dates), windows, tuple(ranges))


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
        parts.append(f"{names} {_clock(start)}-{_clock(end)}")
    return ", ".join(parts)


def calendar_to_dict(calendar: Calendar) -> dict:
    """The calendar as plain JSON-able data that ``parse_calendar`` reads back to an equal calendar.

    What is stored and served: an .ics file's events are already dates and ranges here,
    a window crossing midnight is already its two days, and instants are epoch ms.
    """
    d: dict = {"timezone": calendar.timezone}
    if calendar.excluded_dates:
        d["exclude_dates"] = sorted(day.isoformat() for day in calendar.excluded_dates)
    if calendar.windows is not None:
        d["windows"] = [{"days": WEEKDAYS[w.weekday], "start": _clock(w.start_ms), "end": _clock(w.end_ms)}
                        for w in calendar.windows]
    if calendar.excluded_ranges:
        d["exclude_ranges"] = [{"from": a, "to": b} for a, b in calendar.excluded_ranges]
    return d


def _given(mapping: Mapping, key: str, default: object) -> object:
    """A key present but empty (YAML's ``key:``) reads as absent; any other value is checked."""
    value = mapping.get(key)
    return default if value is None else value


def _zone(calendar: str, tz_name: object) -> zoneinfo.ZoneInfo:
    if not isinstance(tz_name, str) or not tz_name:
        raise CalendarError(calendar, "timezone", f"{shown(tz_name)} is not an IANA zone name such as Europe/Lisbon")
    try:
        return zoneinfo.ZoneInfo(tz_name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise CalendarError(calendar, "timezone", f"unknown timezone {shown(tz_name)}; "
                                                  "use an IANA name such as Europe/Lisbon") from None


def _list(calendar: str, raw: object, field_: str) -> list:
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
            raise CalendarError(calendar, f"exclude_dates[{i}]", f"expected a date as YYYY-MM-DD, got {shown(item)}") from None


def _parse_instant(calendar: str, raw: object, field_: str) -> int:
    """An instant with a UTC offset, or epoch ms (as the API sends it), within years 1970-9999 (``bounds.py``)."""
    ms = raw if isinstance(raw, int) and not isinstance(raw, bool) else _instant_ms(calendar, raw, field_)
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise CalendarError(calendar, field_, f"{shown(raw)} is outside 1970-01-01T00:00:00Z .. "
                                              "9999-12-31T23:59:59.999Z")
    return ms


def _instant_ms(calendar: str, raw: object, field_: str) -> int:
    dt = raw
    if isinstance(raw, str):
        try:
            dt = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
        except ValueError:
            dt = None
    if not isinstance(dt, datetime):
        raise CalendarError(calendar, field_, f"expected an ISO-8601 time such as 2026-11-24T10:00:00+00:00, "
                                              f"got {shown(raw)}")
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
            raise CalendarError(calendar, where, f"'from' ({shown(item['from'])}) must be before 'to' ({shown(item['to'])})")
        yield start, end


def _parse_windows(calendar: str, raw: object) -> tuple[Window, ...]:
    """Either form; a window whose end is before its start crosses midnight into the next day."""
    specs: list[tuple[str, object, str, str]] = []  # (field, days, start, end)
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
        start = _parse_clock(calendar, start_text, f"{where}.start", allow_24=False)
        end = _parse_clock(calendar, end_text, f"{where}.end", allow_24=True)
        if start == end:
            raise CalendarError(calendar, where, f"{start_text}-{end_text} is empty; for a whole day write 00:00-24:00")
        for weekday in _parse_days(calendar, days, f"{where}.days"):
            if start < end:
                out.append(Window(weekday, start, end))
            else:  # crosses midnight: the rest of today, then the start of tomorrow
                out.append(Window(weekday, start, DAY_MS))
                if end > 0:
                    out.append(Window((weekday + 1) % 7, 0, end))
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
    """"mon", "mon-fri", "fri-mon" (wraps), "sat,sun", "*", or a list of those."""
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
            raise CalendarError(calendar, field_, f"{shown(part)} is not a day or range of days; "
                                                  f"use {', '.join(WEEKDAYS)}, a range such as mon-fri, or *")
    return out


# --- normalising and formatting ------------------------------------------------------------

def _merge_windows(calendar: str, windows: Iterable[Window]) -> tuple[Window, ...]:
    """Sorted, and overlapping or touching windows of a day joined, so a reason lists each once."""
    out: list[Window] = []
    for w in sorted(windows):
        if not (0 <= w.weekday < 7 and 0 <= w.start_ms < w.end_ms <= DAY_MS):
            raise CalendarError(calendar, "windows", f"{shown(w)} is not a weekday 0-6 with 0 <= start < end <= 24:00")
        if out and out[-1].weekday == w.weekday and w.start_ms <= out[-1].end_ms:
            out[-1] = Window(w.weekday, out[-1].start_ms, max(out[-1].end_ms, w.end_ms))
        else:
            out.append(w)
    return tuple(out)


def _merge_ranges(calendar: str, ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if a >= b:
            raise CalendarError(calendar, "exclude_ranges", f"[{_iso(a)}, {_iso(b)}) is empty")
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _naive_ms(day: date) -> int:
    return (day - _EPOCH_DATE).days * DAY_MS


def _clock(ms_of_day: int) -> str:
    minutes = ms_of_day // 60_000
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _iso(ms: int) -> str:
    text = (_EPOCH_UTC + ms * _MS).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return (text[:-7] if ms % 1000 == 0 else text[:-3]) + "Z"


__all__ = ["MAX_CANDIDATES", "SEARCH_HORIZON_MS", "Calendar", "CalendarError", "NextSlot", "Window",
           "allowed_by_all", "calendar_to_dict", "check_calendar_name", "describe_windows", "first_exclusion", "next_allowed", "next_instant_all_allow", "parse_calendar"]
