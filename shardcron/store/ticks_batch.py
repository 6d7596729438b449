"""One-statement forms of the tick batch writes on PostgreSQL and SQLite: a batch bound as one JSON document.

An executemany costs Python work per row twice: SQLAlchemy builds and
processes each row's parameters, and the driver sends (PostgreSQL) or steps
(SQLite) one statement per row. At thousands of ticks a second that was a
third of a node's CPU (py-spy, ``bench throughput``). Here a batch is one
statement whose text never changes (so it is compiled once and prepared
once), and its rows are one parameter, a JSON array of arrays (one per row,
fields by position) that orjson writes in C and the database reads
as typed columns (PostgreSQL's ``jsonb_array_elements``, SQLite's
``json_each``). (Arrays, one per column, were
tried first on PostgreSQL: psycopg's list dumper is Python, element by
element, and cost half of what was saved.) MariaDB keeps the executemany
forms in ``ticks``: it has no INSERT ... ON CONFLICT DO NOTHING RETURNING.

The statements keep what the executemany forms guarantee (``ticks``):
- a claim inserts only slots without a row, and returns exactly the slots it
  inserted: ``ON CONFLICT DO NOTHING`` waits for a concurrent inserter of the
  same key (PostgreSQL; SQLite has one writer at a time) and, once that one
  commits, skips the slot, so a slot goes to one claimant ever. Rows go in in
  key order, as before, so two claimants lock keys in one order;
- an update touches only the unresolved rows of the given shard and fence.
  One UPDATE cannot apply two rows to the same tick in order (the database
  would apply one of them, either), so a batch that names a tick twice (a
  failed attempt and the retry's result) is sent in rounds: the first
  mention of every tick, then the second, in the order given, exactly as the
  executemany applied them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import orjson
from sqlalchemy import Connection, TextClause, text

from shardcron.store.schema import UNRESOLVED_SQL
from shardcron.store.sql import chunks

DIALECTS = frozenset({"postgresql", "sqlite"})

# One row of a batch: the fields of a claim or an update, by position (job id and slot first).
BatchRow = tuple[object, ...]

# The key every batched update matches on, with the SQL type of each bind: the first four fields of every row.
_KEY_BINDS = {"b_job": "TEXT", "b_at": "BIGINT", "b_shard": "INTEGER", "b_fence": "BIGINT"}
_UNRESOLVED_SQL = f"ticks.{UNRESOLVED_SQL}"
# PostgreSQL compares job ids byte for byte, as the column does (schema.exact_string); SQLite always does.
_EXACT = {"postgresql": ' COLLATE "C"', "sqlite": ""}


def _rows_of(dialect: str, columns: Mapping[str, str]) -> str:
    """A FROM item ``v`` with one typed column per field of the JSON arrays in ``:rows``, in order.

    Rows are arrays, not objects: a tuple is cheaper to build than a dict and
    ``json.dumps`` writes half the bytes (no key per field), and reading fields
    by position (jsonb on PostgreSQL) costs the server half what
    ``json_to_recordset`` took over objects.
    """
    if dialect == "postgresql":
        typed = ", ".join(
            f"CAST(e ->> {i} AS {sql_type}) AS {name}" for i, (name, sql_type) in enumerate(columns.items())
        )
        return f"(SELECT {typed} FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e) AS v"
    picked = ", ".join(f"value ->> {i} AS {name}" for i, name in enumerate(columns))
    return f"(SELECT {picked} FROM json_each(:rows)) AS v"


class BatchUpdate(NamedTuple):
    """An UPDATE of a fence's unresolved ticks from a batch of rows: each row a tuple of ``names``' values, in
    order (the tick's job id, slot, shard and fence, then the update's own binds); one statement per dialect."""

    names: tuple[str, ...]
    statements: dict[str, TextClause]


def batch_update(binds: Mapping[str, str], assignments: Mapping[str, str]) -> BatchUpdate:
    """``binds``: a row's own fields after the key -> SQL type; ``assignments``: column -> SQL expression over
    ``v.<bind>`` or a literal."""
    columns = {**_KEY_BINDS, **binds}
    sets = ", ".join(f"{column} = {value}" for column, value in assignments.items())
    return BatchUpdate(
        tuple(columns),
        {
            dialect: text(
                f"UPDATE ticks SET {sets} FROM {_rows_of(dialect, columns)} "
                f"WHERE ticks.job_id = v.b_job{_EXACT[dialect]} AND ticks.scheduled_at_ms = v.b_at "
                # "+ 0": the primary key finds each row; left indexable, PostgreSQL ANDs in the (shard, status)
                # index, whose range for a shard's unresolved rows holds every dead entry the status changes left
                # until vacuum, so each row's lookup grew with the table's churn (bench scale: the server's CPU per
                # tick tripled over a few minutes, and results fell minutes behind).
                f"AND ticks.shard + 0 = v.b_shard AND ticks.fence = v.b_fence AND {_UNRESOLVED_SQL}"
            )
            for dialect in DIALECTS
        },
    )


def _document(rows: Sequence[BatchRow]) -> str:
    """``rows`` as one JSON array of arrays. orjson refuses a string that is not valid UTF-8 (a lone
    surrogate from a decoded process output, say), which the standard library escapes instead."""
    try:
        return orjson.dumps(rows).decode()
    except orjson.JSONEncodeError:
        return json.dumps(rows)


def run_batch_update(conn: Connection, update: BatchUpdate, rows: Sequence[BatchRow]) -> None:
    """``update`` over ``rows`` (tuples of its ``names``), in rounds (see the module doc)."""
    statement = update.statements[conn.dialect.name]
    for round_rows in _rounds(rows):
        for part in chunks(round_rows, _ROWS_PER_STATEMENT):
            conn.execute(statement, {"rows": _document(part)})


def insert_claims(
    conn: Connection,
    slots: Sequence[tuple[str, int, int, int, bool]],
    *,
    node_id: str,
    status: str,
    now_ms: int,
    finished_at_ms: int | None,
    error: str | None,
) -> set[tuple[str, int]]:
    """Insert a tick for each (job_id, scheduled_at_ms, shard, fence, manual) without one, in key order;
    returns the (job_id, scheduled_at_ms) keys this statement inserted."""
    dialect = conn.dialect.name
    inserted: set[tuple[str, int]] = set()
    for part in chunks(sorted(slots), _ROWS_PER_STATEMENT):
        binds = {
            "rows": _document(part),
            "node_id": node_id,
            "status": status,
            "now_ms": now_ms,
            "finished_at_ms": finished_at_ms,
            "error": error,
        }
        if dialect == "sqlite" and _inserted_all(conn, binds, len(part)):
            inserted.update((job_id, at) for job_id, at, *_ in part)
            continue
        inserted.update((job_id, at) for job_id, at in conn.execute(_INSERT_CLAIMS_RETURNING[dialect], binds))
    return inserted


def _inserted_all(conn: Connection, binds: Mapping[str, object], count: int) -> bool:
    """Insert without RETURNING under a savepoint, kept only if every row went in: then the inserted
    keys are the ones given, and no row comes back through the driver (on SQLite, building and
    fetching them cost as much as a sixth of the insert). A slot that already had a row (a replay
    after a takeover) undoes it, and the caller inserts again with RETURNING."""
    savepoint = conn.begin_nested()
    if conn.execute(_INSERT_CLAIMS["sqlite"], binds).rowcount == count:
        savepoint.commit()
        return True
    savepoint.rollback()
    return False


# Enough that a statement's own cost is spread thin; few enough that a batch of results with 64 KiB of output
# each stays a 64 MiB document, far below PostgreSQL's 1 GiB parameter limit.
_ROWS_PER_STATEMENT = 1000

# Rows go in in key order so that two claimants lock keys in one order (PostgreSQL). SQLite
# has one writer at a time, and json_each yields the already sorted rows in order: a sort
# there would only cost a temporary B-tree per statement.
_IN_KEY_ORDER = {"postgresql": f"ORDER BY v.job_id{_EXACT['postgresql']}, v.at", "sqlite": ""}
_CLAIM_COLUMNS = {"job_id": "TEXT", "at": "BIGINT", "shard": "INTEGER", "fence": "BIGINT", "manual": "BOOLEAN"}
_INSERT_CLAIMS_SQL = {
    dialect: (
        "INSERT INTO ticks (job_id, scheduled_at_ms, shard, fence, manual, node_id, status, attempt, claimed_at_ms, "
        "finished_at_ms, error) "
        "SELECT v.job_id, v.at, v.shard, v.fence, v.manual, :node_id, :status, 0, :now_ms, "
        "CAST(:finished_at_ms AS BIGINT), CAST(:error AS TEXT) "
        f"FROM {_rows_of(dialect, _CLAIM_COLUMNS)} "
        # WHERE true: SQLite's grammar needs a WHERE before ON CONFLICT in an INSERT ... SELECT.
        f"WHERE true {_IN_KEY_ORDER[dialect]} "
        "ON CONFLICT DO NOTHING"
    )
    for dialect in DIALECTS
}
_INSERT_CLAIMS_RETURNING = {
    dialect: text(f"{sql} RETURNING job_id, scheduled_at_ms") for dialect, sql in _INSERT_CLAIMS_SQL.items()
}
_INSERT_CLAIMS = {dialect: text(sql) for dialect, sql in _INSERT_CLAIMS_SQL.items()}


def _rounds(rows: Iterable[BatchRow]) -> list[list[BatchRow]]:
    """Round n holds the n-th mention of each tick, in the order given."""
    rounds: list[list[BatchRow]] = []
    seen: dict[tuple[object, object], int] = {}
    for r in rows:
        key = (r[0], r[1])
        n = seen.get(key, 0)
        seen[key] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(r)
    return rounds
