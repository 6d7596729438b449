"""A local mirror of everything under ``<prefix>/``: configuration, members, drains, candidates.

The mirror is fed by one prefix watch and read by pure decisions (who leads
which shard, who is queued, who should move). It is never the proof of
leadership: before a node acts as leader it re-checks etcd (see election.py).
Not thread-safe: the coordinator's control thread owns it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from shardcron.coordination.balancer import fair_share
from shardcron.coordination.cluster_config import min_interval_of
from shardcron.coordination.etcd import KV, Etcd, WatchEvent
from shardcron.coordination.keys import KeyLayout
from shardcron.errors import ConfigError
from shardcron.spec.bounds import DEFAULT_MIN_INTERVAL_MS


@dataclass(frozen=True)
class Candidate:
    shard: int
    key: str
    create_revision: int
    lease: int
    node_id: str
    address: str
    leader_since_ms: int | None = None
    jobs: int | None = None
    fence: int | None = None  # the effective fence the leader proclaimed (revision + offset)


@dataclass(frozen=True)
class Member:
    node_id: str
    address: str
    started_at_ms: int
    lease: int


def _json(value: bytes) -> dict[str, Any]:  # parsed JSON: its values are whatever a node wrote
    try:
        d = json.loads(value or b"{}")
        return d if isinstance(d, dict) else {}
    except ValueError:
        return {}


@dataclass
class ClusterView:
    layout: KeyLayout
    revision: int = 0
    config: dict[str, Any] | None = None
    members: dict[str, Member] = field(default_factory=dict)
    drains: set[str] = field(default_factory=set)
    reshard: dict[str, Any] | None = None  # a reshard request in progress, see shardcron/coordination/reshard.py
    candidates: dict[int, dict[str, Candidate]] = field(default_factory=dict)

    def load(self, revision: int, kvs: list[KV]) -> None:
        self.revision, self.config = revision, None
        self.members, self.drains, self.candidates, self.reshard = {}, set(), {}, None
        for kv in kvs:
            self._put(kv)

    def apply(self, revision: int, events: list[WatchEvent]) -> bool:
        """Apply watch events; returns whether any can change a decision.

        A leader re-proclaiming its key (new job count) changes neither who is
        queued nor in what order, so those events alone return False: the
        coordinator need not re-decide every shard for them. A leader's first
        proclaim (it is ready) is decisive: paced hand-overs wait for it.
        """
        decisive = False
        for ev in events:
            if ev.kind == "put":
                decisive |= not self._is_proclaim(ev.kv)
                self._put(ev.kv)
            else:
                decisive = True
                self._delete(ev.kv.key)
        self.revision = max(self.revision, revision)
        return decisive

    def _is_proclaim(self, kv: KV) -> bool:
        """A put over a ready leader's key, same create revision and node: only its job count changed."""
        parsed = self.layout.parse_candidate(kv.key)
        old = self.candidates.get(parsed[0], {}).get(kv.key) if parsed else None
        return (
            old is not None
            and old.create_revision == kv.create_revision
            and bool(old.leader_since_ms)
            and old.node_id == str(_json(kv.value).get("node", "?"))
        )

    def _put(self, kv: KV) -> None:
        lay = self.layout
        if kv.key == lay.config:
            self.config = _json(kv.value)
        elif kv.key == lay.reshard:
            self.reshard = _json(kv.value)
        elif (shard_lease := lay.parse_candidate(kv.key)) is not None:
            d = _json(kv.value)
            self.candidates.setdefault(shard_lease[0], {})[kv.key] = Candidate(
                shard_lease[0],
                kv.key,
                kv.create_revision,
                kv.lease,
                str(d.get("node", "?")),
                str(d.get("address", "")),
                d.get("since_ms"),
                d.get("jobs"),
                d.get("fence"),
            )
        elif (node := lay.parse_node(kv.key)) is not None:
            d = _json(kv.value)
            self.members[node] = Member(node, str(d.get("address", "")), int(d.get("started_at_ms", 0)), kv.lease)
        elif (node := lay.parse_drain(kv.key)) is not None:
            self.drains.add(node)

    def _delete(self, key: str) -> None:
        lay = self.layout
        if key == lay.config:
            self.config = None
        elif key == lay.reshard:
            self.reshard = None
        elif (shard_lease := lay.parse_candidate(key)) is not None:
            self.candidates.get(shard_lease[0], {}).pop(key, None)
        elif (node := lay.parse_node(key)) is not None:
            self.members.pop(node, None)
        elif (node := lay.parse_drain(key)) is not None:
            self.drains.discard(node)

    # -- reads ------------------------------------------------------------------

    def queue(self, shard: int) -> list[Candidate]:
        """The shard's candidates in election order: the first one leads."""
        return sorted(self.candidates.get(shard, {}).values(), key=lambda c: c.create_revision)

    def leader(self, shard: int) -> Candidate | None:
        q = self.queue(shard)
        return q[0] if q else None

    @property
    def shard_count(self) -> int | None:
        n = (self.config or {}).get("shards")
        return n if isinstance(n, int) and n > 0 else None

    @property
    def min_interval_ms(self) -> int | None:
        """The cluster's minimum interval as mirrored now; None before the config is mirrored.

        A value broken by hand counts as the default: admission keeps its guard.
        """
        if self.config is None:
            return None
        try:
            return min_interval_of(self.config)
        except ConfigError:
            return DEFAULT_MIN_INTERVAL_MS

    def active_members(self) -> list[str]:
        """Members that may lead shards: live and not draining."""
        return sorted(n for n in self.members if n not in self.drains)


def read_view(etcd: Etcd, layout: KeyLayout) -> ClusterView:
    rev, kvs = etcd.get_prefix(layout.root)
    view = ClusterView(layout)
    view.load(rev, kvs)
    return view


def shard_map_from_view(view: ClusterView, prefix: str) -> dict[str, object]:
    """The shard-to-leader map that ``shardcron shards --json`` prints and GetShards serves."""
    n = view.shard_count
    rows = []
    led: dict[str, int] = {}
    for shard in range(n or 0):
        q = view.queue(shard)
        leader = q[0] if q else None
        leading = leader is not None and bool(leader.leader_since_ms)
        if leader is not None and leading:
            led[leader.node_id] = led.get(leader.node_id, 0) + 1
        rows.append(
            {
                "shard": shard,
                "leader": leader.node_id if leader is not None and leading else None,
                "address": leader.address if leader is not None and leading else None,
                "fence": (leader.fence or leader.create_revision) if leader else None,
                "leader_since_ms": leader.leader_since_ms if leader else None,
                "candidates": len(q),
                "jobs": leader.jobs if leader is not None and leading and leader.jobs is not None else None,
                "state": "leading" if leading else "electing" if leader else "no leader",
            }
        )
    reshard = view.reshard
    lo, hi = fair_share(n or 0, len(view.active_members()))
    nodes = [
        {
            "node": m.node_id,
            "address": m.address,
            "started_at_ms": m.started_at_ms,
            "leads": led.get(m.node_id, 0),
            "fair_share": f"{lo}-{hi}" if lo != hi else str(lo),
            "draining": m.node_id in view.drains,
        }
        for m in sorted(view.members.values(), key=lambda m: m.node_id)
    ]
    return {
        "prefix": prefix,
        "shard_count": n,
        "revision": view.revision,
        "shards": rows,
        "nodes": nodes,
        "reshard": reshard,
    }
