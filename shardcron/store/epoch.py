"""Which etcd cluster the stored fences came from, and the offset that keeps fences rising across clusters.

Fences are etcd revisions. If etcd is rebuilt from scratch or restored from an
old snapshot, its revisions restart below the fences in the store, and every
node would look stale forever. So the store records the etcd cluster id the
fences belong to. A node that meets another cluster id refuses to claim; the
operator's ``shardcron fences rebase`` then records the new cluster id and an
offset, the highest stored fence, that is added to every new election
revision. Effective fences therefore keep rising, and no history is rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, func, select

from shardcron.store.engine import reading, writing
from shardcron.store.schema import cluster_meta, shard_fences
from shardcron.store.sql import insert_ignoring_duplicates

CLUSTER_ID_KEY = "etcd_cluster_id"
OFFSET_KEY = "fence_offset"


@dataclass(frozen=True)
class FenceEpoch:
    cluster_id: int | None  # None until the first node records it
    offset: int  # added to every election revision to make a fence


def read_epoch(engine: Engine) -> FenceEpoch:
    with reading(engine) as conn:
        meta = dict(conn.execute(select(cluster_meta.c.key, cluster_meta.c.value)).all())
    cid = meta.get(CLUSTER_ID_KEY)
    return FenceEpoch(int(cid) if cid else None, int(meta.get(OFFSET_KEY, "0")))


def claim_epoch(engine: Engine, cluster_id: int) -> FenceEpoch:
    """Record ``cluster_id`` if no cluster is recorded yet (the first node); return what is recorded."""
    with writing(engine) as conn:
        insert_ignoring_duplicates(conn, cluster_meta, [{"key": CLUSTER_ID_KEY, "value": str(cluster_id)}])
    return read_epoch(engine)


def highest_fence(engine: Engine) -> int:
    with reading(engine) as conn:
        return int(conn.execute(select(func.coalesce(func.max(shard_fences.c.fence), 0))).scalar_one())


def rebase(engine: Engine, new_cluster_id: int) -> FenceEpoch:
    """Move the stored fences onto a new etcd cluster: every new fence will exceed every stored one."""
    with writing(engine) as conn:
        # Lock the fence rows so no fenced write interleaves with the rebase.
        rows = conn.execute(select(shard_fences.c.fence).with_for_update()).scalars().all()
        offset = max(rows, default=0)
        for key, value in ((CLUSTER_ID_KEY, str(new_cluster_id)), (OFFSET_KEY, str(offset))):
            updated = conn.execute(cluster_meta.update().where(cluster_meta.c.key == key).values(value=value))
            if updated.rowcount == 0:
                conn.execute(cluster_meta.insert().values(key=key, value=value))
    return FenceEpoch(new_cluster_id, offset)
