"""Cluster configuration and node membership in etcd."""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

from shardcron.coordination.cluster_config import (
    ClusterConfig,
    check_agreement,
    new_config,
    parse_config,
    with_min_interval,
)
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.session import Session
from shardcron.errors import ConfigError, EtcdUnavailable

log = logging.getLogger(__name__)


def ensure_config(
    etcd: Etcd, layout: KeyLayout, shard_count: int, now_ms: int, min_interval_ms: int | None = None
) -> int:
    """The cluster's shard count, after ``ensure_cluster_config``."""
    return ensure_cluster_config(etcd, layout, shard_count, now_ms, min_interval_ms).shards


def ensure_cluster_config(
    etcd: Etcd, layout: KeyLayout, shard_count: int, now_ms: int, min_interval_ms: int | None = None
) -> ClusterConfig:
    """Write ``<prefix>/config`` if this is the first node; otherwise check that we agree with it.

    ``min_interval_ms``: the node's explicit --min-interval, or None to take the cluster's.
    """
    value = json.dumps(new_config(shard_count, now_ms, min_interval_ms)).encode()
    created, kv = etcd.put_if_absent(layout.config, value)
    if created:
        return parse_config(json.loads(value), layout.config)
    try:
        stored = json.loads(kv.value) if kv else None
    except ValueError:
        stored = kv.value[:200] if kv else None
    cluster = parse_config(stored, layout.config)
    check_agreement(layout.prefix, cluster, shard_count, min_interval_ms)
    return cluster


def read_cluster_config(etcd: Etcd, layout: KeyLayout) -> tuple[ClusterConfig, Any, int]:
    """The cluster's config, the stored dict and the key's mod revision; ``ConfigError`` if there is none."""
    kv = etcd.get(layout.config)
    if kv is None:
        raise ConfigError(f"no cluster under {layout.prefix} in etcd (no node has started yet): start a node first")
    try:
        stored = json.loads(kv.value)
    except ValueError:
        stored = kv.value[:200]
    return parse_config(stored, layout.config), stored, kv.mod_revision


def set_min_interval(etcd: Etcd, layout: KeyLayout, min_interval_ms: int) -> tuple[ClusterConfig, ClusterConfig]:
    """Change the cluster's minimum interval; returns the config before and after.

    A compare-and-swap on the config key's mod revision, refused while a reshard
    request exists: the reshard rewrites the same key when it cuts over.
    """
    before, stored, mod_revision = read_cluster_config(etcd, layout)
    if before.min_interval_ms == min_interval_ms:
        return before, before
    if etcd.get(layout.reshard) is not None:
        raise ConfigError(_RESHARDING)
    updated = with_min_interval(stored, min_interval_ms)
    if not etcd.put_if_unchanged(
        layout.config, json.dumps(updated).encode(), mod_revision, unless_exists=layout.reshard
    ):
        if etcd.get(layout.reshard) is not None:
            raise ConfigError(_RESHARDING)
        raise ConfigError(f"{layout.config} changed while it was being updated; run the command again")
    return before, parse_config(updated, layout.config)


_RESHARDING = "a reshard is in progress (`shardcron shards` shows it); change the minimum interval once it has finished"


def register(
    etcd: Etcd,
    layout: KeyLayout,
    session: Session,
    node_id: str,
    address: str,
    started_at_ms: int,
    earlier_leases: Collection[int] = (),
) -> None:
    """Put ``<prefix>/nodes/<node id>`` bound to the session lease; refuse a duplicate live node id.

    ``earlier_leases``: the leases this process held (``session``'s own is never taken for an earlier one). A registration bound to one of them is
    this node's own, left by a session it has already given up: it is revoked, not waited for. A session is
    given up at its own deadline, while etcd may keep the lease for longer (a new etcd leader gives every lease
    a whole TTL again), so waiting could outlast any bound set by the TTL."""
    value = json.dumps({"address": address, "started_at_ms": started_at_ms}).encode()
    created, kv = etcd.put_if_absent(layout.node(node_id), value, session.lease_id)
    if not created and kv is not None and kv.lease != session.lease_id and kv.lease in earlier_leases:
        try:
            etcd.revoke(kv.lease)
        except EtcdUnavailable as e:  # gone meanwhile ("lease not found"), or etcd did not answer: look again
            log.info("could not revoke this node's earlier lease %x: %s", kv.lease, e)
        created, kv = etcd.put_if_absent(layout.node(node_id), value, session.lease_id)
    if not created and kv is not None and kv.lease != session.lease_id:
        raise ConfigError(
            f"node id {node_id!r} is already registered by a live node (lease {kv.lease:x}); "
            "give each node its own --node-id"
        )


def deregister(etcd: Etcd, layout: KeyLayout, node_id: str) -> None:
    etcd.delete(layout.node(node_id))
