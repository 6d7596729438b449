"""A tick's success, written under the shard's fence in the caller's own transaction.

A Python job that takes a fenced session (``executors/python.py``) does its
SQL work in a transaction that shardcron opens; before it commits, this
function adds the tick's result to that same transaction. So the job's writes
and the tick's ``succeeded`` row commit together or not at all:

- a crash before the commit leaves neither: the tick is still ``running``, and
  the next leader retries the slot once (the job's writes never happened);
- a deposed leader finds a newer fence and its writes roll back;
- a second run of the slot (a retry after the first one committed) finds the
  row final, updates nothing, and its writes roll back too.

Why the fence is read only here, at the end: the share lock that this read
takes is held until the transaction ends, and a successor's ``raise_fence``
UPDATE waits for it. Taken while the job ran, it would stall a failover for
the whole run (or for ever, behind a stopped process).

After the commit the runner still passes the same result to the recorder.
Its UPDATE (``tick_statements.RECORD_RESULT``) matches only rows that are unresolved
under this fence, and the row is final now, so it changes nothing: harmless.
"""

from __future__ import annotations

from sqlalchemy import Connection

from shardcron.errors import FencedOut, ShardcronError
from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.store.fences import stored_fence_for_share
from shardcron.store.tick_results import record_result_in


class TickNotOwned(ShardcronError):
    """The tick is no longer unresolved under this fence (already final, or moved): nothing to commit it with."""

    def __init__(self, slot: SlotRef, fence: int):
        super().__init__(
            f"tick {slot.job_id}@{slot.scheduled_at_ms} is no longer unresolved under fence {fence} "
            "(already recorded, or taken over)"
        )
        self.slot = slot
        self.fence = fence


def record_success_in(
    conn: Connection, slot: SlotRef, attempt: int, result: ExecutionResult, *, shard: int, fence: int
) -> None:
    """In ``conn``'s open transaction: check ``fence`` and record the tick ``succeeded``. The caller commits.

    Raises ``FencedOut`` when the shard's fence is not ``fence`` any more, and
    ``TickNotOwned`` when the UPDATE did not change exactly one row; either
    way the caller must roll back.
    """
    stored = stored_fence_for_share(conn, shard)
    if stored != fence:
        raise FencedOut(shard, fence, stored)
    changed = record_result_in(conn, slot, attempt, result, TickStatus.SUCCEEDED, shard=shard, fence=fence)
    if changed != 1:
        raise TickNotOwned(slot, fence)


__all__ = ["TickNotOwned", "record_success_in"]
