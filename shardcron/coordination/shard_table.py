"""This node's slot for every shard, the one setter every state change goes through, and the fences it publishes.

The control thread owns the slots and changes them; API threads read only
the published fences (``led_shards``, ``leader_fence``), which the setter
replaces whole, under a lock, whenever a slot's state changes. The
session-lost callback (the keepalive thread) reads ``slots`` to set every
stop event; it reads the attribute when it runs, so a table renewed after a
reshard is the one it sees.
"""

from __future__ import annotations

import threading

from shardcron.coordination.ownership import ShardSlot, ShardState


class ShardTable:
    def __init__(self, shard_count: int):
        self.slots = {k: ShardSlot(k) for k in range(shard_count)}
        self._fences_lock = threading.Lock()
        self._led_fences: dict[int, int] = {}  # shard -> fence of every shard led here

    def renew(self, shard_count: int) -> None:
        """A fresh slot for every shard of a new layout (after a reshard's cut-over, when none is led)."""
        self.slots = {k: ShardSlot(k) for k in range(shard_count)}

    def set_state(self, slot: ShardSlot, new: ShardState, why: str) -> None:
        """Every change of a slot's state goes through here, so the published fences follow it."""
        slot.set_state(new, why)
        with self._fences_lock:
            led = {k: s.fence for k, s in self.slots.items() if s.state is ShardState.LEADER}
            if led != self._led_fences:
                self._led_fences = led

    def led_shards(self) -> list[int]:
        """The shards led here (any thread)."""
        with self._fences_lock:
            return sorted(self._led_fences)

    def leader_fence(self, shard: int) -> int | None:
        """The fence this node leads ``shard`` under, or None (any thread)."""
        with self._fences_lock:
            return self._led_fences.get(shard)

    def all_idle(self) -> bool:
        return all(s.state in (ShardState.IDLE, ShardState.LOST) for s in self.slots.values())
