"""The database side of a reshard: one transaction that moves every job to its new shard.

It runs while no shard has a leader (every node resigned on the reshard
request). It raises every shard's fence, of the old layout and the new, to
the cut-over fence, so a deposed leader that wakes up late is refused on any
shard; new leaders are elected at higher revisions and raise above it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, bindparam, select

from shardcron.errors import ConfigError
from shardcron.model import BackfillState
from shardcron.sharding import shard_for
from shardcron.store.engine import writing
from shardcron.store.fences import insert_missing_shards
from shardcron.store.schema import backfills, fence_log, jobs, shard_fences, ticks, unresolved
from shardcron.store.sql import chunks

RESHARD_NODE = "reshard"


@dataclass(frozen=True)
class CutOver:
    jobs_moved: int
    unresolved_moved: int


def cut_over(engine: Engine, *, new_count: int, fence: int, now_ms: int) -> CutOver:
    with writing(engine) as conn:
        insert_missing_shards(conn, new_count)
        rows = conn.execute(select(shard_fences.c.shard, shard_fences.c.fence).with_for_update()).all()
        ahead = [(k, f) for k, f in rows if f > fence]
        if ahead:
            raise ConfigError(
                f"cannot cut over: shard {ahead[0][0]} already has fence {ahead[0][1]} above the "
                f"cut-over fence {fence}: a node is leading it; is every node on this reshard?"
            )
        conn.execute(
            shard_fences.update()
            .where(shard_fences.c.fence < fence)
            .values(fence=fence, node_id=RESHARD_NODE, updated_at_ms=now_ms)
        )
        conn.execute(
            fence_log.insert(),
            [
                {"shard": k, "fence": fence, "node_id": RESHARD_NODE, "raised_at_ms": now_ms}
                for k, f in rows
                if f < fence
            ],
        )
        moves = [
            {"b_id": jid, "b_shard": shard_for(jid, new_count)}
            for jid, old in conn.execute(select(jobs.c.id, jobs.c.shard))
            if shard_for(jid, new_count) != old
        ]
        if moves:
            conn.execute(jobs.update().where(jobs.c.id == bindparam("b_id")).values(shard=bindparam("b_shard")), moves)
        # Unfinished ticks must be found by their job's new leader.
        unfinished = conn.execute(
            select(ticks.c.job_id, ticks.c.scheduled_at_ms, ticks.c.shard).where(unresolved(ticks.c.status))
        ).all()
        tick_moves = [
            {"b_job": j, "b_at": at, "b_shard": shard_for(j, new_count)}
            for j, at, old in unfinished
            if shard_for(j, new_count) != old
        ]
        for part in chunks(tick_moves):
            conn.execute(
                ticks.update()
                .where(ticks.c.job_id == bindparam("b_job"), ticks.c.scheduled_at_ms == bindparam("b_at"))
                .values(shard=bindparam("b_shard"), fence=fence),
                list(part),
            )
        # So must active backfills: the job's new leader continues them from their cursor.
        active = select(backfills.c.id, backfills.c.job_id, backfills.c.shard).where(
            backfills.c.state == BackfillState.ACTIVE.value
        )
        bf_moves = [
            {"b_bf": b, "b_shard": shard_for(j, new_count)}
            for b, j, old in conn.execute(active)
            if shard_for(j, new_count) != old
        ]
        if bf_moves:
            conn.execute(
                backfills.update()
                .where(backfills.c.id == bindparam("b_bf"))
                .values(shard=bindparam("b_shard"), fence=fence),
                bf_moves,
            )
        return CutOver(len(moves), len(tick_moves))
