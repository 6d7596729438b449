"""Ticks' status changes under the shard's fence: running marks and attempts' results.

Each change touches only an unresolved tick of the writer's own shard and
fence, so a final status never moves and a deposed leader changes nothing
(the statements, one per database, are in ``tick_statements``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Engine

from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.store import tick_statements, ticks_batch
from shardcron.store.fences import run_fenced_many
from shardcron.store.text import clip
from shardcron.store.ticks import ManyOutcome


def mark_running(engine: Engine, updates: Sequence[tuple[SlotRef, int, int]], *, shard: int, fence: int) -> None:
    """(slot, attempt, started_at_ms) -> ``running``, for unresolved ticks under this fence."""
    mark_running_many(engine, {(shard, fence): updates}).written_for(shard, fence)


def mark_running_many(
    engine: Engine, groups: Mapping[tuple[int, int], Sequence[tuple[SlotRef, int, int]]]
) -> ManyOutcome:
    """``mark_running`` for several shards in one transaction: ``{(shard, fence): [(slot, attempt, started)]}``."""
    return _update_own_unresolved(
        engine,
        groups,
        tick_statements.MARK_RUNNING,
        lambda s, attempt, started, shard, fence: (s.job_id, s.scheduled_at_ms, shard, fence, attempt, started),
    )


def record_results(
    engine: Engine,
    results: Sequence[tuple[SlotRef, int, ExecutionResult, TickStatus]],
    *,
    shard: int,
    fence: int,
) -> None:
    """Record each attempt's outcome: (slot, attempt, result, new status).

    The new status is normally final (succeeded, failed); ``running`` records a
    failed attempt that will be retried, and leaves finished_at_ms unset.
    Output and error are cut to ``model.OUTPUT_LIMIT_BYTES``.
    """
    record_results_many(engine, {(shard, fence): results}).written_for(shard, fence)


def record_results_many(
    engine: Engine, groups: Mapping[tuple[int, int], Sequence[tuple[SlotRef, int, ExecutionResult, TickStatus]]]
) -> ManyOutcome:
    """``record_results`` for several shards in one transaction: ``{(shard, fence): results}``."""
    return _update_own_unresolved(engine, groups, tick_statements.RECORD_RESULT, _result_row)


def record_result_in(
    conn: Connection,
    slot: SlotRef,
    attempt: int,
    result: ExecutionResult,
    status: TickStatus,
    *,
    shard: int,
    fence: int,
) -> int:
    """``record_results``' UPDATE for one tick, in the caller's open transaction; returns the rows it changed.

    It checks no fence itself: the caller holds the shard's fence row FOR
    SHARE (``fences.stored_fence_for_share``). 1 when the tick was still
    unresolved under ``fence``; 0 when it was not (final, or another fence's).
    """
    row = _result_row(slot, attempt, result, status, shard, fence)
    return ticks_batch.update_row(conn, tick_statements.RECORD_RESULT, row)


def _result_row(
    s: SlotRef, attempt: int, r: ExecutionResult, status: TickStatus, shard: int, fence: int
) -> ticks_batch.BatchRow:
    """A result's fields, in the order of ``tick_statements.RECORD_RESULT.row``."""
    if type(status) is not TickStatus:
        status = TickStatus(status)
    # Identity tests and _value_, not is_final and .value: an Enum member's hash and its value property
    # are Python code, and this runs once per tick.
    unfinished = status is TickStatus.RUNNING or status is TickStatus.CLAIMED
    return (
        s.job_id,
        s.scheduled_at_ms,
        shard,
        fence,
        status._value_,
        attempt,
        r.started_at_ms,
        None if unfinished else r.finished_at_ms,
        r.exit_code,
        r.http_status,
        r.output and clip(r.output),
        r.error and clip(r.error),
    )


def _update_own_unresolved(
    engine: Engine,
    groups: Mapping[tuple[int, int], Sequence[tuple[Any, ...]]],
    write: tick_statements.TickWrite,
    row: Callable[..., ticks_batch.BatchRow],
) -> ManyOutcome:
    """``write`` (an update of this fence's unresolved rows) for every item of every live group, in one fenced
    transaction, in key order; ``row(*item, shard, fence)`` gives an item's fields, in the order of its ``row``."""
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return ManyOutcome({}, {})

    def work(conn: Connection, live: dict[tuple[int, int], Sequence[tuple[Any, ...]]]) -> dict[int, list[SlotRef]]:
        rows = _in_key_order([row(*item, shard, fence) for (shard, fence), items in live.items() for item in items])
        if rows:
            ticks_batch.update_rows(conn, write, rows)
        return {shard: [item[0] for item in items] for (shard, _), items in live.items()}

    out = run_fenced_many(engine, groups, work)
    return ManyOutcome(out.value, out.fenced_out)


def _in_key_order(rows: Iterable[ticks_batch.BatchRow]) -> list[ticks_batch.BatchRow]:
    # Row locks taken in one order by every writer cannot deadlock each other. The executemany
    # (MariaDB) locks in this order; an UPDATE ... FROM a JSON document locks in the order its
    # plan visits the rows, so there a deadlock, if two writers ever cross, is broken by the server
    # and the unit re-run by fences.run_fenced_many.
    return sorted(rows, key=_KEY_OF_ROW)


_KEY_OF_ROW = operator.itemgetter(0, 1)  # job id and slot, in C: a lambda here was 4 % of a node's CPU


__all__ = [
    "mark_running",
    "mark_running_many",
    "record_result_in",
    "record_results",
    "record_results_many",
]
