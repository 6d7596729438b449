"""Every leader write of ``ticks`` rows, in one table: each write's one statement per dialect, and the fence condition.

``WRITES`` names them: ``claim`` (new ``claimed`` or ``skipped`` ticks), ``mark_running``, ``record_result``,
``adopt`` (a takeover) and ``abandon``. Each is a ``TickWrite``: what one row of its batch holds, what the
whole batch shares, and its statement on PostgreSQL, SQLite and MariaDB, in one of three forms (``Form``):

* ``DOCUMENT`` (PostgreSQL, SQLite): one statement per batch, its rows bound as one JSON document
  (``ticks_batch`` runs it, and says why);
* ``EACH`` (MariaDB): an executemany, one set of binds per row. MariaDB has no INSERT ... ON CONFLICT DO
  NOTHING RETURNING, so a claim there reads which slots have a row first (``ticks_batch``);
* ``KEYS`` (every dialect alike): the writes of one shard that name their ticks by key alone, a chunk of
  keys bound as one expanding IN list.

What the statements guarantee:

* every write that changes existing rows has one WHERE for which rows it may touch, ``fenced_rows``: the
  writer's own shard, the fences its ``Reach`` admits, and unresolved rows only, so a final status never
  moves and a deposed leader's rows are not another leader's to change until adopted;
* a claim inserts only slots without a row (ON CONFLICT DO NOTHING: PostgreSQL waits for a concurrent
  inserter of the same key and then skips the slot; SQLite has one writer at a time; MariaDB's plain INSERT
  fails on such a race and the unit is run again), so a slot goes to one claimant ever; rows go in in key
  order, so two claimants lock keys in one order;
* job ids compare byte for byte, as the column does (``schema.exact_string``).

The other writes of ``ticks`` are not a leader's: a reshard's cut-over moves unresolved ticks to their new
shard (``reshard``), and the pruner deletes final ones (``retention``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from sqlalchemy import BigInteger, Connection, String, TextClause, bindparam, text
from sqlalchemy.types import TupleType

from shardcron.model import TickStatus
from shardcron.store.schema import UNRESOLVED_SQL

POSTGRESQL, SQLITE, MARIADB = "postgresql", "sqlite", "mariadb"
DIALECTS = (POSTGRESQL, SQLITE, MARIADB)


def dialect_of(conn: Connection) -> str:
    """The table's name for ``conn``'s database: SQLAlchemy calls MariaDB ``mysql`` or ``mariadb``, by the URL."""
    name = conn.dialect.name
    return MARIADB if name in ("mysql", "mariadb") else name


class Reach(Enum):
    """Which fences' rows a write may change (always only its own shard's, and only unresolved ones)."""

    OWN = "="  # the writer's own rows: running marks and results
    ORPHANS = "<"  # older fences' rows, never its own: a takeover adopts them
    OWN_AND_ORPHANS = "<="  # either: an abandon gives up on both


def fenced_rows(reach: Reach, *, shard: str, fence: str) -> str:
    """The fence condition: the ``ticks`` rows a write of ``reach`` by the leader of ``shard`` under ``fence``
    may change; ``shard`` and ``fence`` are SQL (a bind, or a column of a batch's rows)."""
    return (
        # "+ 0": every write finds its rows by primary key; left indexable, PostgreSQL ANDs in the (shard,
        # status) index, whose range for a shard's unresolved rows holds every dead entry the status changes
        # left until vacuum, so each row's lookup grew with the table's churn (bench scale: the server's CPU
        # per tick tripled over a few minutes, and results fell minutes behind).
        f"ticks.shard + 0 = {shard} AND ticks.fence {reach.value} {fence} "
        # The statuses as literals (schema.UNRESOLVED_SQL), which the partial index's planners need to see.
        f"AND ticks.{UNRESOLVED_SQL}"
    )


class Form(Enum):
    """How a statement takes its batch (see the module doc)."""

    DOCUMENT = "document"  # one statement per batch: the rows are the JSON document ``:rows``
    EACH = "each"  # an executemany: one set of binds per row
    KEYS = "keys"  # one statement per chunk of keys: the expanding ``:keys``, with the batch's shared binds


class Kind(Enum):
    """What a write does, and so how its batch is given and run (``ticks_batch``)."""

    INSERT = "insert"  # new rows for the slots that have none; returns the slots it inserted
    UPDATE_ROWS = "update rows"  # each row names its tick, shard and fence, and carries its own values
    UPDATE_KEYS = "update keys"  # the batch names one shard and fence, and its ticks by key alone


class Statement(NamedTuple):
    form: Form
    clause: TextClause
    # An INSERT that reports the keys it inserted (INSERT ... RETURNING), where the dialect has one.
    returning: TextClause | None = None


@dataclass(frozen=True)
class TickWrite:
    """One write of ``ticks`` rows: its batch's shape and its one statement per dialect."""

    name: str
    kind: Kind
    reach: Reach | None  # None: an insert, which changes no existing row
    row: Mapping[str, str]  # the fields of one row of the batch, in order -> SQL type; job id and slot first
    shared: Mapping[str, str]  # the binds the whole batch shares -> SQL type
    statements: Mapping[str, Statement]  # dialect (``DIALECTS``) -> its statement

    def on(self, conn: Connection) -> Statement:
        """The statement for ``conn``'s database."""
        return self.statements[dialect_of(conn)]


# The fields every batched update's row starts with: the tick's key, then the writer's shard and fence.
_TICK_ROW = {"b_job": "TEXT", "b_at": "BIGINT", "b_shard": "INTEGER", "b_fence": "BIGINT"}
# PostgreSQL compares job ids byte for byte, as the column does (schema.exact_string); SQLite always does.
_EXACT = {POSTGRESQL: ' COLLATE "C"', SQLITE: ""}


def _document_rows(dialect: str, row: Mapping[str, str]) -> str:
    """A FROM item ``v`` with one typed column per field of the JSON arrays in ``:rows``, in order.

    Rows are arrays, not objects: a tuple is cheaper to build than a dict and
    its JSON is half the bytes (no key per field), and reading fields by
    position (jsonb on PostgreSQL) costs the server half what
    ``json_to_recordset`` took over objects.
    """
    if dialect == POSTGRESQL:
        typed = ", ".join(f"CAST(e ->> {i} AS {sql_type}) AS {name}" for i, (name, sql_type) in enumerate(row.items()))
        return f"(SELECT {typed} FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e) AS v"
    picked = ", ".join(f"value ->> {i} AS {name}" for i, name in enumerate(row))
    return f"(SELECT {picked} FROM json_each(:rows)) AS v"


def _document_refs(row: Mapping[str, str], shared: Mapping[str, str]) -> dict[str, str]:
    """How a DOCUMENT statement names each value: a row's field as ``v``'s column, a shared bind as itself
    (cast: PostgreSQL cannot tell the type of a NULL bound alone)."""
    return {**{name: f"v.{name}" for name in row}, **{name: f"CAST(:{name} AS {t})" for name, t in shared.items()}}


def _each_refs(row: Mapping[str, str], shared: Mapping[str, str]) -> dict[str, str]:
    """How an EACH or KEYS statement names each value: every one a bind."""
    return {name: f":{name}" for name in (*row, *shared)}


def _assign(assignments: Mapping[str, str], refs: Mapping[str, str]) -> str:
    """``SET`` items: ``assignments`` maps a column to SQL in which ``{name}`` is a row field or shared bind."""
    return ", ".join(f"{column} = {value.format_map(refs)}" for column, value in assignments.items())


def _update_rows(name: str, own: Mapping[str, str], assignments: Mapping[str, str]) -> TickWrite:
    """An update of the writer's own unresolved ticks, each row naming its tick, shard and fence, then ``own``
    fields; ``assignments``: column -> SQL over ``{field}`` or a literal."""
    row = {**_TICK_ROW, **own}

    def from_document(dialect: str) -> Statement:
        refs = _document_refs(row, {})
        return Statement(
            Form.DOCUMENT,
            text(
                f"UPDATE ticks SET {_assign(assignments, refs)} FROM {_document_rows(dialect, row)} "
                f"WHERE ticks.job_id = v.b_job{_EXACT[dialect]} AND ticks.scheduled_at_ms = v.b_at "
                f"AND {fenced_rows(Reach.OWN, shard='v.b_shard', fence='v.b_fence')}"
            ),
        )

    refs = _each_refs(row, {})
    each = text(
        f"UPDATE ticks SET {_assign(assignments, refs)} "
        "WHERE ticks.job_id = :b_job AND ticks.scheduled_at_ms = :b_at "
        f"AND {fenced_rows(Reach.OWN, shard=':b_shard', fence=':b_fence')}"
    )
    statements = {
        POSTGRESQL: from_document(POSTGRESQL),
        SQLITE: from_document(SQLITE),
        MARIADB: Statement(Form.EACH, each),
    }
    return TickWrite(name, Kind.UPDATE_ROWS, Reach.OWN, row, {}, statements)


# One chunk of (job id, slot) keys, bound as one expanding IN list.
_KEYS = bindparam("keys", expanding=True, type_=TupleType(String(), BigInteger()))
_KEY_ROW = {"b_job": "TEXT", "b_at": "BIGINT"}
_SHARD_AND_FENCE = {"b_shard": "INTEGER", "b_fence": "BIGINT"}
_AMONG_KEYS = "(ticks.job_id, ticks.scheduled_at_ms) IN :keys"


def _update_keys(name: str, reach: Reach, own: Mapping[str, str], assignments: Mapping[str, str]) -> TickWrite:
    """An update of one shard's ticks named by key, with ``own`` binds shared by the batch: the same statement
    on every dialect."""
    shared = {**_SHARD_AND_FENCE, **own}
    refs = _each_refs(_KEY_ROW, shared)
    statement = text(
        f"UPDATE ticks SET {_assign(assignments, refs)} WHERE {_AMONG_KEYS} "
        f"AND {fenced_rows(reach, shard=':b_shard', fence=':b_fence')}"
    ).bindparams(_KEYS)
    return TickWrite(
        name, Kind.UPDATE_KEYS, reach, _KEY_ROW, shared, dict.fromkeys(DIALECTS, Statement(Form.KEYS, statement))
    )


def _insert(name: str, row: Mapping[str, str], shared: Mapping[str, str], values: Mapping[str, str]) -> TickWrite:
    """An insert of the slots that have no row: ``values`` maps each column to ``{field}`` or ``{shared}``."""
    columns = ", ".join(values)
    # The rows in key order (the primary key's, byte for byte), so that two claimants lock keys in one order
    # (PostgreSQL). SQLite has one writer at a time, and json_each yields the already sorted rows in order: a
    # sort there would only cost a temporary B-tree per statement.
    in_key_order = {POSTGRESQL: f"ORDER BY v.b_job{_EXACT[POSTGRESQL]}, v.b_at", SQLITE: ""}

    def from_document(dialect: str) -> Statement:
        picked = ", ".join(value.format_map(_document_refs(row, shared)) for value in values.values())
        sql = (
            f"INSERT INTO ticks ({columns}) SELECT {picked} FROM {_document_rows(dialect, row)} "
            # WHERE true: SQLite's grammar needs a WHERE before ON CONFLICT in an INSERT ... SELECT.
            f"WHERE true {in_key_order[dialect]} ON CONFLICT DO NOTHING"
        )
        return Statement(Form.DOCUMENT, text(sql), text(f"{sql} RETURNING job_id, scheduled_at_ms"))

    # Binds only in VALUES: pymysql then sends the executemany as multi-row INSERTs (its pattern refuses a
    # literal there, and would send one statement per row).
    each = text(
        f"INSERT INTO ticks ({columns}) VALUES "
        f"({', '.join(value.format_map(_each_refs(row, shared)) for value in values.values())})"
    )
    statements = {
        POSTGRESQL: from_document(POSTGRESQL),
        SQLITE: from_document(SQLITE),
        MARIADB: Statement(Form.EACH, each),
    }
    return TickWrite(name, Kind.INSERT, None, row, shared, statements)


# The table: each write's row fields and shared binds (name -> SQL type), and what it writes. A skip is a
# claim whose status is ``skipped``, finished at once, with its reason as the error.
CLAIM = _insert(
    "claim",
    {**_TICK_ROW, "b_manual": "BOOLEAN"},
    {
        "node_id": "TEXT",
        "status": "TEXT",
        "attempt": "INTEGER",
        "now_ms": "BIGINT",
        "finished_at_ms": "BIGINT",
        "error": "TEXT",
    },
    {
        "job_id": "{b_job}",
        "scheduled_at_ms": "{b_at}",
        "shard": "{b_shard}",
        "fence": "{b_fence}",
        "manual": "{b_manual}",
        "node_id": "{node_id}",
        "status": "{status}",
        "attempt": "{attempt}",
        "claimed_at_ms": "{now_ms}",
        "finished_at_ms": "{finished_at_ms}",
        "error": "{error}",
    },
)
MARK_RUNNING = _update_rows(
    "mark_running",
    {"b_attempt": "INTEGER", "b_started": "BIGINT"},
    {"status": f"'{TickStatus.RUNNING.value}'", "attempt": "{b_attempt}", "started_at_ms": "{b_started}"},
)
RECORD_RESULT = _update_rows(
    "record_result",
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
        "status": "{b_status}",
        "attempt": "{b_attempt}",
        "started_at_ms": "{b_started}",
        "finished_at_ms": "{b_finished}",
        "exit_code": "{b_exit}",
        "http_status": "{b_http}",
        "output": "{b_output}",
        "error": "{b_error}",
    },
)
# The fence and node become this leader's; the status stays as it was.
ADOPT = _update_keys("adopt", Reach.ORPHANS, {"node_id": "TEXT"}, {"fence": "{b_fence}", "node_id": "{node_id}"})
# The slots among ``:keys`` that ADOPT would change (a read: ``take_over`` reports them).
ADOPTABLE = text(
    f"SELECT ticks.job_id, ticks.scheduled_at_ms FROM ticks WHERE {_AMONG_KEYS} "
    f"AND {fenced_rows(Reach.ORPHANS, shard=':b_shard', fence=':b_fence')}"
).bindparams(_KEYS)
ABANDON = _update_keys(
    "abandon",
    Reach.OWN_AND_ORPHANS,
    {"now_ms": "BIGINT", "error": "TEXT"},
    {"status": f"'{TickStatus.ABANDONED.value}'", "error": "{error}", "finished_at_ms": "{now_ms}"},
)

WRITES: Mapping[str, TickWrite] = {w.name: w for w in (CLAIM, MARK_RUNNING, RECORD_RESULT, ADOPT, ABANDON)}


__all__ = [
    "ABANDON",
    "ADOPT",
    "ADOPTABLE",
    "CLAIM",
    "DIALECTS",
    "MARIADB",
    "MARK_RUNNING",
    "POSTGRESQL",
    "RECORD_RESULT",
    "SQLITE",
    "WRITES",
    "Form",
    "Kind",
    "Reach",
    "Statement",
    "TickWrite",
    "dialect_of",
    "fenced_rows",
]
