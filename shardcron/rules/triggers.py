"""Triggers: when a job's slots fall. Pure, and in integer epoch milliseconds (UTC).

A trigger answers one question, ``next_after(after_ms)``: the first slot
strictly after ``after_ms``, or ``None`` when there are no more. The scheduling
loop asks it once per job after each slot; catch-up asks it repeatedly through
``slots_between``. Nothing here reads the clock, so every answer is testable.

Interval slots
    ``anchor + k * interval`` for whole ``k``. With the default anchor of 0 they
    are aligned to the wall clock (every 5s fires at :00, :05, ...), whenever the
    job was created, so every node computes the same slots. Pure integer
    arithmetic: this is the hot path.

Cron slots, read in the job's IANA timezone
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

import functools
import threading
import zoneinfo
from datetime import datetime, timedelta, timezone

from croniter import CroniterBadDateError, croniter

from shardcron.abc import Trigger
from shardcron.spec.bounds import MAX_TIME_MS
from shardcron.model import Schedule, ScheduleKind

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
_SECOND = timedelta(seconds=1)


class IntervalTrigger:
    """Slots at ``anchor_ms + k * interval_ms``, up to the end of year 9999."""

    __slots__ = ("interval_ms", "anchor_ms")

    def __init__(self, interval_ms: int, anchor_ms: int = 0):
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        self.interval_ms = interval_ms
        self.anchor_ms = anchor_ms

    def next_after(self, after_ms: int) -> int | None:
        # Python's % is never negative for a positive divisor, so this holds on
        # either side of the anchor.
        slot = after_ms + self.interval_ms - (after_ms - self.anchor_ms) % self.interval_ms
        return slot if slot <= MAX_TIME_MS else None

    def __repr__(self) -> str:
        return f"IntervalTrigger({self.interval_ms}, anchor_ms={self.anchor_ms})"


class OnceTrigger:
    """A single slot."""

    __slots__ = ("at_ms",)

    def __init__(self, at_ms: int):
        self.at_ms = at_ms

    def next_after(self, after_ms: int) -> int | None:
        return self.at_ms if after_ms < self.at_ms <= MAX_TIME_MS else None

    def __repr__(self) -> str:
        return f"OnceTrigger({self.at_ms})"


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
        first_offset = self._tz.utcoffset(naive.replace(fold=0))
        first_pass_ms = _naive_ms(naive) - first_offset // _MS
        transition_ms = _transition_ms(self._tz, first_pass_ms, after_ms)
        repeat_end = _EPOCH + (transition_ms * _MS) + first_offset
        # croniter returns times strictly after its start, and no slot is finer
        # than a second, so one second before the end still yields the end itself.
        return max(naive, repeat_end - _SECOND)

    def _to_utc_ms(self, naive: datetime) -> int:
        """A naive local wall-clock time as epoch ms, by the rules in the module docstring."""
        off0 = self._tz.utcoffset(naive)
        off1 = self._tz.utcoffset(naive.replace(fold=1))
        if off0 >= off1:
            # Equal: an ordinary time. Greater: a repeated time, whose first
            # occurrence (fold=0) carries the earlier, larger offset.
            return _naive_ms(naive) - off0 // _MS
        # fold=0 reads a nonexistent time with the offset before the gap, which
        # lands after the transition; fold=1 with the offset after it, which lands
        # before. The transition lies between.
        base = _naive_ms(naive)
        return _transition_ms(self._tz, base - off1 // _MS, base - off0 // _MS)


def _naive_ms(naive: datetime) -> int:
    return (naive - _EPOCH) // _MS


def _transition_ms(tz: zoneinfo.ZoneInfo, before_ms: int, after_ms: int) -> int:
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


@functools.lru_cache(maxsize=65536)
def trigger_for(schedule: Schedule) -> Trigger:
    """The trigger a schedule describes. Interval slots are anchored at the epoch.

    Triggers are immutable to their callers (CronTrigger locks its parser), so
    jobs with one schedule share one: a node holding 50,000 jobs keeps a few
    hundred parsed cron expressions, not 50,000.
    """
    if schedule.kind is ScheduleKind.CRON:
        if schedule.cron is None:
            raise ValueError("a cron schedule needs an expression")
        return CronTrigger(schedule.cron, schedule.timezone)
    if schedule.kind is ScheduleKind.INTERVAL:
        if schedule.interval_ms is None:
            raise ValueError("an interval schedule needs interval_ms")
        return IntervalTrigger(schedule.interval_ms)
    if schedule.at_ms is None:
        raise ValueError("a once schedule needs at_ms")
    return OnceTrigger(schedule.at_ms)


def slots_between(trigger: Trigger, after_ms: int, until_ms: int, limit: int | None = None) -> list[int]:
    """Slots in ``(after_ms, until_ms]``, ascending, at most ``limit`` of them.

    Half-open on the left so that consecutive windows ``(a, b]``, ``(b, c]``
    never produce a slot twice nor miss one.
    """
    out: list[int] = []
    slot = after_ms
    while limit is None or len(out) < limit:
        nxt = trigger.next_after(slot)
        if nxt is None or nxt > until_ms:
            break
        if nxt <= slot:  # a broken trigger must not spin the loop forever
            raise RuntimeError(f"{trigger!r}.next_after({slot}) returned {nxt}, not a later slot")
        out.append(nxt)
        slot = nxt
    return out


__all__ = ["CronTrigger", "IntervalTrigger", "OnceTrigger", "Trigger", "slots_between", "trigger_for"]
