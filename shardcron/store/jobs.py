"""Job definitions' fenced writes: puts, imports, deletes and pauses.

A row holds the definition as JSON (``spec.job.job_to_json`` with version 0)
plus the store-assigned ``version`` and ``active_since_ms`` and the ``paused``
flag as columns; a Job read back is the JSON with those columns applied
(``job_reads``, the plain reads). ``job_labels`` indexes the labels for
filtering and is rewritten with the job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import cast

from sqlalchemy import Connection, Engine, bindparam, select

from shardcron.errors import FencedOut, InvalidJob, JobNotFound, ShardcronError, VersionConflict
from shardcron.jobkey import display_key, namespace_of
from shardcron.model import Job
from shardcron.rules.quotas import PutChange
from shardcron.spec.job import job_from_json, job_to_json
from shardcron.store.fences import run_fenced, run_fenced_many
from shardcron.store.job_reads import READ_COLUMNS, job_from_row
from shardcron.store.namespaces import give_back, lock_rooms, rate_of_spec, schedule_rate
from shardcron.store.schema import LABEL_KEY_LENGTH, LABEL_VALUE_LENGTH, job_labels, jobs
from shardcron.store.sql import chunks

log = logging.getLogger(__name__)

# What every write sets (see _row); created_at_ms only on insert.
_WRITE_COLUMNS = (
    "shard",
    "namespace",
    "spec",
    "version",
    "paused",
    "fence",
    "node_id",
    "updated_at_ms",
    "active_since_ms",
)
# FOR UPDATE, read in id order, as put_each reads them: the replaced spec gives its rate back to the
# namespace's usage, so it must be the one this transaction replaces; and every job writer locks its job
# rows before its namespace rows (store/namespaces.py), so writers cannot deadlock on them.
_JOBS_BY_IDS = select(*READ_COLUMNS).where(jobs.c.id.in_(bindparam("ids", expanding=True))).with_for_update()
# The spec too: the replaced definition's rate is given back to its namespace's quota.
_VERSIONS_FOR_UPDATE = (
    select(jobs.c.id, jobs.c.version, jobs.c.spec)
    .where(jobs.c.id.in_(bindparam("ids", expanding=True)))
    .with_for_update()
)
# Many jobs' updates as one executemany; parameters are the columns prefixed b_.
_UPDATE_BY_ID = (
    jobs.update().where(jobs.c.id == bindparam("b_id")).values({c: bindparam(f"b_{c}") for c in _WRITE_COLUMNS})
)


@dataclass(frozen=True)
class Put:
    """One PutJob: ``expected_version`` 0 means the job must not exist yet, N that it must be
    at version N (``VersionConflict`` otherwise), None accepts any."""

    job: Job
    shard: int
    fence: int
    expected_version: int | None = None


def put_job(
    engine: Engine,
    job: Job,
    *,
    shard: int,
    fence: int,
    node_id: str,
    now_ms: int,
    expected_version: int | None = None,
) -> Job:
    """Insert or replace ``job``; returns it with its new version and active_since_ms.

    A new definition takes effect now: slots before ``now_ms`` are not owed.
    """
    answer = put_each(engine, [Put(job, shard, fence, expected_version)], node_id=node_id, now_ms=now_ms)[0]
    if isinstance(answer, Exception):
        raise answer
    return answer


def put_each(engine: Engine, puts: Sequence[Put], *, node_id: str, now_ms: int) -> list[Job | ShardcronError]:
    """Many puts, each as ``put_job`` would do it, in one fenced transaction: one answer per
    put, in order, the stored job or the error that put alone would have raised
    (``VersionConflict``, ``FencedOut``, ``InvalidJob``, ``QuotaRefused``, ``NamespaceMissing``).
    Puts of one job apply in turn, so the second sees the version the first wrote.
    Each admitted put is counted in its namespace's usage in the same transaction,
    under the namespace row's lock (``store/namespaces.py``), in put order. What lets a leader commit
    concurrent API calls together (see api/job_puts.py).
    """
    answers: list[Job | ShardcronError | None] = [None] * len(puts)
    for i, p in enumerate(puts):
        try:
            _check_labels(p.job)
        except InvalidJob as e:
            answers[i] = e
    live = [i for i, a in enumerate(answers) if a is None]
    newest: dict[int, int] = {}  # shard -> the newest fence among the puts (an older one is stale anyway)
    for i in live:
        newest[puts[i].shard] = max(newest.get(puts[i].shard, 0), puts[i].fence)
    if not live:
        return cast("list[Job | ShardcronError]", answers)  # each one an InvalidJob
    by_fence: dict[tuple[int, int], list[int]] = {(shard, fence): [] for shard, fence in newest.items()}
    for i in live:
        if puts[i].fence == newest[puts[i].shard]:
            by_fence[(puts[i].shard, puts[i].fence)].append(i)

    def work(conn: Connection, writable: dict[tuple[int, int], list[int]]) -> list[Job | ShardcronError | None]:
        out = list(answers)
        mine = sorted(i for indexes in writable.values() for i in indexes)  # in put order
        ids = sorted({puts[i].job.id for i in mine})
        # FOR UPDATE, in id order: two transactions of one leader writing one job
        # must not both read version N and both write N+1, nor deadlock.
        versions: dict[str, int] = {}
        rates: dict[str, Fraction] = {}  # the rate of each job as it stands (stored, then as staged)
        for part in chunks(ids):
            for r in conn.execute(_VERSIONS_FOR_UPDATE, {"ids": list(part)}):
                versions[r.id] = r.version
                rates[r.id] = rate_of_spec(r.spec)
        existed = set(versions)
        rooms = lock_rooms(conn, {namespace_of(job_id) for job_id in ids}, now_ms)
        staged: dict[str, tuple[Job, int, int]] = {}
        for i in mine:
            p = puts[i]
            actual = versions.get(p.job.id, 0)
            if p.expected_version is not None and p.expected_version != actual:
                out[i] = VersionConflict(p.job.id, p.expected_version, actual)
                continue
            rate = schedule_rate(p.job.schedule)
            refused = rooms.admit(namespace_of(p.job.id), PutChange(rates.get(p.job.id), rate))
            if refused is not None:
                out[i] = refused
                continue
            rates[p.job.id] = rate
            out[i] = stored = replace(p.job, version=actual + 1, active_since_ms=now_ms)
            versions[p.job.id] = stored.version
            staged[p.job.id] = (stored, p.shard, p.fence)
        _write(
            conn,
            [w for w in staged.values() if w[0].id not in existed],
            [w for w in staged.values() if w[0].id in existed],
            node_id=node_id,
            now_ms=now_ms,
        )
        rooms.save(conn)
        return out

    done = run_fenced_many(engine, by_fence, work)
    out = done.value
    for i in live:
        if out[i] is None:  # not written: its shard's fence moved, or a newer fence of its shard came with it
            p = puts[i]
            out[i] = FencedOut(p.shard, p.fence, done.fenced_out.get(p.shard, newest[p.shard]))
    return cast("list[Job | ShardcronError]", out)  # every put answered now


@dataclass(frozen=True)
class Imported:
    """One job of an import: as stored afterwards, and whether the store already held it so."""

    job: Job
    unchanged: bool


@dataclass(frozen=True)
class ImportOutcome:
    written: dict[str, Imported]  # by job id, for the shards whose fence held
    fenced_out: dict[int, int | None]  # shard -> its stored fence, for the shards whose fence moved
    # by job id: not written, because its namespace's quota refused it (QuotaRefused) or its
    # namespace does not exist (NamespaceMissing)
    refused: dict[str, ShardcronError] = field(default_factory=dict)


def import_jobs(engine: Engine, jobs_: Iterable[Job], *, shard: int, fence: int, node_id: str, now_ms: int) -> int:
    """Write the jobs whose stored definition differs (or that are missing); returns how many.

    Version and active_since_ms are ignored in the comparison, so re-importing
    an unchanged jobs file writes nothing and resets no one's backlog. An
    existing job keeps its paused state: a pause made through the API must not
    be undone because a new leader re-reads the file.
    """
    outcome = import_jobs_many(engine, {shard: (fence, list(jobs_))}, node_id=node_id, now_ms=now_ms)
    if outcome.fenced_out:
        raise FencedOut(shard, fence, outcome.fenced_out[shard])
    for job_id, why in outcome.refused.items():
        # A leader importing its file goes on with the other jobs: one job over quota must not stop a shard.
        log.warning(
            "shard %d: job %s of the jobs file not imported: %s",
            shard,
            display_key(job_id),
            why,
            extra={"shard": shard},
        )
    return sum(1 for i in outcome.written.values() if not i.unchanged)


def import_jobs_many(
    engine: Engine,
    by_shard: Mapping[int, tuple[int, Sequence[Job]]],
    *,
    node_id: str,
    now_ms: int,
    order: Mapping[str, int] | None = None,
    validate_only: bool = False,
) -> ImportOutcome:
    """``import_jobs`` for several shards of one leader: ``{shard: (fence, jobs)}``.

    One fenced transaction for them all, a few statements per 500 jobs, and
    nothing read per job, so that a PutJobs of thousands costs a handful of
    round trips. Shards whose fence moved are left out and reported.

    Namespace quotas admit the new and changed jobs in ``order`` (job id -> its
    place in the request, as PutJobs received them; by default the order given),
    each while it fits what the ones before it left; the others are ``refused``.

    ``validate_only``: everything runs as for the write, the database's own checks
    included, and the transaction is rolled back: the outcome is the write's, nothing stays.
    """
    for _, shard_jobs in by_shard.values():
        for j in shard_jobs:
            _check_labels(j)
    if not any(shard_jobs for _, shard_jobs in by_shard.values()):
        return ImportOutcome({}, {})

    refused: dict[str, ShardcronError] = {}

    def work(conn: Connection, live: dict[tuple[int, int], Sequence[Job]]) -> dict[str, Imported]:
        refused.clear()  # a re-run (see run_fenced_many) decides afresh
        wanted = {j.id: (shard, fence, j) for (shard, fence), shard_jobs in live.items() for j in shard_jobs}
        stored = {}
        for part in chunks(sorted(wanted)):
            stored.update({r.id: r for r in conn.execute(_JOBS_BY_IDS, {"ids": list(part)})})
        written: dict[str, Imported] = {}
        inserts: list[tuple[Job, int, int]] = []
        updates: list[tuple[Job, int, int]] = []
        rooms = lock_rooms(conn, {namespace_of(job_id) for job_id in wanted}, now_ms)
        ids = list(wanted) if order is None else sorted(wanted, key=lambda k: order.get(k, len(order)))
        for job_id in ids:
            shard, fence, job = wanted[job_id]
            row = stored.get(job_id)
            if row is not None:
                job = replace(job, paused=bool(row.paused))  # the API's pause outlives a re-import
                if row.shard == shard and _spec(job) == _normalised_spec(row.spec):
                    written[job_id] = Imported(
                        replace(job, version=row.version, active_since_ms=row.active_since_ms), True
                    )
                    continue
            change = PutChange(None if row is None else rate_of_spec(row.spec), schedule_rate(job.schedule))
            why = rooms.admit(namespace_of(job_id), change)
            if why is not None:
                refused[job_id] = why
                continue
            new = replace(job, version=1 if row is None else row.version + 1, active_since_ms=now_ms)
            (inserts if row is None else updates).append((new, shard, fence))
            written[job_id] = Imported(new, unchanged=False)
        _write(conn, inserts, updates, node_id=node_id, now_ms=now_ms)
        rooms.save(conn)
        if validate_only:
            conn.rollback()
        return written

    out = run_fenced_many(engine, {(shard, fence): shard_jobs for shard, (fence, shard_jobs) in by_shard.items()}, work)
    return ImportOutcome(out.value, out.fenced_out, dict(refused))


def _write(
    conn: Connection,
    inserts: Sequence[tuple[Job, int, int]],
    updates: Sequence[tuple[Job, int, int]],
    *,
    node_id: str,
    now_ms: int,
) -> None:
    """Write new and existing jobs, each given as (job as stored, shard, fence): one executemany
    each, and their labels rewritten."""
    if inserts:
        conn.execute(
            jobs.insert(),
            [{"id": j.id, "created_at_ms": now_ms, **_row(j, s, f, node_id, now_ms)} for j, s, f in inserts],
        )
    if updates:
        conn.execute(
            _UPDATE_BY_ID,
            [{"b_id": j.id, **{f"b_{c}": v for c, v in _row(j, s, f, node_id, now_ms).items()}} for j, s, f in updates],
        )
    _rewrite_labels(conn, [j for j, _, _ in updates], existed=True)
    _rewrite_labels(conn, [j for j, _, _ in inserts], existed=False)


def delete_job(engine: Engine, job_id: str, *, shard: int, fence: int) -> None:
    """Delete the job and its labels; its ticks stay, as history. ``JobNotFound`` if absent.
    Its namespace's usage gives its room back in the same transaction."""

    def work(conn: Connection) -> None:
        spec = conn.execute(
            select(jobs.c.spec).where(jobs.c.id == job_id, jobs.c.shard == shard).with_for_update()
        ).scalar()
        if spec is None:
            raise JobNotFound(job_id)
        conn.execute(job_labels.delete().where(job_labels.c.job_id == job_id))
        conn.execute(jobs.delete().where(jobs.c.id == job_id, jobs.c.shard == shard))
        give_back(conn, namespace_of(job_id), [rate_of_spec(spec)])

    run_fenced(engine, shard, fence, work)


