"""Which node should lead each shard, and which should stand by. Pure.

Rendezvous hashing with bounded loads: every (shard, node) pair gets a stable
score; pairs are taken best score first, and a node stops taking shards at
its fair share. Exactly ``N mod M`` nodes get ``ceil(N/M)`` shards and the
rest ``floor(N/M)``, so every node lands inside the band the issue demands.
Because scores never change for surviving pairs, a join or leave moves about
``N/M`` shards, not a reshuffle.

The standby of a shard is its best-scoring node other than the leader, so a
leaving node's shards spread over the survivors instead of piling onto one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import mmh3


@dataclass(frozen=True)
class Placement:
    primary: str
    standby: str | None


def score(shard: int, node_id: str) -> int:
    return mmh3.hash(f"{shard}/{node_id}".encode(), 0x5EED, signed=False)


def assign(shard_count: int, node_ids: Iterable[str]) -> dict[int, Placement]:
    nodes = sorted(set(node_ids))
    if not nodes:
        return {}
    ranked = {s: sorted(nodes, key=lambda n: (-score(s, n), n)) for s in range(shard_count)}
    # 1. Every shard goes to its favourite node: stable, but not balanced.
    owned: dict[str, list[int]] = {n: [] for n in nodes}
    for s in range(shard_count):
        owned[ranked[s][0]].append(s)
    # 2. Caps: the most loaded nodes keep the ceil share, so the fewest shards move.
    floor_share, extra = divmod(shard_count, len(nodes))
    by_load = sorted(nodes, key=lambda n: (-len(owned[n]), n))
    cap = {n: floor_share + (1 if i < extra else 0) for i, n in enumerate(by_load)}
    # 3. Overloaded nodes give up the shards they are least preferred for.
    released: list[int] = []
    for n in nodes:
        if len(owned[n]) > cap[n]:
            owned[n].sort(key=lambda s: -score(s, n))
            released += owned[n][cap[n]:]
            del owned[n][cap[n]:]
    # 4. Released shards go to the nodes with room, best (shard, node) score first.
    pairs = sorted(
        ((score(s, n), s, n) for s in released for n in nodes if len(owned[n]) < cap[n]),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    placed: set[int] = set()
    for _, s, n in pairs:
        if s not in placed and len(owned[n]) < cap[n]:
            owned[n].append(s)
            placed.add(s)
    primary = {s: n for n, shards in owned.items() for s in shards}
    return {
        s: Placement(primary[s], next((n for n in ranked[s] if n != primary[s]), None))
        for s in range(shard_count)
    }


def fair_share(shard_count: int, member_count: int) -> tuple[int, int]:
    """(floor, ceil) of the number of shards each of ``member_count`` nodes should lead."""
    if member_count <= 0:
        return 0, 0
    lo, extra = divmod(shard_count, member_count)
    return lo, lo + (1 if extra else 0)
