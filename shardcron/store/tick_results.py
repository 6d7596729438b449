"""Ticks' status changes under the shard's fence: running marks and attempts' results.

Each change touches only an unresolved tick of the writer's own shard and
fence, so a final status never moves and a deposed leader changes nothing.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, Update, and_, bindparam, or_

from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.store import ticks_batch
from shardcron.store.fences import run_fenced_many
from shardcron.store.schema import ticks
from shardcron.store.text import clip
from shardcron.store.ticks import ManyOutcome

_UNRESOLVED = (TickStatus.CLAIMED.value, TickStatus.RUNNING.value)


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
        (_MARK_RUNNING, _MARK_RUNNING_BATCH),
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
    return _update_own_unresolved(engine, groups, (_RECORD_RESULT, _RECORD_RESULT_BATCH), _result_row)


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
    return conn.execute(_RECORD_RESULT, dict(zip(_RECORD_RESULT_BATCH.names, row, strict=True))).rowcount


def _result_row(
    s: SlotRef, attempt: int, r: ExecutionResult, status: TickStatus, shard: int, fence: int
) -> ticks_batch.BatchRow:
    """A result's fields, in ``_RECORD_RESULT_BATCH.names``' order."""
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
    statements: tuple[Update, ticks_batch.BatchUpdate],
    row: Callable[..., ticks_batch.BatchRow],
) -> ManyOutcome:
    """``statements`` (an UPDATE of this fence's unresolved rows, run per row, and its one-statement forms from
    ``ticks_batch``) for every item of every live group, in one fenced transaction, in key order;
    ``row(*item, shard, fence)`` gives an item's bind values, in the order of the batch form's ``names``."""
    per_row, batched = statements
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return ManyOutcome({}, {})

    def work(conn: Connection, live: dict[tuple[int, int], Sequence[tuple[Any, ...]]]) -> dict[int, list[SlotRef]]:
        rows = _in_key_order([row(*item, shard, fence) for (shard, fence), items in live.items() for item in items])
        if rows and conn.dialect.name in ticks_batch.DIALECTS:
            ticks_batch.run_batch_update(conn, batched, rows)
        elif rows:
            conn.execute(per_row, [dict(zip(batched.names, r, strict=True)) for r in rows])
        return {shard: [item[0] for item in items] for (shard, _), items in live.items()}

    out = run_fenced_many(engine, groups, work)
    return ManyOutcome(out.value, out.fenced_out)


# The WHERE clause of the batched status updates: slot, shard and fence given per row.
_OWN_UNRESOLVED = and_(
    ticks.c.job_id == bindparam("b_job"),
    ticks.c.scheduled_at_ms == bindparam("b_at"),
    ticks.c.shard == bindparam("b_shard"),
    ticks.c.fence == bindparam("b_fence"),
    # Spelt out: an IN list cannot be used in an executemany.
    or_(*(ticks.c.status == s for s in _UNRESOLVED)),
)

_MARK_RUNNING = (
    ticks.update()
    .where(_OWN_UNRESOLVED)
    .values(status=TickStatus.RUNNING.value, attempt=bindparam("b_attempt"), started_at_ms=bindparam("b_started"))
)
_MARK_RUNNING_BATCH = ticks_batch.batch_update(
    {"b_attempt": "INTEGER", "b_started": "BIGINT"},
    {"status": f"'{TickStatus.RUNNING.value}'", "attempt": "v.b_attempt", "started_at_ms": "v.b_started"},
)
_RECORD_RESULT = (
    ticks.update()
    .where(_OWN_UNRESOLVED)
    .values(
        status=bindparam("b_status"),
        attempt=bindparam("b_attempt"),
        started_at_ms=bindparam("b_started"),
        finished_at_ms=bindparam("b_finished"),
        exit_code=bindparam("b_exit"),
        http_status=bindparam("b_http"),
        output=bindparam("b_output"),
        error=bindparam("b_error"),
    )
)


_RECORD_RESULT_BATCH = ticks_batch.batch_update(
    {
        "b_status": "TEXT",
        "b_attempt": "INTEGER",
        "b_started": "BIGINT",
        "b_finished": "BIGINT",
        "b_exit": "INTEGER",
        "b_http": "INTEGER",
        "b_output": "TEXT",
        "b_error": "TEXT",
    },
    {
        "status": "v.b_status",
        "attempt": "v.b_attempt",
        "started_at_ms": "v.b_started",
        "finished_at_ms": "v.b_finished",
        "exit_code": "v.b_exit",
        "http_status": "v.b_http",
        "output": "v.b_output",
        "error": "v.b_error",
    },
)


def _in_key_order(rows: Iterable[ticks_batch.BatchRow]) -> list[ticks_batch.BatchRow]:
    # Row locks taken in one order by every writer cannot deadlock each other. The executemany
    # (MariaDB) locks in this order; an UPDATE ... FROM a batch (ticks_batch) locks in the order its
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
