"""The etcd key layout. Every key shardcron reads or writes is named here.

<prefix>/config                  cluster configuration (shard count), written once
<prefix>/nodes/<node id>         membership, bound to the node's session lease
<prefix>/drain/<node id>         an operator's request that a node hand its shards over
<prefix>/reshard                 a reshard in progress: every node hands every shard over
<prefix>/calendars               bumped by every calendar write (the calendars live in the store):
                                 each node watches it and reloads them
<prefix>/namespaces              bumped by every namespace write (weights and quotas live in the
                                 store): each node watches it and reloads them
<prefix>/tokens                  bumped by every API token write (the tokens live in the store):
                                 each node watches it, reloads them and ends a revoked token's streams
<prefix>/forwarding-secret       the cluster's secret, created once by the first node to start: a
                                 forwarded call's marker is sealed with it (api/peers.py)
<prefix>/shard/<k>/<lease hex>   a candidate for shard k, bound to the candidate's lease;
                                 the lowest create revision leads, and that revision is
                                 the shard's fencing token
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyLayout:
    prefix: str = "/cron"

    def __post_init__(self) -> None:
        if not self.prefix.startswith("/") or self.prefix.endswith("/") or "//" in self.prefix:
            raise ValueError(f"prefix must look like /name (no trailing slash), got {self.prefix!r}")

    @property
    def root(self) -> str:
        return self.prefix + "/"

    @property
    def config(self) -> str:
        return f"{self.prefix}/config"

    @property
    def reshard(self) -> str:
        return f"{self.prefix}/reshard"

    @property
    def calendars(self) -> str:
        return f"{self.prefix}/calendars"

    @property
    def namespaces(self) -> str:
        return f"{self.prefix}/namespaces"

    @property
    def tokens(self) -> str:
        return f"{self.prefix}/tokens"

    @property
    def forwarding_secret(self) -> str:
        return f"{self.prefix}/forwarding-secret"

    @property
    def nodes(self) -> str:
        return f"{self.prefix}/nodes/"

    def node(self, node_id: str) -> str:
        return f"{self.prefix}/nodes/{node_id}"

    @property
    def drains(self) -> str:
        return f"{self.prefix}/drain/"

    def drain(self, node_id: str) -> str:
        return f"{self.prefix}/drain/{node_id}"

    @property
    def shards(self) -> str:
        return f"{self.prefix}/shard/"

    def shard(self, shard: int) -> str:
        return f"{self.prefix}/shard/{shard}/"

    def candidate(self, shard: int, lease_id: int) -> str:
        return f"{self.prefix}/shard/{shard}/{lease_id:x}"

    def parse_candidate(self, key: str) -> tuple[int, str] | None:
        """``<prefix>/shard/<k>/<lease hex>`` -> (k, lease hex); None for any other key."""
        if not key.startswith(self.shards):
            return None
        rest = key[len(self.shards) :].split("/")
        if len(rest) != 2 or not rest[0].isdigit() or not rest[1]:
            return None
        return int(rest[0]), rest[1]

    def parse_node(self, key: str) -> str | None:
        return key[len(self.nodes) :] if key.startswith(self.nodes) and len(key) > len(self.nodes) else None

    def parse_drain(self, key: str) -> str | None:
        return key[len(self.drains) :] if key.startswith(self.drains) and len(key) > len(self.drains) else None