def set_paused(engine: Engine, job_id: str, paused: bool, *, shard: int, fence: int, node_id: str, now_ms: int) -> Job:
    """Pause or resume; a resumed job is active from ``now_ms``, so the paused
    time is not owed as backlog. Setting the state the job already has changes
    nothing (and in particular does not reset active_since_ms)."""

    def work(conn: Connection) -> Job:
        q = select(*READ_COLUMNS).where(jobs.c.id == job_id, jobs.c.shard == shard).with_for_update()
        row = conn.execute(q).first()
        if row is None:
            raise JobNotFound(job_id)
        job = job_from_row(row)
        if job.paused == paused:
            return job
        new = replace(
            job,
            paused=paused,
            version=job.version + 1,
            active_since_ms=job.active_since_ms if paused else now_ms,
        )
        conn.execute(
            jobs.update()
            .where(jobs.c.id == job_id)
            .values(_row(new, shard=shard, fence=fence, node_id=node_id, now_ms=now_ms))
        )
        return new

    return run_fenced(engine, shard, fence, work)


def _spec(job: Job) -> str:
    """The definition alone: what the ``spec`` column holds (state such as paused lives in columns)."""
    return job_to_json(replace(job, version=0, active_since_ms=0, paused=False))


def _normalised_spec(text: str) -> str | None:
    # Re-serialised rather than compared as stored, so that a change in how
    # spec.job writes JSON (a new field with a default) does not look like a
    # change of every job. A spec spec.job no longer accepts is "different".
    try:
        return _spec(job_from_json(text))
    except InvalidJob:
        return None


