"""The soak's session job: ``target = "tests.support.soak_target:record_effect"``, ``session = true``.

Nodes admit it with ``--allow-python tests.support.soak_target``. Each run
inserts one row into ``user_effects`` (``tests/support/pyjobs.py``) through ``ctx.session``: the row commits
with the tick's ``succeeded`` result under the shard's fence, or not at all.
So the soak's checker expects exactly one row per succeeded slot, each
carrying the fence its slot's row was written under.
"""

from __future__ import annotations

from sqlalchemy import insert

from shardcron.executors.python import CallContext
from tests.support.pyjobs import effects, metadata  # the "user's" table: one row per effect, no unique key

TARGET = "tests.support.soak_target:record_effect"
ALLOW_PYTHON = "tests.support.soak_target"  # the node flag's value: this module only

__all__ = ["ALLOW_PYTHON", "TARGET", "effects", "metadata", "record_effect"]


def record_effect(ctx: CallContext) -> str:
    if ctx.session is None:
        raise RuntimeError("record_effect needs session = true in its executor table")
    ctx.session.execute(
        insert(effects).values(
            job_id=ctx.job_id, slot=ctx.scheduled_at_ms, fence=ctx.fence, node_id=ctx.node_id, attempt=ctx.attempt
        )
    )
    return f"effect of {ctx.job_id}@{ctx.scheduled_at_ms} under fence {ctx.fence}"
