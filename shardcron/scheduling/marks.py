"""The running mark every tick writes before its executor starts, group-committed.

A tick with a side effect is marked ``running`` in a fenced transaction before
its executor starts (``runner.py``): a stale leader's mark is rejected and its
work never starts. One transaction per tick made that the ceiling of a node's
dispatch rate (a few hundred a second: 64 worker threads took turns on
SQLite's write lock, or on PostgreSQL's commit flush). Here the marks of every
tick starting at the same moment, on every led shard, share one fenced
transaction (``store.ticks.mark_running_many``), and each tick still learns
its own fate: its shard's fence held (the mark is written; it may start), or
moved (``FencedOut`` for that shard's ticks alone), or the store failed
(``StoreUnavailable`` for the whole batch: none of them started).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Engine

from shardcron.errors import FencedOut
from shardcron.group_commit import GroupCommit
from shardcron.model import SlotRef
from shardcron.store import ticks as tick_store


@dataclass(frozen=True)
class RunningMark:
    shard: int
    fence: int
    slot: SlotRef
    attempt: int
    started_at_ms: int


class RunningMarks:
    def __init__(self, engine: Engine, *, max_batch: int = 512):
        self._engine = engine
        self._batches: GroupCommit[RunningMark, None] = GroupCommit(self._write, max_batch=max_batch)

    @property
    def queued(self) -> int:
        return self._batches.queued

    def mark(self, mark: RunningMark) -> None:
        """Write the mark, with whatever others are waiting. ``FencedOut``: the shard's fence moved."""
        self._batches.submit(mark)

    def _write(self, marks: list[RunningMark]) -> list[FencedOut | None]:
        groups: dict[tuple[int, int], list] = {}
        for m in marks:
            groups.setdefault((m.shard, m.fence), []).append((m.slot, m.attempt, m.started_at_ms))
        out = tick_store.mark_running_many(self._engine, groups)
        return [FencedOut(m.shard, m.fence, out.fenced_out[m.shard]) if out.is_fenced(m.shard, m.fence) else None
                for m in marks]
