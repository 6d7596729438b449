"""Running a batch of one tick write (``tick_statements``) on a connection, in its dialect's form.

A ``DOCUMENT`` statement (PostgreSQL, SQLite) takes a whole batch as one
parameter, a JSON array of arrays (one per row, fields by position) that
orjson writes in C and the database reads as typed columns (PostgreSQL's
``jsonb_array_elements``, SQLite's ``json_each``). Its text never changes, so
it is compiled once and prepared once. Why not an executemany: that costs
Python work per row twice, as SQLAlchemy builds and processes each row's
parameters and the driver sends (PostgreSQL) or steps (SQLite) one statement
per row; at thousands of ticks a second that was a third of a node's CPU
(py-spy, ``bench throughput``). (Arrays, one per column, were tried first on
PostgreSQL: psycopg's list dumper is Python, element by element, and cost half
of what was saved.) An ``EACH`` statement (MariaDB) is that executemany, and a
``KEYS`` statement takes a chunk of keys as one IN list.

How a batch is run keeps what the statements guarantee (``tick_statements``):

- a claim returns exactly the slots it inserted. On MariaDB, which has no
  INSERT ... ON CONFLICT DO NOTHING RETURNING, one SELECT per 500 slots finds
  the slots that already have a tick and the rest go in as one plain INSERT:
  if another transaction of this leader inserted one of them since the
  SELECT, the INSERT fails and ``fences.run_fenced_many`` runs the whole unit
  again, whose SELECT then sees that row;
- claims go in in key order, so two claimants lock keys in one order;
- one UPDATE cannot apply two rows to the same tick in order (the database
  would apply one of them, either), so a ``DOCUMENT`` batch that names a tick
  twice (a failed attempt and the retry's result) is sent in rounds: the first
  mention of every tick, then the second, in the order given, as an
  executemany (``EACH``) applies them.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

import orjson
from sqlalchemy import Connection, bindparam, select, tuple_

from shardcron.store.schema import ticks
from shardcron.store.sql import chunks
from shardcron.store.tick_statements import SQLITE, Form, Statement, TickWrite, dialect_of

# One row of a batch: the fields of a claim or an update, by position (job id and slot first).
BatchRow = tuple[object, ...]
TickKey = tuple[str, int]  # (job_id, scheduled_at_ms): a tick's identity

# Enough that a statement's own cost is spread thin; few enough that a batch of results with 64 KiB of output
# each stays a 64 MiB document, far below PostgreSQL's 1 GiB parameter limit.
_ROWS_PER_STATEMENT = 1000


def update_rows(conn: Connection, write: TickWrite, rows: Sequence[BatchRow]) -> None:
    """``write`` (``Kind.UPDATE_ROWS``) over ``rows``, tuples of its ``row`` fields, applied in the order given."""
    statement = write.on(conn)
    if statement.form is Form.EACH:
        conn.execute(statement.clause, [dict(zip(write.row, r, strict=True)) for r in rows])
        return
    for round_rows in _rounds(rows):
        for part in chunks(round_rows, _ROWS_PER_STATEMENT):
            conn.execute(statement.clause, {"rows": _document(part)})


def update_row(conn: Connection, write: TickWrite, row: BatchRow) -> int:
    """``write`` (``Kind.UPDATE_ROWS``) over one row; returns the rows it changed (0 or 1)."""
    statement = write.on(conn)
    if statement.form is Form.EACH:
        return conn.execute(statement.clause, dict(zip(write.row, row, strict=True))).rowcount
    return conn.execute(statement.clause, {"rows": _document([row])}).rowcount


def update_keys(conn: Connection, write: TickWrite, keys: Sequence[TickKey], shared: Mapping[str, object]) -> None:
    """``write`` (``Kind.UPDATE_KEYS``) over the ticks ``keys`` names, with its ``shared`` binds."""
    statement = write.on(conn)
    for part in chunks(keys):
        conn.execute(statement.clause, {"keys": list(part), **shared})


def insert_rows(
    conn: Connection, write: TickWrite, rows: Sequence[BatchRow], shared: Mapping[str, object]
) -> set[TickKey]:
    """``write`` (``Kind.INSERT``) for each row whose slot has no tick, in key order; returns the keys inserted.
    ``rows``: tuples of its ``row`` fields, each slot once."""
    statement = write.on(conn)
    if statement.form is Form.EACH:
        return _insert_absent(conn, write, statement, rows, shared)
    inserted: set[TickKey] = set()
    for part in chunks(sorted(rows, key=_KEY_OF_ROW), _ROWS_PER_STATEMENT):
        binds = {"rows": _document(part), **shared}
        if dialect_of(conn) == SQLITE and _inserted_all(conn, statement, binds, len(part)):
            inserted.update(map(_KEY_OF_ROW, part))
            continue
        assert statement.returning is not None, f"{write.name}: a DOCUMENT insert reports what it inserted"
        inserted.update((job_id, at) for job_id, at in conn.execute(statement.returning, binds))
    return inserted


def _inserted_all(conn: Connection, statement: Statement, binds: Mapping[str, object], count: int) -> bool:
    """Insert without RETURNING under a savepoint, kept only if every row went in: then the inserted
    keys are the ones given, and no row comes back through the driver (on SQLite, building and
    fetching them cost as much as a sixth of the insert). A slot that already had a row (a replay
    after a takeover) undoes it, and the caller inserts again with RETURNING."""
    savepoint = conn.begin_nested()
    if conn.execute(statement.clause, binds).rowcount == count:
        savepoint.commit()
        return True
    savepoint.rollback()
    return False


def _insert_absent(
    conn: Connection, write: TickWrite, statement: Statement, rows: Sequence[BatchRow], shared: Mapping[str, object]
) -> set[TickKey]:
    """The ``EACH`` form of an insert (see the module doc): the keys of ``rows`` it inserted."""
    by_key = {_key_of(r): r for r in rows}
    taken: set[TickKey] = set()
    for part in chunks(sorted(by_key)):
        taken.update((job_id, at) for job_id, at in conn.execute(_TICKS_PRESENT, {"keys": list(part)}))
    new = [k for k in sorted(by_key) if k not in taken]
    if new:
        # A plain INSERT, not one that ignores duplicates: a slot is returned to exactly one claimant, ever.
        conn.execute(statement.clause, [{**dict(zip(write.row, by_key[k], strict=True)), **shared} for k in new])
    return set(new)


# Which of the given (job_id, scheduled_at_ms) keys have a tick. Built once, keys
# bound at execution: a statement built per call with 500 literal pairs cost
# more than the round trip.
_TICKS_PRESENT = select(ticks.c.job_id, ticks.c.scheduled_at_ms).where(
    tuple_(ticks.c.job_id, ticks.c.scheduled_at_ms).in_(bindparam("keys", expanding=True))
)


def _key_of(row: BatchRow) -> TickKey:
    return cast(TickKey, _KEY_OF_ROW(row))


_KEY_OF_ROW = operator.itemgetter(0, 1)  # job id and slot, in C: a key function per row is Python code


def _document(rows: Sequence[BatchRow]) -> str:
    """``rows`` as one JSON array of arrays. orjson refuses a string that is not valid UTF-8 (a lone
    surrogate from a decoded process output, say), which the standard library escapes instead."""
    try:
        return orjson.dumps(rows).decode()
    except orjson.JSONEncodeError:
        return json.dumps(rows)


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


__all__ = ["BatchRow", "TickKey", "insert_rows", "update_keys", "update_row", "update_rows"]
