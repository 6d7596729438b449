"""The shard map between protobuf and the dict ``shardcron shards --json`` prints."""

from __future__ import annotations

from shardcron.wire.shard_map_convert import shard_map_from_proto, shard_map_to_proto


def test_the_shard_map_round_trips():
    m = {
        "prefix": "/cron",
        "shard_count": 2,
        "revision": 9,
        "shards": [
            {
                "shard": 0,
                "leader": "n0",
                "address": "h:1",
                "fence": 4,
                "leader_since_ms": 5,
                "candidates": 2,
                "jobs": 10,
                "state": "leading",
            },
            {
                "shard": 1,
                "leader": None,
                "address": None,
                "fence": None,
                "leader_since_ms": None,
                "candidates": 0,
                "jobs": None,
                "state": "no leader",
            },
        ],
        "nodes": [
            {"node": "n0", "address": "h:1", "started_at_ms": 3, "leads": 1, "fair_share": "1", "draining": False}
        ],
        "reshard": None,
    }
    assert shard_map_from_proto(shard_map_to_proto(m)) == m
    m["reshard"] = {"from": 2, "to": 4, "state": "draining", "requested_at_ms": 12}
    assert shard_map_from_proto(shard_map_to_proto(m)) == m
