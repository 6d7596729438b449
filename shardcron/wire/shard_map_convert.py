"""The shard map (GetShards) between protobuf and the dict ``shardcron shards --json`` prints."""

from __future__ import annotations

from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import optional


def shard_map_to_proto(m: dict) -> pb.GetShardsResponse:
    p = pb.GetShardsResponse(prefix=m.get("prefix") or "", revision=m.get("revision") or 0)
    if m.get("shard_count") is not None:
        p.shard_count = m["shard_count"]
    for r in m.get("shards", []):
        s = p.shards.add(shard=r["shard"], candidates=r.get("candidates") or 0, state=r.get("state") or "")
        for name in ("leader", "address", "fence", "leader_since_ms", "jobs"):
            if r.get(name) is not None:
                setattr(s, name, r[name])
    r = m.get("reshard")
    if r:
        p.reshard.CopyFrom(
            pb.Reshard(
                from_shards=int(r.get("from") or 0),
                to_shards=int(r.get("to") or 0),
                state=str(r.get("state") or ""),
                requested_at_ms=int(r.get("requested_at_ms") or 0),
            )
        )
    for n in m.get("nodes", []):
        p.nodes.add(
            node=n["node"],
            address=n.get("address") or "",
            started_at_ms=n.get("started_at_ms") or 0,
            leads=n.get("leads") or 0,
            fair_share=str(n.get("fair_share") or ""),
            draining=bool(n.get("draining")),
        )
    return p


def shard_map_from_proto(p: pb.GetShardsResponse) -> dict:
    """The same dict ``shardcron shards --json`` prints."""
    return {
        "prefix": p.prefix,
        "shard_count": optional(p, "shard_count"),
        "revision": p.revision,
        "shards": [
            {
                "shard": s.shard,
                "leader": optional(s, "leader"),
                "address": optional(s, "address"),
                "fence": optional(s, "fence"),
                "leader_since_ms": optional(s, "leader_since_ms"),
                "candidates": s.candidates,
                "jobs": optional(s, "jobs"),
                "state": s.state,
            }
            for s in p.shards
        ],
        "nodes": [
            {
                "node": n.node,
                "address": n.address,
                "started_at_ms": n.started_at_ms,
                "leads": n.leads,
                "fair_share": n.fair_share,
                "draining": n.draining,
            }
            for n in p.nodes
        ],
        "reshard": (
            {
                "from": p.reshard.from_shards,
                "to": p.reshard.to_shards,
                "state": p.reshard.state,
                "requested_at_ms": p.reshard.requested_at_ms,
            }
            if p.HasField("reshard")
            else None
        ),
    }


__all__ = ["shard_map_from_proto", "shard_map_to_proto"]
