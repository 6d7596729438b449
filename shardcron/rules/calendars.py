"""Several calendars and a trigger: the slots a job is owed. Pure, and in integer epoch ms (UTC).

A job may use several calendars (``spec.calendar.Calendar``); a slot is owed only
when every one allows it (``allowed_by_all``). An excluded slot is not owed: it is
not run, nor missing.

Searching forward
    ``next_allowed`` asks each calendar for its next allowed instant
    (``Calendar.next_allowed_instant``, which jumps from opening to opening), so a
    trigger firing every second under a window that excludes 15 hours a day is
    asked for two slots, not 54,000. A search gives up (returns None) past
    ``SEARCH_HORIZON_MS`` (four years) or after ``MAX_CANDIDATES`` trigger slots:
    calendars that allow nothing for that long are taken to allow nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shardcron.abc import Trigger
from shardcron.spec.calendar import SEARCH_HORIZON_MS, Calendar

MAX_CANDIDATES = 10_000


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


def next_allowed(
    trigger: Trigger,
    calendars: Sequence[Calendar],
    after_ms: int,
    limit: int = MAX_CANDIDATES,
    horizon_ms: int = SEARCH_HORIZON_MS,
) -> NextSlot:
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


__all__ = ["MAX_CANDIDATES", "NextSlot", "allowed_by_all", "first_exclusion", "next_allowed", "next_instant_all_allow"]
