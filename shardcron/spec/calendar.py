"""A calendar: which instants a job's slots may fall on. Pure, and in integer epoch ms (UTC).

A ``Calendar`` excludes instants in three ways, checked in this order (the
first that applies is the reason ``why_excluded`` gives):

1. excluded ranges: absolute UTC intervals ``[from, to)``;
2. excluded dates (holidays): whole local days in the calendar's timezone;
3. windows (business hours): when a calendar has any, an instant is allowed only
   inside one, e.g. Mon-Fri 09:00-18:00 Europe/Lisbon. Without windows every
   hour of a day that is not excluded is allowed.

A job may use several calendars; a slot is owed only when every one allows it
(``rules.calendars.allowed_by_all``). An excluded slot is not owed: it is not run, nor missing.

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
      trigger still fires once in the repeated hour (``spec.cron``); an interval
      trigger fires through both passes, as it fires by real time.
    * A window may cross midnight: ``fri: 22:00-02:00`` is Fri 22:00-24:00 plus
      Sat 00:00-02:00 (it belongs to the day it starts on). ``24:00`` is allowed as
      an end. A window whose start equals its end is refused: it could mean
      nothing or the whole day.
    * Excluded dates are local dates too: a holiday on a DST day lasts the 23 or
      25 real hours of that day.

Searching forward
    ``Calendar.next_allowed_instant(ms)`` is the first allowed instant ``>= ms``. It jumps
    rather than steps: an allowed stretch can only begin where an excluded range
    ends, where the wall clock reaches a window start (in either pass of a
    repeated hour), or at a UTC offset transition, so only those instants are
    tried. It gives up (returns None) past ``SEARCH_HORIZON_MS`` (four years): a
    calendar that allows nothing for that long is taken to allow nothing.
"""

from __future__ import annotations

import zoneinfo
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from shardcron.errors import ShardcronError
from shardcron.spec.bounds import DAY_MS, shown
from shardcron.spec.cron import transition_ms, utc_offset

SEARCH_HORIZON_MS = 4 * 366 * DAY_MS
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # index = datetime.weekday()

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=UTC)
_EPOCH_DATE = _EPOCH.date()
_MS = timedelta(milliseconds=1)
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
        return f"{WEEKDAYS[self.weekday].title()} {clock_text(self.start_ms)}-{clock_text(self.end_ms)}"


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
        set_(self, "_tz", calendar_zone(self.name, self.timezone))
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
        detail = self._broken_rule(slot_ms)
        if detail is None:
            return None
        if isinstance(detail, tuple):  # an excluded range
            what = f"excluded range {_iso(detail[0])}..{_iso(detail[1])}"
        elif isinstance(detail, date):  # an excluded date
            what = f"holiday {detail.isoformat()}"
        else:
            day = self._by_day[detail]
            hours = ", ".join(f"{clock_text(w.start_ms)}-{clock_text(w.end_ms)}" for w in day) or "(no window)"
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

    def _broken_rule(self, ms: int) -> tuple[int, int] | date | int | None:
        """The first rule ``ms`` breaks, as its detail: the excluded range, the excluded local date,
        or the local weekday whose windows it is outside; None when it is allowed."""
        inside = self._range_containing(ms)
        if inside is not None:
            return inside
        local = datetime.fromtimestamp(ms // 1000, self._tz)
        if local.date() in self.excluded_dates:
            return local.date()
        if self.windows is not None and not self._in_window(local, ms):
            return local.weekday()
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
            transition = transition_ms(self._tz, lo, hi)
            # Only this day's own: the reach spans parts of its neighbours, and an opening
            # of a later day offered here would be found before an earlier one of this day.
            if datetime.fromtimestamp(transition // 1000, self._tz).date() == day:
                out.add(transition)
        return out

    def _instant_of(self, naive_ms: int, fold: int) -> int | None:
        """The instant whose wall clock reads ``naive_ms`` in pass ``fold``; None in a gap."""
        naive = (_EPOCH + naive_ms * _MS).replace(fold=fold)
        instant = naive_ms - utc_offset(self._tz, naive) // _MS
        return instant if instant + self._offset_ms(instant) == naive_ms else None

    def _offset_ms(self, ms: int) -> int:
        local = datetime.fromtimestamp(ms // 1000, self._tz)
        return utc_offset(self._tz, local) // _MS


@dataclass(frozen=True)
class StoredCalendar:
    """A calendar as the store holds it: its version (1 for a new one) and when that version took effect."""

    calendar: Calendar
    version: int
    updated_at_ms: int


# --- normalising and formatting ------------------------------------------------------------


def calendar_zone(calendar: str, tz_name: object) -> zoneinfo.ZoneInfo:
    """The zone ``tz_name`` names; ``CalendarError`` naming ``calendar`` otherwise."""
    if not isinstance(tz_name, str) or not tz_name:
        raise CalendarError(calendar, "timezone", f"{shown(tz_name)} is not an IANA zone name such as Europe/Lisbon")
    try:
        return zoneinfo.ZoneInfo(tz_name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise CalendarError(
            calendar, "timezone", f"unknown timezone {shown(tz_name)}; use an IANA name such as Europe/Lisbon"
        ) from None


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


def clock_text(ms_of_day: int) -> str:
    """A time of day as HH:MM (24:00 for the end of the day)."""
    minutes = ms_of_day // 60_000
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _iso(ms: int) -> str:
    text = (_EPOCH_UTC + ms * _MS).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return (text[:-7] if ms % 1000 == 0 else text[:-3]) + "Z"
