"""``shardcron reshard --shards N``: change the shard count of a running cluster.

The steps, each one safe to repeat if the command is interrupted and run again:

1. **request**: put ``<prefix>/reshard`` = {from, to, state: "draining"}. Every
   node sees it and hands every shard over as on shutdown (running ticks
   finish, the rest of their claims stay in the store), but stays up.
2. **wait** until no shard has a candidate left.
3. **cut over** in the database, in one transaction: every shard's fence is
   raised to the current etcd revision (a deposed leader that wakes up late is
   refused everywhere), every job moves to ``shard_for(id, N)``, unfinished
   ticks follow their jobs.
4. **publish**: ``<prefix>/config`` gets the new count and the request is
   deleted. Nodes rebuild their shard table and campaign again; each new
   leader resumes every job from its last recorded tick, so no slot is lost
   or doubled (the gap is caught up under the jobs' catch-up policy).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from shardcron import clock
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.errors import ConfigError, ShardcronError
from shardcron.store.epoch import read_epoch
from shardcron.store.reshard import cut_over


class ReshardError(ShardcronError):
    pass


def read_request(etcd: Etcd, layout: KeyLayout) -> dict[str, Any] | None:
    kv = etcd.get(layout.reshard)
    return json.loads(kv.value) if kv else None


def reshard(
    etcd: Etcd,
    layout: KeyLayout,
    engine: Engine,
    new_count: int,
    *,
    timeout_s: float = 120.0,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    if new_count <= 0:
        raise ConfigError(f"--shards must be positive, got {new_count}")
    kv = etcd.get(layout.config)
    if kv is None:
        raise ConfigError(f"no cluster under {layout.prefix}: start a node first")
    current = json.loads(kv.value)["shards"]
    request = read_request(etcd, layout)
    if request is None:
        if current == new_count:
            say(f"the cluster already has {new_count} shards; nothing to do")
            return {"from": current, "to": new_count, "changed": False}
        request = {"from": current, "to": new_count, "state": "draining", "requested_at_ms": clock.wall_ms()}
        created, _ = etcd.put_if_absent(layout.reshard, json.dumps(request).encode())
        if not created:
            request = read_request(etcd, layout)
            if request is None:
                raise ReshardError("another reshard request came and went while this one was made; run it again")
    if request["to"] != new_count:
        raise ReshardError(
            f"a reshard from {request['from']} to {request['to']} is in progress; finish it with "
            f"`shardcron reshard --shards {request['to']}` or cancel it with `--abort`"
        )
    say(f"resharding {request['from']} -> {new_count}: nodes are handing their shards over")

    deadline = time.monotonic() + timeout_s
    while True:
        _, kvs = etcd.get_prefix(layout.shards)
        if not kvs:
            break
        if time.monotonic() > deadline:
            raise ReshardError(
                f"{len(kvs)} shard candidate keys remain after {timeout_s:.0f}s; is a node stuck? "
                "Run the command again to keep waiting, or --abort"
            )
        time.sleep(0.2)  # the command waits for other processes' keys to go

    cluster_id, revision = etcd.status()
    epoch = read_epoch(engine)
    if epoch.cluster_id not in (None, cluster_id):
        raise ReshardError("the store's fences belong to another etcd cluster: run `shardcron fences rebase` first")
    result = cut_over(engine, new_count=new_count, fence=revision + epoch.offset, now_ms=clock.wall_ms())
    etcd.put(layout.reshard, json.dumps({**request, "state": "cut-over"}).encode())
    say(
        f"cut over at fence {revision + epoch.offset}: {result.jobs_moved} jobs moved shard, "
        f"{result.unresolved_moved} unfinished ticks followed them"
    )
    # Read again, not the copy from the start: a `shardcron config` change that
    # committed before the request existed must survive (none can commit after it).
    kv = etcd.get(layout.config) or kv
    config = json.loads(kv.value)
    config["shards"] = new_count
    etcd.put(layout.config, json.dumps(config).encode())
    etcd.delete(layout.reshard)
    say(f"done: the cluster has {new_count} shards")
    return {"from": request["from"], "to": new_count, "changed": True, "jobs_moved": result.jobs_moved}


def abort(etcd: Etcd, layout: KeyLayout) -> bool:
    """Cancel a request that has not cut over yet: nodes take their shards again."""
    request = read_request(etcd, layout)
    if request and request.get("state") == "cut-over":
        raise ReshardError(
            f"the database already cut over to {request['to']} shards; finish with "
            f"`shardcron reshard --shards {request['to']}`"
        )
    return etcd.delete(layout.reshard)
