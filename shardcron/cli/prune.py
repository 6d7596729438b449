"""``shardcron db prune --before T``: delete old ticks by hand, as the leaders' ``--tick-retention`` does.

Safe beside running leaders: each batch is a ``fenced`` transaction under the
shard's current fence (read afresh for each batch), so it serialises with fence
raises like any leader write, and it deletes only what a leader's pruning may
(finished ticks, never a job's newest; ``store.retention``). Each batch first
records the shard's horizon, so the audit reads what was deleted as "pruned".
The horizon is held back to the shard's longest catch-up window, as the
leaders' is (``retention.prune_before_ms``). Batches are bounded and rested
between (``pruner.in_batches``), so the leaders' statements are not starved.
"""

from __future__ import annotations

import argparse
import threading

from sqlalchemy import Engine

from shardcron import clock
from shardcron.cli.args import whole
from shardcron.cli.common import parse_time_ms
from shardcron.cli.flags import add_db_flag
from shardcron.cli.store import open_store, require_head
from shardcron.clock import rfc3339_ms
from shardcron.errors import FencedOut
from shardcron.leader.pruner import in_batches
from shardcron.rules.retention import MAX_DELETE_BATCH, MIN_DELETE_BATCH, prune_before_ms
from shardcron.store.engine import describe_url
from shardcron.store.fences import read_fences
from shardcron.store.job_reads import load_shard_jobs
from shardcron.store.retention import prune_shard_batch

_FENCE_RACES = 3  # a batch refused because a new leader raised the fence is re-run under the new fence


def register(db_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``prune`` under ``shardcron db``."""
    p = db_sub.add_parser(
        "prune",
        help="delete finished ticks scheduled before a time, in small fenced batches",
        description="Delete finished ticks scheduled before --before, beside running leaders. "
        "Unfinished ticks and each job's newest tick are kept; the horizon is "
        "recorded per shard so `shardcron audit` reports the range as pruned.",
    )
    add_db_flag(p)
    p.add_argument(
        "--before",
        required=True,
        metavar="TIME",
        help="delete ticks scheduled before this: ISO-8601 or epoch ms (not in the future)",
    )
    p.add_argument(
        "--batch",
        type=whole(MIN_DELETE_BATCH, MAX_DELETE_BATCH),
        default=MIN_DELETE_BATCH,
        metavar="N",
        help=f"rows in the first DELETE; later ones are sized to ~50 ms each "
        f"({MIN_DELETE_BATCH}-{MAX_DELETE_BATCH}, default %(default)s)",
    )
    p.set_defaults(func=cmd_db_prune)


def cmd_db_prune(a: argparse.Namespace) -> int:
    before = parse_time_ms(a.before, "--before")
    now = clock.wall_ms()
    prune_before_ms(before, now, 0)  # refuses a time in the future, naming --before, before connecting
    engine = open_store(a.db, create=False)
    try:
        require_head(engine, describe_url(a.db))
        total, size = 0, a.batch
        held_back: dict[int, int] = {}
        for shard in sorted(read_fences(engine)):
            window = max((j.catchup_window_ms for j in load_shard_jobs(engine, shard)), default=0)
            horizon = prune_before_ms(before, now, window)
            if horizon < before:
                held_back[shard] = horizon

            def one_batch(limit: int, s: int = shard, h: int = horizon) -> int:
                return _batch(engine, s, h, limit, now)

            deleted, size = in_batches(one_batch, size=size, keep_going=lambda: True, rest=threading.Event().wait)
            total += deleted
    finally:
        engine.dispose()
    print(f"pruned {total} ticks scheduled before {rfc3339_ms(before)}; horizon recorded on every shard")
    for shard, horizon in held_back.items():
        print(f"shard {shard}: only before {rfc3339_ms(horizon)}, held back by a job's catch-up window")
    return 0


def _batch(engine: Engine, shard: int, horizon_ms: int, limit: int, now_ms: int) -> int:
    """One batch under the shard's current fence; re-run under the new one if a leader raised it meanwhile."""
    for attempt in range(1, _FENCE_RACES + 1):
        fence = read_fences(engine)[shard].fence
        try:
            return prune_shard_batch(
                engine, shard=shard, fence=fence, horizon_ms=horizon_ms, limit=limit, now_ms=now_ms
            )
        except FencedOut:
            if attempt == _FENCE_RACES:
                raise
    raise AssertionError("unreachable")


__all__ = ["cmd_db_prune", "register"]
