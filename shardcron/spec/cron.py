"""Cron slots in an IANA timezone: the one mapping of croniter's naive local times to UTC.

Pure, in integer epoch milliseconds. A job's schedule is checked with it (a cron
expression that never fires is refused), and ``rules.triggers`` drives it.

croniter walks NAIVE local wall-clock times; we map each one to UTC
ourselves, because the rules below are ours and must not depend on how a
croniter version treats aware datetimes.

* A local time that does not exist (spring-forward gap) runs once, at the
  first valid instant after the gap: the transition instant itself.
  2026-03-08 02:30 America/New_York runs at 03:00 EDT = 07:00Z. Several
  nonexistent slots in one gap (``*/15`` at 02:00, 02:15, ...) all map to that
  same instant, so they collapse into one run: skipping the hour would lose
  a daily job's run for the day, and running each would burst.
* A repeated local time (fall-back) runs once, at its FIRST occurrence
  (fold=0). The second pass through the repeated hour yields nothing for
  slots already produced: ``30 1 * * *`` on 2026-11-01 New York runs at
  05:30Z and not again at 06:30Z.
* An expression that matches nothing within 50 years (croniter's search
  limit, e.g. "0 0 30 2 *") has no more slots: ``next_after`` returns None.
* No slot falls after the end of year 9999 (``bounds.MAX_TIME_MS``), the
  last instant a ``datetime`` holds: past it every trigger has ended.
* Results are strictly increasing, and ``next_after`` is right for any
  ``after_ms``, including one inside the repeated hour. This holds because
  the naive-local -> UTC map above is monotone (non-decreasing), so the
  first candidate after ``after_ms``'s own local time is the answer, once
  candidates that map to ``<= after_ms`` are dropped.
"""

from __future__ import annotations

import threading
import zoneinfo
from datetime import UTC, datetime, timedelta

from croniter import CroniterBadDateError, croniter

from shardcron.spec.bounds import MAX_TIME_MS

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_SECOND = timedelta(seconds=1)


class CronTrigger:
    """Cron slots in an IANA timezone; 5 fields, or 6 with SECONDS FIRST.

    The expression is parsed once; the croniter object is reused under a lock
    (it keeps its position as state, and a trigger may be shared between threads).
    """

    def __init__(self, expr: str, timezone: str):
        fields = expr.split()
        if len(fields) not in (5, 6):
            raise ValueError(f"{expr!r} has {len(fields)} fields; expected 5, or 6 with seconds first")
        try:
            self._tz = zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(f"unknown timezone {timezone!r}") from None
        self.expr = " ".join(fields)
        self.timezone = timezone
        # The start time is a placeholder: every call passes its own.
        self._cron = croniter(self.expr, _EPOCH, second_at_beginning=len(fields) == 6)
        self._lock = threading.Lock()
        # croniter gives up after 50 years without a match ("0 0 30 2 *"). Past
        # that point there are no more slots, so remember it instead of searching again.
        self._exhausted_after: int | None = None

    def __repr__(self) -> str:
        return f"CronTrigger({self.expr!r}, {self.timezone!r})"

    def next_after(self, after_ms: int) -> int | None:
        if after_ms >= MAX_TIME_MS or (self._exhausted_after is not None and after_ms >= self._exhausted_after):
            return None
        with self._lock:
            try:
                # Both may pass year 9999 near its end: a local time ahead of UTC, the next candidate.
                candidate = self._cron.get_next(datetime, start_time=self._naive_start(after_ms))
                while True:
                    slot = self._to_utc_ms(candidate)
                    if slot > after_ms:
                        return slot if slot <= MAX_TIME_MS else None
                    candidate = self._cron.get_next(datetime)
            except (CroniterBadDateError, OverflowError):
                self._exhausted_after = after_ms
                return None

    def _naive_start(self, after_ms: int) -> datetime:
        """The naive local time to search from: ``after_ms`` on the local clock.

        Inside the second pass of a repeated hour, every local time up to the
        end of that hour was already produced at its first occurrence, so the
        search starts just before the hour ends rather than skipping each
        candidate one by one (an every-second job would otherwise loop 3600 times).
        """
        local = (_EPOCH_UTC + after_ms * _MS).astimezone(self._tz)
        naive = local.replace(tzinfo=None)
        if not local.fold:
            return naive
        first_offset = utc_offset(self._tz, naive.replace(fold=0))
        first_pass_ms = naive_ms(naive) - first_offset // _MS
        transition = transition_ms(self._tz, first_pass_ms, after_ms)
        repeat_end = _EPOCH + (transition * _MS) + first_offset
        # croniter returns times strictly after its start, and no slot is finer
        # than a second, so one second before the end still yields the end itself.
        return max(naive, repeat_end - _SECOND)

    def _to_utc_ms(self, naive: datetime) -> int:
        """A naive local wall-clock time as epoch ms, by the rules in the module docstring."""
        off0 = utc_offset(self._tz, naive)
        off1 = utc_offset(self._tz, naive.replace(fold=1))
        if off0 >= off1:
            # Equal: an ordinary time. Greater: a repeated time, whose first
            # occurrence (fold=0) carries the earlier, larger offset.
            return naive_ms(naive) - off0 // _MS
        # fold=0 reads a nonexistent time with the offset before the gap, which
        # lands after the transition; fold=1 with the offset after it, which lands
        # before. The transition lies between.
        base = naive_ms(naive)
        return transition_ms(self._tz, base - off1 // _MS, base - off0 // _MS)


def utc_offset(tz: zoneinfo.ZoneInfo, when: datetime) -> timedelta:
    """``tz``'s UTC offset at ``when`` (naive: read as local time in ``tz``); a ZoneInfo always has one."""
    offset = tz.utcoffset(when)
    if offset is None:
        raise ValueError(f"{tz} gives no UTC offset for {when}")
    return offset


def naive_ms(naive: datetime) -> int:
    """A naive datetime as milliseconds since the naive epoch."""
    return (naive - _EPOCH) // _MS


def transition_ms(tz: zoneinfo.ZoneInfo, before_ms: int, after_ms: int) -> int:
    """The first instant in ``(before_ms, after_ms]`` whose UTC offset is that of ``after_ms``.

    A binary search over whole seconds: tzdata transitions fall on whole seconds,
    and a gap or fold spans at most a day (Samoa, 2011), so this takes about 17
    steps. zoneinfo keeps its transition table private, hence the search.
    """

    def offset(ms_: int) -> timedelta | None:
        return datetime.fromtimestamp(ms_ // 1000, tz).utcoffset()

    target = offset(after_ms)
    lo, hi = before_ms // 1000, -(-after_ms // 1000)  # offset(lo) != target == offset(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset(mid * 1000) == target:
            hi = mid
        else:
            lo = mid
    return hi * 1000
