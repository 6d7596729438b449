"""Slot equivalence: shardcron's trigger for an imported job against croniter reading the source's expression."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter

from shardcron.rules.triggers import slots_between, trigger_for
from shardcron.spec.job import job_from_dict

SLOTS = 50


def shardcron_slots(job: dict, start: datetime, n: int = SLOTS) -> list[int]:
    trigger = trigger_for(job_from_dict(job, require_executor=True).schedule)
    return slots_between(trigger, int(start.timestamp() * 1000), 2**62, limit=n)


def croniter_slots(expr: str, zone: str, start: datetime, n: int = SLOTS) -> list[int]:
    """croniter's next ``n`` fire times, less the second pass of a repeated (fall-back) hour: croniter fires
    there again, shardcron's rule (spec/cron.py) runs each local time once, at its first occurrence."""
    tz = ZoneInfo(zone)
    it = croniter(expr, start.astimezone(tz))
    out: list[int] = []
    while len(out) < n:
        ms = round(it.get_next(float) * 1000)
        if not datetime.fromtimestamp(ms / 1000, tz).fold:
            out.append(ms)
    return out
