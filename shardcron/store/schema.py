"""The store's tables, as SQLAlchemy Core.

``migrations/versions`` creates exactly these tables; a test compares the two on
every database, so a change here needs a new migration.

Portable choices, because one table definition serves PostgreSQL, MariaDB and
SQLite alike:

* Times are BIGINT epoch milliseconds (see ``shardcron.model``).
* Identifier columns (job ids, label keys and values) compare byte for byte on
  every database. MariaDB's default collation is case- and accent-insensitive
  and ignores trailing spaces, which would make ``Nightly``, ``nightly`` and
  ``nightly `` one primary key there and three everywhere else; so those
  columns are ``utf8mb4_nopad_bin`` on MariaDB (binary, and NO PAD: plain
  ``utf8mb4_bin`` still ignores trailing spaces) and ``"C"`` on PostgreSQL,
  which also makes keyset paging order by code point everywhere, like SQLite.
  (MySQL proper has no ``utf8mb4_nopad_bin``; shardcron supports MariaDB.)
* Key length on MariaDB: a job id is at most 256 bytes of UTF-8 (spec.fields), so
  ``VARCHAR(256)`` in characters always holds it. In utf8mb4 that is at most
  1024 bytes of index key; the widest indexes below (job_labels' two, of two
  such columns) take about 2 KiB, under InnoDB's 3072-byte limit for the
  DYNAMIC row format, which every table sets explicitly. So no hashed keys are
  needed, and ids stay readable in the database.
* Large text is ``MEDIUMTEXT``/``LONGTEXT`` on MariaDB, whose ``TEXT`` stops
  at 65535 bytes: one byte short of a full 64 KiB output.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    literal_column,
    text,
)
from sqlalchemy.dialects import mysql

from shardcron.model import TickStatus

# Sizes shared with the migrations and the code that validates before writing.
ID_LENGTH = 256  # characters; spec.fields.MAX_JOB_ID_BYTES caps job ids at 256 bytes
NODE_ID_LENGTH = 256
LABEL_KEY_LENGTH = 256
LABEL_VALUE_LENGTH = 256
STATUS_LENGTH = 16
META_KEY_LENGTH = 128
CALENDAR_NAME_LENGTH = 128  # spec.calendar_tables.check_calendar_name caps names at 128 ASCII characters
BACKFILL_ID_LENGTH = 64
NAMESPACE_LENGTH = 63  # spec.namespaces.MAX_NAMESPACE_LENGTH
FRACTION_LENGTH = 64  # an exact rate as text, "10/3"
TOKEN_NAME_LENGTH = 64  # api.tokens caps token names at 64 characters
TOKEN_HASH_LENGTH = 71  # "sha256:" and 64 hex digits
ROLE_LENGTH = 16

# Alembic's bookkeeping table, named for shardcron so that a database shared
# with another Alembic-managed application keeps both histories apart.
VERSION_TABLE = "shardcron_schema_version"

# Deterministic constraint and index names on every database, so a later
# migration can drop or alter them by name.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# InnoDB and DYNAMIC explicitly: the 3072-byte key limit above depends on it.
_TABLE_OPTS: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_row_format": "DYNAMIC"}


def exact_string(length: int) -> String:
    """A VARCHAR that compares byte for byte on every database (see above)."""
    return (
        String(length)
        .with_variant(String(length, collation="C"), "postgresql")
        .with_variant(mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_nopad_bin"), "mysql", "mariadb")
    )


def long_text() -> Text:
    """Text up to 16 MiB on MariaDB (tick output and errors, capped at 64 KiB)."""
    return Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def huge_text() -> Text:
    """Text up to 4 GiB on MariaDB (job specs: two 1 MiB payloads plus headers)."""
    return Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


metadata = MetaData(naming_convention=NAMING)

jobs = Table(
    "jobs",
    metadata,
    Column("id", exact_string(ID_LENGTH), primary_key=True),
    Column("shard", Integer, nullable=False),
    Column("spec", huge_text(), nullable=False),  # spec.job.job_to_json, version 0
    Column("version", Integer, nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("fence", BigInteger, nullable=False),  # the fence of the last write
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("active_since_ms", BigInteger, nullable=False),
    # The namespace of the key in id (spec.namespaces), for listing and counting one namespace.
    Column("namespace", exact_string(NAMESPACE_LENGTH), nullable=False, server_default="default"),
    # (shard, id): one shard's jobs, and keyset paging by id within a shard.
    Index(None, "shard", "id"),
    # (namespace, id): one namespace's jobs, and keyset paging by id within it.
    Index(None, "namespace", "id"),
    **_TABLE_OPTS,
)

job_labels = Table(
    "job_labels",
    metadata,
    Column("job_id", exact_string(ID_LENGTH), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("key", exact_string(LABEL_KEY_LENGTH), nullable=False),
    Column("value", exact_string(LABEL_VALUE_LENGTH), nullable=False),
    PrimaryKeyConstraint("job_id", "key"),
    Index(None, "key", "value"),
    **_TABLE_OPTS,
)

# Claimed or running: a tick whose result is not written yet. Written as literal
# values, never bound parameters, in the index and in every query that should use
# it: SQLite and PostgreSQL pick a partial index only for a WHERE clause that
# visibly implies the index's own.
UNRESOLVED_STATUSES = (TickStatus.CLAIMED.value, TickStatus.RUNNING.value)
UNRESOLVED_SQL = f"status IN ('{UNRESOLVED_STATUSES[0]}', '{UNRESOLVED_STATUSES[1]}')"


def unresolved(status_column: ColumnElement[str]) -> ColumnElement[bool]:
    """``status IN ('claimed', 'running')`` with the values inline (see ``UNRESOLVED_SQL``)."""
    return status_column.in_([literal_column(f"'{s}'") for s in UNRESOLVED_STATUSES])


ticks = Table(
    "ticks",
    metadata,
    # No foreign key to jobs: ticks outlive their job, as history.
    Column("job_id", exact_string(ID_LENGTH), nullable=False),
    Column("scheduled_at_ms", BigInteger, nullable=False),
    Column("shard", Integer, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("status", String(STATUS_LENGTH), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("manual", Boolean, nullable=False),
    Column("claimed_at_ms", BigInteger, nullable=True),
    Column("started_at_ms", BigInteger, nullable=True),
    Column("finished_at_ms", BigInteger, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("http_status", Integer, nullable=True),
    Column("output", long_text(), nullable=True),
    Column("error", long_text(), nullable=True),
    # When the slot's work was reported done (AckTick; the first ack is kept), and when each of its
    # deadlines was found missed (rules/deadlines.py: set once, by the shard's leader, under its fence).
    Column("acked_at_ms", BigInteger, nullable=True),
    Column("start_deadline_missed_at_ms", BigInteger, nullable=True),
    Column("deadline_missed_at_ms", BigInteger, nullable=True),
    Column("heartbeat_missed_at_ms", BigInteger, nullable=True),
    # The slot's identity: at most one row per (job, scheduled time), ever. It
    # also serves a job's history newest first (a backward scan), so no
    # separate descending index is needed.
    PrimaryKeyConstraint("job_id", "scheduled_at_ms"),
    # A new leader's unresolved ticks. Partial where the database has partial
    # indexes (SQLite, PostgreSQL): a tick is in it only from its claim to its
    # result, so the insert and the result update cost one small entry instead
    # of keeping every tick of history indexed by status. MariaDB has no
    # partial indexes and indexes every row.
    Index(
        "ix_ticks_unresolved",
        "shard",
        "status",
        sqlite_where=text(UNRESOLVED_SQL),
        postgresql_where=text(UNRESOLVED_SQL),
    ),
    # The audit's time window across all jobs.
    Index(None, "scheduled_at_ms"),
    **_TABLE_OPTS,
)

shard_fences = Table(
    "shard_fences",
    metadata,
    Column("shard", Integer, primary_key=True, autoincrement=False),
    Column("fence", BigInteger, nullable=False),
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    **_TABLE_OPTS,
)

fence_log = Table(
    "fence_log",
    metadata,
    Column("shard", Integer, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("raised_at_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("shard", "fence"),
    **_TABLE_OPTS,
)

# Retention: how far back ticks may have been deleted. Each row
# is written under the shard's fence BEFORE any delete below it and only moves
# forward, so the audit reads an absent slot below it as "pruned", not "missing".
shard_horizons = Table(
    "shard_horizons",
    metadata,
    Column("shard", Integer, primary_key=True, autoincrement=False),
    Column("horizon_ms", BigInteger, nullable=False),  # rows scheduled before it may be gone
    Column("fence", BigInteger, nullable=False),  # the fence of the last write
    Column("updated_at_ms", BigInteger, nullable=False),
    **_TABLE_OPTS,
)

# The same per job, for its history_limit: its ticks before horizon_ms may be gone.
job_horizons = Table(
    "job_horizons",
    metadata,
    Column("job_id", exact_string(ID_LENGTH), primary_key=True),
    Column("horizon_ms", BigInteger, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    **_TABLE_OPTS,
)

# One row per backfill (``shardcron jobs backfill``): written under its shard's fence by the
# leader, which runs it from ``cursor_ms`` on; a successor continues from there.
backfills = Table(
    "backfills",
    metadata,
    Column("id", exact_string(BACKFILL_ID_LENGTH), primary_key=True),
    Column("job_id", exact_string(ID_LENGTH), nullable=False),
    Column("shard", Integer, nullable=False),
    Column("from_ms", BigInteger, nullable=False),  # inclusive
    Column("to_ms", BigInteger, nullable=False),  # exclusive
    Column("overlap", String(STATUS_LENGTH), nullable=False),
    Column("rate_per_s", Float, nullable=False),
    Column("cursor_ms", BigInteger, nullable=True),  # the last slot handled; None: none yet
    Column("state", String(STATUS_LENGTH), nullable=False),
    Column("planned", BigInteger, nullable=False),
    Column("done", BigInteger, nullable=False),
    Column("skipped", BigInteger, nullable=False),
    Column("fence", BigInteger, nullable=False),  # the fence of the last write
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("error", Text, nullable=True),
    # A new leader's active backfills.
    Index(None, "shard", "state"),
    # A job's backfills, and the audit's backfills over a window.
    Index(None, "job_id", "from_ms"),
    **_TABLE_OPTS,
)

cluster_meta = Table(
    "cluster_meta",
    metadata,
    Column("key", exact_string(META_KEY_LENGTH), primary_key=True),
    Column("value", Text, nullable=False),
    **_TABLE_OPTS,
)

# Calendars are cluster-wide, not sharded: no fence. ``spec`` is calendars.calendar_to_dict as JSON.
calendars = Table(
    "calendars",
    metadata,
    Column("name", exact_string(CALENDAR_NAME_LENGTH), primary_key=True),
    Column("spec", long_text(), nullable=False),
    Column("version", Integer, nullable=False),
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    **_TABLE_OPTS,
)

# Every version of every calendar with the writer's clock when it took effect; ``spec`` NULL: deleted.
# The audit judges a slot by the version in force at it.
calendar_versions = Table(
    "calendar_versions",
    metadata,
    Column("name", exact_string(CALENDAR_NAME_LENGTH), nullable=False),
    Column("version", Integer, nullable=False),
    Column("spec", long_text(), nullable=True),
    Column("effective_at_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("name", "version"),
    **_TABLE_OPTS,
)

# Failure notifications (notifications/): one row per (job, slot, kind), claimed under the shard's
# fence before it is sent, so a successor sends what its predecessor claimed and did not send.
notifications = Table(
    "notifications",
    metadata,
    Column("job_id", exact_string(ID_LENGTH), nullable=False),
    Column("scheduled_at_ms", BigInteger, nullable=False),  # the slot that failed or recovered
    Column("kind", String(STATUS_LENGTH), nullable=False),  # on_failure | on_recovery
    Column("shard", Integer, nullable=False),
    Column("fence", BigInteger, nullable=False),  # the fence of the last write
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("status", String(STATUS_LENGTH), nullable=False),  # claimed | sent | failed | suppressed
    Column("source", String(STATUS_LENGTH), nullable=False),  # job | default
    Column("spec", long_text(), nullable=False),  # the executor table it is sent with, as JSON
    Column("claimed_at_ms", BigInteger, nullable=False),
    Column("sent_at_ms", BigInteger, nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("error", long_text(), nullable=True),
    # A claimed notification whose sends all failed waits until then to be tried again (None: at once).
    Column("next_attempt_at_ms", BigInteger, nullable=True),
    PrimaryKeyConstraint("job_id", "scheduled_at_ms", "kind"),
    # A new leader's claimed but unsent notifications.
    Index(None, "shard", "status"),
    # The audit's time window across all jobs.
    Index(None, "scheduled_at_ms"),
    **_TABLE_OPTS,
)

# One row per deadline recorded missed (store/deadlines.py writes it with the miss, in the same fenced
# transaction), so the misses of the last day across the cluster are one index read, not a scan of
# the ticks; rows older than deadlines.MISS_HISTORY_MS are deleted as new misses are recorded.
deadline_misses = Table(
    "deadline_misses",
    metadata,
    Column("job_id", exact_string(ID_LENGTH), nullable=False),
    Column("scheduled_at_ms", BigInteger, nullable=False),
    Column("kind", String(STATUS_LENGTH), nullable=False),  # start_deadline | deadline | heartbeat
    Column("namespace", exact_string(NAMESPACE_LENGTH), nullable=False),
    Column("shard", Integer, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("missed_at_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("job_id", "scheduled_at_ms", "kind"),
    Index(None, "missed_at_ms"),
    **_TABLE_OPTS,
)

# One row per namespace: its weight and quotas, and its usage, kept exact and
# updated under the row's lock in the transaction of every put and delete (see
# store/namespaces.py), so puts on two leaders cannot both take the last room.
namespaces = Table(
    "namespaces",
    metadata,
    Column("name", exact_string(NAMESPACE_LENGTH), primary_key=True),
    Column("weight", Float, nullable=False),
    Column("max_jobs", BigInteger, nullable=True),
    Column("max_slots_per_second", String(FRACTION_LENGTH), nullable=True),  # a Fraction as text
    Column("max_running", BigInteger, nullable=True),
    Column("jobs", BigInteger, nullable=False),
    Column("slots_per_second", String(FRACTION_LENGTH), nullable=False),  # a Fraction as text
    Column("node_id", String(NODE_ID_LENGTH), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    **_TABLE_OPTS,
)

# API tokens created through the API (store/tokens.py); a node's token file adds its own.
# Only the hash of a secret is stored. Not sharded: every node reads the whole table.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("name", exact_string(TOKEN_NAME_LENGTH), primary_key=True),
    Column("secret_hash", exact_string(TOKEN_HASH_LENGTH), nullable=False, unique=True),
    Column("role", String(ROLE_LENGTH), nullable=False),
    Column("namespaces", Text, nullable=False),  # comma-separated, or "*"
    Column("created_at_ms", BigInteger, nullable=False),
    Column("created_by", exact_string(TOKEN_NAME_LENGTH), nullable=False),
    **_TABLE_OPTS,
)


__all__ = [
    "api_tokens",
    "calendar_versions",
    "calendars",
    "ID_LENGTH",
    "LABEL_KEY_LENGTH",
    "LABEL_VALUE_LENGTH",
    "VERSION_TABLE",
    "backfills",
    "cluster_meta",
    "fence_log",
    "job_horizons",
    "job_labels",
    "jobs",
    "metadata",
    "namespaces",
    "notifications",
    "shard_fences",
    "shard_horizons",
    "ticks",
]
