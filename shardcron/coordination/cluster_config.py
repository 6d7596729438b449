"""The cluster's configuration (``<prefix>/config`` in etcd) as plain data: pure reads, merges and checks.

The key holds ``{"shards", "created_at_ms", "min_interval_ms"}``. The first node
writes it; ``shardcron reshard`` rewrites ``shards`` and ``shardcron config``
rewrites ``min_interval_ms``, each keeping the other keys. A cluster created
before ``min_interval_ms`` existed has no such key: that means the default.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcron.errors import ConfigError
from shardcron.spec.bounds import DEFAULT_MIN_INTERVAL_MS
from shardcron.spec.durations import format_duration_ms

MIN_INTERVAL_KEY = "min_interval_ms"


@dataclass(frozen=True)
class ClusterConfig:
    shards: int
    min_interval_ms: int
    created_at_ms: int | None = None


def new_config(shards: int, now_ms: int, min_interval_ms: int | None) -> dict[str, object]:
    """What the first node writes: its --shards, and its --min-interval or the default."""
    return {
        "shards": shards,
        "created_at_ms": now_ms,
        MIN_INTERVAL_KEY: DEFAULT_MIN_INTERVAL_MS if min_interval_ms is None else min_interval_ms,
    }


def parse_config(config: object, where: str) -> ClusterConfig:
    """``config`` as stored; ``ConfigError`` naming ``where`` (the key) and the bad field otherwise."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where} in etcd holds no valid cluster config: {str(config)[:200]!r}")
    shards = config.get("shards")
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"{where} in etcd holds no valid shard count: {str(config)[:200]!r}")
    created = config.get("created_at_ms")
    return ClusterConfig(
        shards,
        min_interval_of(config, where),
        created if isinstance(created, int) and not isinstance(created, bool) else None,
    )


def min_interval_of(config: dict[str, object] | None, where: str = "the cluster config") -> int:
    """The cluster's minimum interval in ms: the stored one, or the default when the key is absent."""
    value = (config or {}).get(MIN_INTERVAL_KEY, DEFAULT_MIN_INTERVAL_MS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"{where} in etcd holds no valid {MIN_INTERVAL_KEY}: {value!r} "
            "(set it with `shardcron config --min-interval DURATION`)"
        )
    return value


def with_min_interval(config: dict[str, object], min_interval_ms: int) -> dict[str, object]:
    """``config`` with a new minimum interval; every other key kept as it is."""
    return {**config, MIN_INTERVAL_KEY: min_interval_ms}


def check_agreement(prefix: str, cluster: ClusterConfig, shards: int, min_interval_ms: int | None) -> None:
    """Refuse a node whose flags disagree with the cluster: --shards always, --min-interval when given."""
    if cluster.shards != shards:
        raise ConfigError(
            f"the cluster under {prefix} has {cluster.shards} shards, but this node was started with "
            f"--shards {shards}; start it with --shards {cluster.shards}"
        )
    if min_interval_ms is not None and min_interval_ms != cluster.min_interval_ms:
        mine, theirs = format_duration_ms(min_interval_ms), format_duration_ms(cluster.min_interval_ms)
        raise ConfigError(
            f"the cluster under {prefix} has a minimum interval of {theirs}, but this node was started with "
            f"--min-interval {mine} (SHARDCRON_MIN_INTERVAL); start it without the flag to use the cluster's, "
            f"or change the cluster's with `shardcron config --min-interval {mine}`"
        )
