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

Cron slots
    ``spec.cron.CronTrigger``: read in the job's IANA timezone, with the
    daylight-saving rules written down there.
"""

from __future__ import annotations

import functools

from shardcron.abc import Trigger
from shardcron.model import Schedule, ScheduleKind
from shardcron.spec.bounds import MAX_TIME_MS
from shardcron.spec.cron import CronTrigger


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


__all__ = ["IntervalTrigger", "OnceTrigger", "Trigger", "slots_between", "trigger_for"]
