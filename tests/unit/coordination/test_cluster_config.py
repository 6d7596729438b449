"""The cluster config's pure parts: what the first node writes, how a stored config reads (the old one
without ``min_interval_ms`` means 1s), merging keeps other keys, and which node flags disagree."""

from __future__ import annotations

import pytest

from shardcron.coordination.cluster_config import (
    ClusterConfig,
    check_agreement,
    min_interval_of,
    new_config,
    parse_config,
    with_min_interval,
)
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.view import ClusterView
from shardcron.errors import ConfigError
from shardcron.spec.bounds import DEFAULT_MIN_INTERVAL_MS


@pytest.mark.parametrize("flag_ms, stored_ms", [(None, 1000), (200, 200), (0, 0), (600_000, 600_000)])
def test_the_first_node_writes_its_flag_or_the_default(flag_ms, stored_ms):
    assert new_config(16, 123, flag_ms) == {"shards": 16, "created_at_ms": 123, "min_interval_ms": stored_ms}


@pytest.mark.parametrize(
    "stored, expected",
    [
        ({"shards": 8, "created_at_ms": 5}, ClusterConfig(8, DEFAULT_MIN_INTERVAL_MS, 5)),  # created before the key
        ({"shards": 8, "created_at_ms": 5, "min_interval_ms": 250}, ClusterConfig(8, 250, 5)),
        ({"shards": 8, "min_interval_ms": 0}, ClusterConfig(8, 0, None)),
        ({"shards": 8, "created_at_ms": "x", "other": [1]}, ClusterConfig(8, 1000, None)),
    ],
)
def test_a_stored_config_reads(stored, expected):
    assert parse_config(stored, "/c/config") == expected


@pytest.mark.parametrize(
    "stored, said",
    [
        ({"shards": 8, "min_interval_ms": -1}, "/c/config in etcd holds no valid min_interval_ms: -1"),
        ({"shards": 8, "min_interval_ms": "1s"}, "/c/config in etcd holds no valid min_interval_ms: '1s'"),
        ({"shards": 8, "min_interval_ms": True}, "/c/config in etcd holds no valid min_interval_ms: True"),
        ({"shards": 0}, "/c/config in etcd holds no valid shard count"),
        ({"min_interval_ms": 5}, "/c/config in etcd holds no valid shard count"),
        ([1, 2], "/c/config in etcd holds no valid cluster config"),
        (b"not json", "/c/config in etcd holds no valid cluster config"),
    ],
)
def test_a_broken_config_is_refused_naming_the_key_and_field(stored, said):
    with pytest.raises(ConfigError) as e:
        parse_config(stored, "/c/config")
    assert str(e.value).startswith(said)


def test_the_default_when_there_is_no_config_at_all():
    assert min_interval_of(None) == DEFAULT_MIN_INTERVAL_MS == 1000


@pytest.mark.parametrize(
    "stored",
    [
        {"shards": 4, "created_at_ms": 9},
        {"shards": 4, "created_at_ms": 9, "min_interval_ms": 1000, "future": {"x": 1}},
    ],
)
def test_changing_the_minimum_keeps_every_other_key(stored):
    changed = with_min_interval(stored, 200)
    assert changed == {**stored, "min_interval_ms": 200}
    assert "min_interval_ms" not in stored or stored["min_interval_ms"] == 1000  # the input is not modified


@pytest.mark.parametrize(
    "shards, flag_ms, said",
    [
        (16, None, None),  # no flag: the node takes the cluster's
        (16, 1000, None),  # the same value, given explicitly
        (
            32,
            None,
            "the cluster under /c has 16 shards, but this node was started with --shards 32; start it with --shards 16",
        ),
        (
            16,
            200,
            "the cluster under /c has a minimum interval of 1s, but this node was started with "
            "--min-interval 200ms (SHARDCRON_MIN_INTERVAL); start it without the flag to use the cluster's, "
            "or change the cluster's with `shardcron config --min-interval 200ms`",
        ),
        (16, 0, "the cluster under /c has a minimum interval of 1s, but this node was started with --min-interval 0ms"),
    ],
)
def test_a_node_must_agree_with_the_cluster(shards, flag_ms, said):
    cluster = ClusterConfig(16, 1000, 0)
    if said is None:
        check_agreement("/c", cluster, shards, flag_ms)
        return
    with pytest.raises(ConfigError) as e:
        check_agreement("/c", cluster, shards, flag_ms)
    assert str(e.value).startswith(said)


@pytest.mark.parametrize(
    "config, expected",
    [
        (None, None),  # not mirrored yet: the node falls back to what it read at start
        ({"shards": 4}, 1000),
        ({"shards": 4, "min_interval_ms": 200}, 200),
        ({"shards": 4, "min_interval_ms": "broken"}, 1000),  # a hand-broken value keeps the guard
    ],
)
def test_the_view_mirrors_the_minimum(config, expected):
    view = ClusterView(KeyLayout("/c"))
    view.config = config
    assert view.min_interval_ms == expected
