"""The SQL store: job definitions and ticks, every write checked against the shard's fence.

Modules, one concern each:

* ``engine``  : engines per database, timeouts, URL masking, the error boundary
* ``schema``  : the tables (SQLAlchemy Core)
* ``migrate`` : bringing a database to this version's schema (Alembic, shipped in ``migrations/``)
* ``fences``  : shard fences, and ``fenced``, the transaction every leader write runs in
* ``jobs``, ``job_reads`` : job definitions' fenced writes; their plain reads
* ``ticks``, ``tick_results``, ``tick_reads`` : one row per job slot: its claim, its status changes, its reads
* ``tick_statements``, ``ticks_batch`` : every tick write's statement per database, and running a batch of one
* ``sql``, ``text`` : dialect idioms and batching; clipping free text
"""

from shardcron.store.engine import check_connection, describe_url, make_engine, normalise_url
from shardcron.store.fences import FenceRow, ensure_shards, fenced, raise_fence, read_fences
from shardcron.store.job_reads import count_jobs_by_shard, get_job, list_jobs, load_shard_jobs
from shardcron.store.jobs import delete_job, import_jobs, put_job, set_paused
from shardcron.store.migrate import current_revision, ensure_schema, head_revision, upgrade
from shardcron.store.tick_reads import last_ticks, list_ticks, ticks_between, unresolved_ticks
from shardcron.store.tick_results import mark_running, record_results
from shardcron.store.ticks import SlotClaim, abandon_ticks, claim_ticks, skip_ticks, take_over

__all__ = [
    "FenceRow",
    "SlotClaim",
    "abandon_ticks",
    "check_connection",
    "claim_ticks",
    "count_jobs_by_shard",
    "current_revision",
    "delete_job",
    "describe_url",
    "ensure_schema",
    "ensure_shards",
    "fenced",
    "get_job",
    "head_revision",
    "import_jobs",
    "last_ticks",
    "list_jobs",
    "list_ticks",
    "load_shard_jobs",
    "make_engine",
    "mark_running",
    "normalise_url",
    "put_job",
    "raise_fence",
    "read_fences",
    "record_results",
    "set_paused",
    "skip_ticks",
    "take_over",
    "ticks_between",
    "unresolved_ticks",
    "upgrade",
]
