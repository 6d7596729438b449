"""The placement a node acts on, read off its mirror: pure helpers and one small cache.

``Placer.update`` feeds the settle window (settle.py) the active members, and
the balancer (balancer.py) the member set that window picks plus every
shard's current holder; the answer is cached for as long as those inputs are
the same, which between membership changes and hand-overs is most of the time.
"""

from __future__ import annotations

from shardcron.coordination import balancer
from shardcron.coordination.settle import Settle, settle
from shardcron.coordination.view import ClusterView

_Inputs = tuple[int, tuple[str, ...], tuple[tuple[int, balancer.Owner], ...]]


def owners(view: ClusterView, shard_count: int) -> tuple[tuple[int, balancer.Owner], ...]:
    """Every shard's current holder as the mirror shows it: the head of its queue and its create revision."""
    out = []
    for shard in range(shard_count):
        head = view.leader(shard)
        if head is not None:
            out.append((shard, balancer.Owner(head.node_id, head.create_revision)))
    return tuple(out)


def takeovers_in_flight(view: ClusterView, shard_count: int) -> dict[str, int]:
    """Per node, the shards it heads the queue of without having proclaimed them ready yet."""
    busy: dict[str, int] = {}
    for shard in range(shard_count):
        head = view.leader(shard)
        if head is not None and not head.leader_since_ms:
            busy[head.node_id] = busy.get(head.node_id, 0) + 1
    return busy


class Placer:
    def __init__(self, settle_s: float):
        self.settle_s = settle_s
        self.state = Settle()
        self.placements: dict[int, balancer.Placement] = {}
        self._inputs: _Inputs | None = None  # (shard count, members, owners) the placements were computed for

    def update(self, now: float, view: ClusterView, shard_count: int) -> dict[int, balancer.Placement]:
        self.state = settle(now, tuple(view.active_members()), self.state, self.settle_s)
        members = self.state.placed
        if members is None:
            self.placements, self._inputs = {}, None  # a fresh node: no roles until its first window passed
            return self.placements
        current = owners(view, shard_count)
        inputs = (shard_count, members, current)
        if inputs != self._inputs:  # otherwise the same inputs, the same answer
            self.placements = balancer.assign(shard_count, members, dict(current))
            self._inputs = inputs
        return self.placements

    def wake_at(self) -> float | None:
        """When the open settle window closes, if one is open."""
        return self.state.wake_at(self.settle_s)

    def forget(self) -> None:
        """The shard count changed: the next update computes afresh (the settle state is kept)."""
        self.placements, self._inputs = {}, None
