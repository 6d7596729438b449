"""The settle window: which member set the placement is computed for. Pure.

Membership changes that arrive within ``window_s`` of each other are handled
as one: while the window is open the placement stays computed for the member
set it was computed for (a node that restarts quickly comes back before
anything was rebalanced away from it), and once the members have been quiet
for the whole window the placement follows them.

A node that has no placement yet (it just started)
waits out one window too, with no roles: it then decides from the same member
set, at about the same time, as the nodes already running, instead of acting
on a placement they have not adopted yet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settle:
    seen: tuple[str, ...] | None = None  # the member set last observed
    changed_at: float | None = None  # when ``seen`` last changed, while the window is open
    placed: tuple[str, ...] | None = None  # the member set to place shards over; None: no placement yet

    def wake_at(self, window_s: float) -> float | None:
        """When the open window closes (None when it is closed)."""
        return None if self.changed_at is None else self.changed_at + window_s


def settle(now: float, members: tuple[str, ...], previous: Settle, window_s: float) -> Settle:
    """The next settle state, given the members observed ``now``."""
    seen, changed_at = previous.seen, previous.changed_at
    if members != seen:
        seen, changed_at = members, now
    if changed_at is not None and now - changed_at < window_s:
        return Settle(seen, changed_at, previous.placed)
    return Settle(seen, None, seen)
