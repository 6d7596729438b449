"""Which node should lead each shard, and which should stand by. Pure.

Sticky bounded loads: a shard stays with the member that leads it now while
that member is under its cap; only the excess moves. Caps are the fair share:
exactly ``N mod M`` nodes may lead ``ceil(N/M)`` shards and the rest
``floor(N/M)``, so every node lands inside the band. The ceil shares go first
to the nodes that already lead at least that many (then by node id), so the
fewest shards have to move.

A node over its cap gives up the shards it won most recently (the highest
create revision of its leader key, i.e. its newest fences): a failover
followed by the failed node's return undoes the failover, and nothing else
moves. Shards without a live owner, and the given-up ones, go to the nodes
with room, best rendezvous score (shard, node) first.

Why sticky and not a pure function of the member set: a stateless placement
recomputed for a new member set can also move shards between the old nodes
(its caps and its tie-breaks shift), so a join can cost more than ``N/M``
moves. Here a join from a balanced cluster moves exactly ``floor(N/(M+1))``
or ``ceil(N/(M+1))`` shards, all to the newcomer, and a leave moves exactly
the leaver's shards: the bound ``ceil(N/M) + 2`` holds by construction.

The plan is also a fixed point of its own moves: while a planned move is
carried out (the old owner resigns, the new one wins), every node that feeds
the intermediate state back in gets the same plan, so nodes whose mirrors lag
each other by a move still agree.

The standby of a shard is its best-scoring node other than the leader, so a
leaving node's shards spread over the survivors instead of piling onto one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import mmh3


@dataclass(frozen=True)
class Placement:
    primary: str
    standby: str | None


@dataclass(frozen=True)
class Owner:
    """Who holds a shard now: the node at the head of its election queue, and that key's create revision."""

    node: str
    revision: int


def score(shard: int, node_id: str) -> int:
    return mmh3.hash(f"{shard}/{node_id}".encode(), 0x5EED, signed=False)


def fair_share(shard_count: int, member_count: int) -> tuple[int, int]:
    """(floor, ceil) of the number of shards each of ``member_count`` nodes should lead."""
    if member_count <= 0:
        return 0, 0
    lo, extra = divmod(shard_count, member_count)
    return lo, lo + (1 if extra else 0)


def caps(shard_count: int, nodes: list[str], load: Mapping[str, int]) -> dict[str, int]:
    """How many shards each node may lead: the ceil share to nodes already at it, then by node id.

    Only ``load >= ceil`` (not the exact load) orders the nodes, so carrying the
    plan out (an over-cap node shrinking to its cap, a receiver growing to it)
    never hands a ceil share to someone else half way.
    """
    lo, hi = fair_share(shard_count, len(nodes))
    extra = shard_count - lo * len(nodes)
    order = sorted(nodes, key=lambda n: (load.get(n, 0) < hi, n))
    return {n: lo + (1 if i < extra else 0) for i, n in enumerate(order)}


def assign(
    shard_count: int, node_ids: Iterable[str], current: Mapping[int, Owner] | None = None
) -> dict[int, Placement]:
    """Every shard's preferred leader and standby among ``node_ids``, moving as few as possible from ``current``."""
    nodes = sorted(set(node_ids))
    if not nodes:
        return {}
    members = set(nodes)
    held = {s: o for s, o in (current or {}).items() if o.node in members and 0 <= s < shard_count}
    owned: dict[str, list[int]] = {n: [] for n in nodes}
    for s, o in held.items():
        owned[o.node].append(s)
    cap = caps(shard_count, nodes, {n: len(v) for n, v in owned.items()})
    # 1. Each node keeps its longest-held shards up to its cap; the rest are given up.
    primary: dict[int, str] = {}
    room: dict[str, int] = {}
    for n in nodes:
        keep = sorted(owned[n], key=lambda s: (held[s].revision, s))[: cap[n]]
        primary.update((s, n) for s in keep)
        room[n] = cap[n] - len(keep)
    # 2. Unowned and given-up shards go to the nodes with room, best (shard, node) score first.
    pool = [s for s in range(shard_count) if s not in primary]
    pairs = sorted(((score(s, n), s, n) for s in pool for n in nodes if room[n] > 0), key=lambda t: (-t[0], t[1], t[2]))
    for _, s, n in pairs:
        if s not in primary and room[n] > 0:
            primary[s] = n
            room[n] -= 1
    return {s: Placement(primary[s], standby_for(s, nodes, primary[s])) for s in range(shard_count)}


def standby_for(shard: int, nodes: list[str], primary: str) -> str | None:
    """The shard's best-scoring node other than its primary (None when it is alone)."""
    others = [n for n in nodes if n != primary]
    return min(others, key=lambda n: (-score(shard, n), n)) if others else None
