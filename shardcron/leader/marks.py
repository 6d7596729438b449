"""The running mark every tick writes before its executor starts, group-committed.

A tick with a side effect is marked ``running`` in a fenced transaction before
its executor starts (``runner.py``): a stale leader's mark is rejected and its
work never starts. One transaction per tick made that the ceiling of a node's
dispatch rate (a few hundred a second: 64 worker threads took turns on
SQLite's write lock, or on PostgreSQL's commit flush). Here the marks of every
tick starting at the same moment, on every led shard, share one fenced
transaction (``store.tick_results.mark_running_many``), written on a thread of its own
(``marks``) so that a mark never queues behind blocked executors, and each tick still learns
its own fate: its shard's fence held (the mark is written; it may start), or
moved (``FencedOut`` for that shard's ticks alone), or the store failed
(``StoreUnavailable`` for the whole batch: none of them started).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from shardcron.errors import FencedOut
from shardcron.model import SlotRef
from shardcron.runtime.group_commit import GroupCommit
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.store import tick_results


@dataclass(frozen=True)
class RunningMark:
    shard: int
    fence: int
    slot: SlotRef
    attempt: int
    started_at_ms: int


class RunningMarks:
    """Used by the ticks' coroutines on the node's loop; ``close()`` ends the writer thread."""

    def __init__(self, engine: Engine, *, max_batch: int = 2048, lifeline: Lifeline = UNWATCHED):
        self._engine = engine
        # One batch at a time is written: one thread is all the batches need.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marks")
        self._batches: GroupCommit[RunningMark, None] = GroupCommit(
            self._write, max_batch=max_batch, pool=self._writer, name="marks-commit", lifeline=lifeline
        )

    @property
    def queued(self) -> int:
        return self._batches.queued

    async def mark(self, mark: RunningMark) -> None:
        """Write the mark, with whatever others are waiting. ``FencedOut``: the shard's fence moved."""
        await self._batches.submit(mark)

    def close(self) -> None:
        self._writer.shutdown(wait=False, cancel_futures=True)

    def _write(self, marks: list[RunningMark]) -> list[FencedOut | None]:
        groups: dict[tuple[int, int], list] = {}
        for m in marks:
            groups.setdefault((m.shard, m.fence), []).append((m.slot, m.attempt, m.started_at_ms))
        out = tick_results.mark_running_many(self._engine, groups)
        return [
            FencedOut(m.shard, m.fence, out.fenced_out[m.shard]) if out.is_fenced(m.shard, m.fence) else None
            for m in marks
        ]
