"""Backfill rows on every database: written only under the current fence, counted from the ticks, moved
to the job's new shard by a reshard."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardcron.errors import FencedOut
from shardcron.model import Backfill, BackfillState, Overlap
from shardcron.rules.policies import OVERLAP_SKIP_REASON
from shardcron.sharding import shard_for
from shardcron.store import backfills as store
from shardcron.store.fences import ensure_shards, raise_fence
from shardcron.store.reshard import cut_over
from shardcron.store.ticks import SlotClaim, claim_ticks, skip_ticks

S = 1000
CREATED = 1_000_000
JOB = next(j for j in (f"job-{i}" for i in range(100)) if shard_for(j, 4) != shard_for(j, 8))


def test_backfill_rows_are_fenced_recounted_and_moved_by_a_reshard(store_engine):
    e, shard = store_engine, shard_for(JOB, 4)
    ensure_shards(e, 4)
    raise_fence(e, shard, 10, "a", 0)
    bf = store.create_backfill(
        e,
        Backfill(store.new_backfill_id(), JOB, shard, 0, 10 * S, Overlap.SKIP, 5.0, 9, CREATED),
        fence=10,
        node_id="a",
    )
    assert store.get_backfill(e, bf.id) == bf and store.active_backfills(e, shard) == [bf]
    with pytest.raises(FencedOut):  # a deposed leader's backfill is never stored
        store.create_backfill(e, replace(bf, id=store.new_backfill_id()), fence=9, node_id="old")
    assert store.list_backfills(e, job_id=JOB) == [bf]

    kw = dict(shard=shard, fence=10, node_id="a")
    claim_ticks(e, [SlotClaim(JOB, 0)], now_ms=CREATED - 1, **kw)  # the live schedule's, before the backfill
    claim_ticks(e, [SlotClaim(JOB, S), SlotClaim(JOB, 2 * S), SlotClaim(JOB, 2 * S, manual=True)], now_ms=CREATED, **kw)
    skip_ticks(e, [SlotClaim(JOB, 3 * S)], now_ms=CREATED + 5, reason=OVERLAP_SKIP_REASON, **kw)
    counted = store.recount(e, bf)
    assert (counted.done, counted.skipped) == (3, 1)
    assert store.recorded_slots(e, JOB, 0, 10 * S) == {0, S, 2 * S, 3 * S}

    store.save_progress(e, replace(counted, cursor_ms=3 * S), fence=10, node_id="a", now_ms=CREATED + 10)
    raise_fence(e, shard, 11, "b", CREATED + 20)
    with pytest.raises(FencedOut):  # once a successor raised the fence, the old leader writes nothing
        store.save_progress(
            e, replace(counted, cursor_ms=9 * S, state=BackfillState.DONE), fence=10, node_id="a", now_ms=CREATED + 30
        )
    got = store.get_backfill(e, bf.id)
    assert (got.cursor_ms, got.done, got.state, got.fence) == (3 * S, 3, BackfillState.ACTIVE, 10)

    cut_over(e, new_count=8, fence=100, now_ms=CREATED + 40)
    moved = store.get_backfill(e, bf.id)
    assert moved.shard == shard_for(JOB, 8) != shard and moved.fence == 100
    assert store.active_backfills(e, moved.shard) == [moved] and store.active_backfills(e, shard) == []
