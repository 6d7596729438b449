"""The soak's session job: ``target = "tests.support.soak_target:record_effect"``, ``session = true``.

Nodes admit it with ``--allow-python tests.support.soak_target``. Each run
inserts one row into ``soak_effects`` through ``ctx.session``: the row commits
with the tick's ``succeeded`` result under the shard's fence, or not at all.
So the soak's checker expects exactly one row per succeeded slot, each
carrying the fence its slot's row was written under.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, insert

from shardcron.executors.python import CallContext

TARGET = "tests.support.soak_target:record_effect"
ALLOW_PYTHON = "tests.support.soak_target"  # the node flag's value: this module only

metadata = MetaData()

# No unique key on (job_id, slot_ms): a slot's effect written twice must show up as two rows.
effects = Table(
    "soak_effects", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(300), nullable=False),
    Column("slot_ms", BigInteger, nullable=False),
    Column("node", String(100), nullable=False),
    Column("fence", BigInteger, nullable=False),
)


def record_effect(ctx: CallContext) -> str:
    if ctx.session is None:
        raise RuntimeError("record_effect needs session = true in its executor table")
    ctx.session.execute(insert(effects).values(job_id=ctx.job_id, slot_ms=ctx.scheduled_at_ms, node=ctx.node_id,
                                               fence=ctx.fence))
    return f"effect of {ctx.job_id}@{ctx.scheduled_at_ms} under fence {ctx.fence}"
