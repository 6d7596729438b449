"""Cluster configuration and node membership in etcd."""

from __future__ import annotations

import json

from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.session import Session
from shardcron.errors import ConfigError


def ensure_config(etcd: Etcd, layout: KeyLayout, shard_count: int, now_ms: int) -> int:
    """Write ``<prefix>/config`` if this is the first node; otherwise check that we agree with it."""
    value = json.dumps({"shards": shard_count, "created_at_ms": now_ms}).encode()
    created, kv = etcd.put_if_absent(layout.config, value)
    if created:
        return shard_count
    try:
        existing = json.loads(kv.value)["shards"] if kv else None
    except (ValueError, KeyError, TypeError):
        existing = None
    if not isinstance(existing, int):
        raise ConfigError(f"{layout.config} in etcd holds no valid shard count: {kv.value[:200] if kv else None!r}")
    if existing != shard_count:
        raise ConfigError(
            f"the cluster under {layout.prefix} has {existing} shards, but this node was started with "
            f"--shards {shard_count}; start it with --shards {existing}"
        )
    return existing


def register(etcd: Etcd, layout: KeyLayout, session: Session, node_id: str, address: str, started_at_ms: int) -> None:
    """Put ``<prefix>/nodes/<node id>`` bound to the session lease; refuse a duplicate live node id."""
    value = json.dumps({"address": address, "started_at_ms": started_at_ms}).encode()
    created, kv = etcd.put_if_absent(layout.node(node_id), value, session.lease_id)
    if not created and kv is not None and kv.lease != session.lease_id:
        raise ConfigError(
            f"node id {node_id!r} is already registered by a live node (lease {kv.lease:x}); "
            "give each node its own --node-id"
        )


def deregister(etcd: Etcd, layout: KeyLayout, node_id: str) -> None:
    etcd.delete(layout.node(node_id))