def _row(job: Job, shard: int, fence: int, node_id: str, now_ms: int) -> dict[str, object]:
    """Column values for a write of ``job`` (all but created_at_ms)."""
    return {
        "shard": shard,
        "namespace": namespace_of(job.id),
        "spec": _spec(job),
        "version": job.version,
        "paused": job.paused,
        "fence": fence,
        "node_id": node_id,
        "updated_at_ms": now_ms,
        "active_since_ms": job.active_since_ms,
    }


def _rewrite_labels(conn: Connection, written: Sequence[Job], *, existed: bool) -> None:
    if existed:
        for part in chunks([j.id for j in written]):
            conn.execute(_DELETE_LABELS, {"ids": list(part)})
    rows = [{"job_id": j.id, "key": k, "value": v} for j in written for k, v in j.labels.items()]
    if rows:
        conn.execute(job_labels.insert(), rows)


_DELETE_LABELS = job_labels.delete().where(job_labels.c.job_id.in_(bindparam("ids", expanding=True)))


def _check_labels(job: Job) -> None:
    # The label index columns are bounded (see schema.py); refuse clearly here
    # rather than fail (PostgreSQL, MariaDB) or not (SQLite) in the database.
    for k, v in job.labels.items():
        if len(k) > LABEL_KEY_LENGTH:
            raise InvalidJob("labels", f"key {k[:40]!r}... is longer than {LABEL_KEY_LENGTH} characters")
        if len(v) > LABEL_VALUE_LENGTH:
            raise InvalidJob("labels", f"value of {k!r} is longer than {LABEL_VALUE_LENGTH} characters")


__all__ = [
    "delete_job",
    "ImportOutcome",
    "Put",
    "Imported",
    "import_jobs",
    "import_jobs_many",
    "put_each",
    "put_job",
    "set_paused",
]
