"""The SQL store: job definitions and ticks, every write checked against the shard's fence.

Modules, one concern each:

* ``engine``  : engines per database, timeouts, URL masking, the error boundary
* ``schema``  : the tables (SQLAlchemy Core)
* ``migrate`` : bringing a database to this version's schema (Alembic, shipped in ``migrations/``)
* ``fences``  : shard fences, and ``fenced``, the transaction every leader write runs in
* ``jobs``    : job definitions
* ``ticks``   : one row per job slot, and its status changes
* ``sql``, ``text`` : dialect idioms and batching; clipping free text
"""

from shardcron.store.engine import check_connection, describe_url, make_engine, normalise_url
from shardcron.store.fences import FenceRow, ensure_shards, fenced, raise_fence, read_fences
from shardcron.store.jobs import (
    count_jobs_by_shard,
    delete_job,
    get_job,
    import_jobs,
    list_jobs,
    load_shard_jobs,
    put_job,
    set_paused,
)
from shardcron.store.migrate import current_revision, ensure_schema, head_revision, upgrade
from shardcron.store.ticks import (
    SlotClaim,
    abandon_ticks,
    claim_ticks,
    last_ticks,
    list_ticks,
    mark_running,
    record_results,
    skip_ticks,
    take_over,
    ticks_between,
    unresolved_ticks,
)

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
