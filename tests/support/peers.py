"""What a member node knows and a client does not: the cluster's forwarding seal, read from etcd."""

from __future__ import annotations

from shardcron.api.peers import Seal, cluster_seal
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout


def cluster_seal_of(endpoints: str, prefix: str) -> Seal:
    """The seal the nodes of the cluster under ``prefix`` share (created by the first node to start)."""
    etcd = Etcd(endpoints)
    try:
        return cluster_seal(etcd, KeyLayout(prefix).forwarding_secret)
    finally:
        etcd.close()
