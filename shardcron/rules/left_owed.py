"""The slots a job's old definition still owes when the job is changed or deleted while its leader is behind.

A leader claims each job's next slot a lookahead before it is due, one slot at a time. When its claims stall
(a store cut holds a claim transaction until the connection gives up), the job's due slots pile up
unclaimed. A put, pause or delete then replaces the job's definition: the new one owes only the slots after
its ``active_since_ms`` (a paused or deleted job owes none), and nothing would ever claim the old one's
overdue slots. They would leave no row at all: runs missed silently.

So the leader claims them when the change arrives, and each is recorded as its start finds it
(``policies.disowned_slot``): skipped for a deleted or paused job, run when the new definition's start is
after it. Claims are insert-only, so a slot the stalled claim also writes is written once.

    old definition paused                       -> owes nothing (it claimed nothing since the pause)
    deleted, or the new definition paused       -> owes its slots in (claimed through, now]
    replaced by an active definition            -> owes its slots in (claimed through, min(now, new start)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from shardcron.model import Job


class LeftOwed(NamedTuple):
    slots: list[int]  # ascending, at most the limit asked for
    more: bool  # more slots were owed than the limit: the oldest ``limit`` are given


def owed_until(old: Job, new: Job | None, now_ms: int) -> int | None:
    """The last instant whose slots the old definition owes (see the module doc); None when it owes none."""
    if old.paused:
        return None
    if new is None or new.paused:
        return now_ms
    return min(now_ms, new.active_since_ms)


def left_owed(next_slot: Callable[[int], int | None], claimed_through_ms: int, until_ms: int, limit: int) -> LeftOwed:
    """The slots ``next_slot`` gives in ``(claimed_through_ms, until_ms]``, oldest first, at most ``limit``.

    ``next_slot(after)`` is the definition's first slot after ``after`` (its calendars applied), None when it
    has no more.
    """
    slots: list[int] = []
    after = claimed_through_ms
    while (slot := next_slot(after)) is not None and slot <= until_ms:
        if slot <= after:  # a broken trigger must not spin the loop forever
            raise RuntimeError(f"next_slot({after}) returned {slot}, not a later slot")
        if len(slots) == limit:
            return LeftOwed(slots, True)
        slots.append(slot)
        after = slot
    return LeftOwed(slots, False)
