"""Ticks: one row per (job, scheduled time) slot, written only under the shard's fence.

The primary key (job_id, scheduled_at_ms) is what makes a slot run at most
once: whichever leader inserts the row owns the slot, and a second claim of it
inserts nothing. Status changes (see ``model.TickStatus``) are made only by the
leader whose fence the row carries, and never move a final status.

Every write also names the shard, so a leader can touch only its own shard's
ticks, whose fence it holds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import Connection, Engine, and_, bindparam, func, or_, select, tuple_

from shardcron.model import ExecutionResult, SlotRef, Tick, TickStatus
from shardcron.store.engine import reading
from shardcron.errors import FencedOut
from shardcron.store import ticks_batch
from shardcron.store.fences import run_fenced, run_fenced_many
from shardcron.store.schema import jobs, ticks, unresolved
from shardcron.store.sql import chunks
from shardcron.store.text import clip

_UNRESOLVED = (TickStatus.CLAIMED.value, TickStatus.RUNNING.value)


class SlotClaim(NamedTuple):  # a tuple: one per slot per claim, made and read in C
    job_id: str
    scheduled_at_ms: int
    manual: bool = False  # an extra run asked for with TriggerJob


def last_ticks(engine: Engine, shard: int) -> dict[str, int]:
    """job_id -> latest scheduled slot with a tick (manual runs excluded), for
    the jobs that belong to ``shard`` now: where a new leader resumes each job.

    By the job's current shard, not the tick's: after a reshard a job's older
    ticks carry its old shard number, and they still say where it left off.
    """
    # Per job, the primary key walked backwards to the first scheduled row: no index
    # over (shard, manual, ...) for every insert to keep up, and no read of a
    # job's whole history.
    newest = (
        select(ticks.c.scheduled_at_ms)
        .where(ticks.c.job_id == jobs.c.id, ticks.c.manual == False)  # noqa: E712 (SQL, not Python)
        .order_by(ticks.c.scheduled_at_ms.desc())
        .limit(1)
        .correlate(jobs)
        .scalar_subquery()
    )
    q = select(jobs.c.id, newest).where(jobs.c.shard == shard)
    with reading(engine) as conn:
        return {job_id: at for job_id, at in conn.execute(q) if at is not None}


def unresolved_ticks(engine: Engine, shard: int) -> list[Tick]:
    """The shard's claimed or running ticks, oldest first: a new leader's orphans."""
    q = (
        select(ticks)
        .where(ticks.c.shard == shard, unresolved(ticks.c.status))
        .order_by(ticks.c.scheduled_at_ms, ticks.c.job_id)
    )
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


@dataclass(frozen=True)
class ManyOutcome:
    """What a write over several shards did: the slots written per shard, and the shards fenced out."""

    written: dict[int, list[SlotRef]]
    fenced_out: dict[int, int | None]  # shard -> its stored fence, for the shards whose fence moved

    def is_fenced(self, shard: int, fence: int) -> bool:
        """Whether the writes given for ``(shard, fence)`` were refused (see ``fences.FencedOutcome``)."""
        return shard in self.fenced_out and self.fenced_out[shard] != fence


def claim_ticks(
    engine: Engine, claims: Sequence[SlotClaim], *, shard: int, fence: int, node_id: str, now_ms: int
) -> list[SlotRef]:
    """Insert a ``claimed`` tick for each slot that has none; returns the slots
    actually claimed, in the order given. Slots that already have a tick (from
    any leader) are left alone and not returned: they are someone else's."""
    return _single(claim_ticks_many(engine, {(shard, fence): claims}, node_id=node_id, now_ms=now_ms), shard, fence)


def claim_ticks_many(
    engine: Engine, batches: Mapping[tuple[int, int], Sequence[SlotClaim]], *, node_id: str, now_ms: int
) -> ManyOutcome:
    """``claim_ticks`` for several shards in one transaction: ``{(shard, fence): claims}``.

    A shard whose fence moved is reported in ``fenced_out`` and nothing is
    written for it; the other shards' claims commit together.
    """
    status = {"status": TickStatus.CLAIMED.value, "finished_at_ms": None, "error": None}
    return _insert_new(engine, batches, node_id=node_id, now_ms=now_ms, **status)


def skip_ticks(
    engine: Engine, claims: Sequence[SlotClaim], *, shard: int, fence: int, node_id: str, now_ms: int, reason: str
) -> list[SlotRef]:
    """Like ``claim_ticks``, but each new tick is recorded as ``skipped`` with ``reason``."""
    status = {"status": TickStatus.SKIPPED.value, "finished_at_ms": now_ms, "error": clip(reason)}
    return _single(_insert_new(engine, {(shard, fence): claims}, node_id=node_id, now_ms=now_ms, **status),
                   shard, fence)


def _single(outcome: ManyOutcome, shard: int, fence: int) -> list[SlotRef]:
    if shard in outcome.fenced_out:
        raise FencedOut(shard, fence, outcome.fenced_out[shard])
    return outcome.written.get(shard, [])


def mark_running(engine: Engine, updates: Sequence[tuple[SlotRef, int, int]], *, shard: int, fence: int) -> None:
    """(slot, attempt, started_at_ms) -> ``running``, for unresolved ticks under this fence."""
    _single(mark_running_many(engine, {(shard, fence): updates}), shard, fence)


def mark_running_many(
    engine: Engine, groups: Mapping[tuple[int, int], Sequence[tuple[SlotRef, int, int]]]
) -> ManyOutcome:
    """``mark_running`` for several shards in one transaction: ``{(shard, fence): [(slot, attempt, started)]}``."""
    return _update_own_unresolved(engine, groups, (_MARK_RUNNING, _MARK_RUNNING_BATCH),
                                  lambda s, attempt, started, shard, fence: (
                                      s.job_id, s.scheduled_at_ms, shard, fence, attempt, started))


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
    _single(record_results_many(engine, {(shard, fence): results}), shard, fence)


def record_results_many(
    engine: Engine, groups: Mapping[tuple[int, int], Sequence[tuple[SlotRef, int, ExecutionResult, TickStatus]]]
) -> ManyOutcome:
    """``record_results`` for several shards in one transaction: ``{(shard, fence): results}``."""
    return _update_own_unresolved(engine, groups, (_RECORD_RESULT, _RECORD_RESULT_BATCH), _result_row)


def record_result_in(conn: Connection, slot: SlotRef, attempt: int, result: ExecutionResult, status: TickStatus,
                     *, shard: int, fence: int) -> int:
    """``record_results``' UPDATE for one tick, in the caller's open transaction; returns the rows it changed.

    It checks no fence itself: the caller holds the shard's fence row FOR
    SHARE (``fences.stored_fence_for_share``). 1 when the tick was still
    unresolved under ``fence``; 0 when it was not (final, or another fence's).
    """
    row = _result_row(slot, attempt, result, status, shard, fence)
    return conn.execute(_RECORD_RESULT, dict(zip(_RECORD_RESULT_BATCH.names, row))).rowcount


def _result_row(s: SlotRef, attempt: int, r: ExecutionResult, status: TickStatus, shard: int, fence: int) -> tuple:
    """A result's fields, in ``_RECORD_RESULT_BATCH.names``' order."""
    if type(status) is not TickStatus:
        status = TickStatus(status)
    # Identity tests and _value_, not is_final and .value: an Enum member's hash and its value property
    # are Python code, and this runs once per tick.
    unfinished = status is TickStatus.RUNNING or status is TickStatus.CLAIMED
    return (s.job_id, s.scheduled_at_ms, shard, fence, status._value_, attempt, r.started_at_ms,
            None if unfinished else r.finished_at_ms, r.exit_code, r.http_status,
            r.output and clip(r.output), r.error and clip(r.error))


def _update_own_unresolved(engine: Engine, groups: Mapping[tuple[int, int], Sequence[tuple]],
                           statements: tuple[object, ticks_batch.BatchUpdate],
                           row: Callable[..., tuple]) -> ManyOutcome:
    """``statements`` (an UPDATE of this fence's unresolved rows, run per row, and its one-statement forms from
    ``ticks_batch``) for every item of every live group, in one fenced transaction, in key order;
    ``row(*item, shard, fence)`` gives an item's bind values, in the order of the batch form's ``names``."""
    per_row, batched = statements
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return ManyOutcome({}, {})

    def work(conn: Connection, live: dict[tuple[int, int], Sequence]) -> dict[int, list[SlotRef]]:
        rows = _in_key_order([row(*item, shard, fence) for (shard, fence), items in live.items() for item in items])
        if rows and conn.dialect.name in ticks_batch.DIALECTS:
            ticks_batch.run_batch_update(conn, batched, rows)
        elif rows:
            conn.execute(per_row, [dict(zip(batched.names, r)) for r in rows])
        return {shard: [item[0] for item in items] for (shard, _), items in live.items()}

    out = run_fenced_many(engine, groups, work)
    return ManyOutcome(out.value, out.fenced_out)


def take_over(engine: Engine, slots: Sequence[SlotRef], *, shard: int, fence: int, node_id: str) -> list[SlotRef]:
    """Adopt orphans: unresolved ticks of older fences become this leader's
    (fence and node_id; status unchanged). Returns the slots that moved.

    Final ticks are never adopted: their fence and node record who ran them.
    """
    keys = _unique_keys(slots)
    if not keys:
        return []

    def work(conn: Connection) -> list[SlotRef]:
        moved: list[SlotRef] = []
        for part in chunks(keys):
            orphan = and_(
                ticks.c.shard == shard,
                ticks.c.fence < fence,
                unresolved(ticks.c.status),
                tuple_(ticks.c.job_id, ticks.c.scheduled_at_ms).in_(part),
            )
            # Two transactions of this leader are not kept apart by the shared
            # fence lock, but they would make the same change: at worst a slot
            # is reported by both.
            found = conn.execute(select(ticks.c.job_id, ticks.c.scheduled_at_ms).where(orphan)).all()
            if found:
                conn.execute(ticks.update().where(orphan).values(fence=fence, node_id=node_id))
                moved += [SlotRef(j, at) for j, at in found]
        return moved

    return run_fenced(engine, shard, fence, work)


def abandon_ticks(
    engine: Engine, slots: Sequence[SlotRef], *, shard: int, fence: int, now_ms: int, reason: str
) -> None:
    """Give up on unresolved ticks (their leader died and the retry budget is
    spent): ``abandoned`` with ``reason``. Applies to this fence's ticks and to
    older fences' orphans alike."""
    keys = _unique_keys(slots)
    if not keys:
        return
    def work(conn: Connection) -> None:
        for part in chunks(keys):
            conn.execute(
                ticks.update()
                .where(
                    ticks.c.shard == shard,
                    ticks.c.fence <= fence,
                    unresolved(ticks.c.status),
                    tuple_(ticks.c.job_id, ticks.c.scheduled_at_ms).in_(part),
                )
                .values(status=TickStatus.ABANDONED.value, error=clip(reason), finished_at_ms=now_ms)
            )

    run_fenced(engine, shard, fence, work)


def list_ticks(engine: Engine, job_id: str, *, limit: int = 50, before_ms: int | None = None) -> list[Tick]:
    """A job's ticks, newest first; pass the oldest slot seen as ``before_ms`` for the next page."""
    q = select(ticks).where(ticks.c.job_id == job_id)
    if before_ms is not None:
        q = q.where(ticks.c.scheduled_at_ms < before_ms)
    q = q.order_by(ticks.c.scheduled_at_ms.desc()).limit(limit)
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


class LastRun(NamedTuple):
    """A job's newest tick scheduled at or before a time and not merely claimed, and its failures in a row."""

    scheduled_at_ms: int | None
    status: TickStatus | None
    failures_in_a_row: int


_FAILED = (TickStatus.FAILED.value, TickStatus.ABANDONED.value)


def _last_runs_query():
    """One statement for a page of jobs: per job, three correlated subqueries on the primary key
    (job_id, scheduled_at_ms). Each ``ORDER BY scheduled_at_ms DESC LIMIT 1`` walks the job's
    index backwards from ``now`` and stops at its first row (the newest tick; the newest
    succeeded one), and the count reads only the rows after that success. A GROUP BY with
    MAX(...) FILTER (status = 'succeeded') would read every row of every job on the page."""
    # A claimed row has not started: the coming slot's, claimed a lookahead early, or a jittered
    # slot waiting for its start. The last run is the newest row that started (or was settled).
    newest = ((ticks.c.job_id == jobs.c.id) & (ticks.c.scheduled_at_ms <= bindparam("now"))
              & (ticks.c.status != TickStatus.CLAIMED.value))
    last = select(ticks.c.scheduled_at_ms).where(newest).order_by(ticks.c.scheduled_at_ms.desc()).limit(1)
    last_status = select(ticks.c.status).where(newest).order_by(ticks.c.scheduled_at_ms.desc()).limit(1)
    ok = ticks.alias("ok")
    last_ok = (select(ok.c.scheduled_at_ms)
               .where(ok.c.job_id == jobs.c.id, ok.c.status == TickStatus.SUCCEEDED.value)
               .order_by(ok.c.scheduled_at_ms.desc()).limit(1).correlate(jobs))  # two levels down: say so
    f = ticks.alias("f")
    failures = (select(func.count())
                .where(f.c.job_id == jobs.c.id, f.c.status.in_(_FAILED), f.c.scheduled_at_ms <= bindparam("now"),
                       f.c.scheduled_at_ms > func.coalesce(last_ok.scalar_subquery(), -(2**62))))
    return select(jobs.c.id, last.scalar_subquery().label("last_at"), last_status.scalar_subquery().label("status"),
                  failures.scalar_subquery().label("failures")).where(jobs.c.id.in_(bindparam("ids", expanding=True)))


_LAST_RUNS = _last_runs_query()


def last_runs(engine: Engine, job_ids: Sequence[str], *, now_ms: int) -> dict[str, LastRun]:
    """job id -> its newest tick scheduled at or before ``now_ms`` that is not merely claimed (one
    that started or was settled; manual runs included) and its
    failures in a row (``scheduling.runs.failures_in_a_row``: failed or abandoned ticks after the
    newest succeeded one; skipped and unfinished ones pass over). One statement per 1,000 ids
    (a ListJobs page is one), never one per job. Jobs not in the store are left out."""
    out: dict[str, LastRun] = {}
    if not job_ids:
        return out
    with reading(engine) as conn:
        for part in chunks(list(job_ids), 1000):
            for r in conn.execute(_LAST_RUNS, {"ids": list(part), "now": now_ms}):
                out[r.id] = LastRun(r.last_at, TickStatus(r.status) if r.status else None, int(r.failures or 0))
    return out


def ticks_between(engine: Engine, from_ms: int, to_ms: int, job_id: str | None = None) -> list[Tick]:
    """Ticks with from_ms <= scheduled_at_ms < to_ms, oldest first (for the audit)."""
    q = select(ticks).where(ticks.c.scheduled_at_ms >= from_ms, ticks.c.scheduled_at_ms < to_ms)
    if job_id is not None:
        q = q.where(ticks.c.job_id == job_id)
    q = q.order_by(ticks.c.scheduled_at_ms, ticks.c.job_id)
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


def runs_busy_since(engine: Engine, job_id: str, *, scheduled_up_to_ms: int, busy_from_ms: int) -> list[Tick]:
    """The job's runs (rows not skipped) scheduled up to ``scheduled_up_to_ms`` that were still
    going at ``busy_from_ms``: unresolved, or finished then or later (for the audit's overlap rule)."""
    q = select(ticks).where(
        ticks.c.job_id == job_id,
        ticks.c.scheduled_at_ms <= scheduled_up_to_ms,
        ticks.c.status != TickStatus.SKIPPED.value,
        or_(ticks.c.finished_at_ms.is_(None), ticks.c.finished_at_ms >= busy_from_ms),
    )
    with reading(engine) as conn:
        return [_tick(r) for r in conn.execute(q)]


def _insert_new(
    engine: Engine,
    batches: Mapping[tuple[int, int], Sequence[SlotClaim]],
    *,
    node_id: str,
    now_ms: int,
    status: str,
    finished_at_ms: int | None,
    error: str | None,
) -> ManyOutcome:
    batches = {k: v for k, v in batches.items() if v}
    if not batches:
        return ManyOutcome({}, {})

    def work(conn: Connection, live: dict[tuple[int, int], Sequence[SlotClaim]]) -> dict[int, list[SlotRef]]:
        # Each slot once, for the first live shard that asks (in the order given).
        wanted: dict[tuple[str, int], tuple[SlotClaim, int, int]] = {}
        for (shard, fence), claims in live.items():
            for c in claims:
                wanted.setdefault((c.job_id, c.scheduled_at_ms), (c, shard, fence))
        if conn.dialect.name in ticks_batch.DIALECTS:
            inserted = ticks_batch.insert_claims(
                conn, [(k[0], k[1], shard, fence, c.manual) for k, (c, shard, fence) in wanted.items()],
                node_id=node_id, status=status, now_ms=now_ms, finished_at_ms=finished_at_ms, error=error)
        else:
            inserted = _insert_absent(conn, wanted, node_id=node_id, now_ms=now_ms, status=status,
                                      finished_at_ms=finished_at_ms, error=error)
        written: dict[int, list[SlotRef]] = {}
        for k, (_, shard, _) in wanted.items():  # in the order given
            if k in inserted:
                written.setdefault(shard, []).append(SlotRef(*k))
        return written

    out = run_fenced_many(engine, batches, work)
    return ManyOutcome(out.value, out.fenced_out)


def _insert_absent(conn: Connection, wanted: Mapping[tuple[str, int], tuple[SlotClaim, int, int]], *, node_id: str,
                   now_ms: int, status: str, finished_at_ms: int | None, error: str | None) -> set[tuple[str, int]]:
    """``ticks_batch.insert_claims`` on MariaDB: the keys of ``wanted`` it inserted."""
    # One SELECT per 500 slots finds the slots that already have a tick;
    # the rest go in as one executemany. Sorted by key, so two
    # transactions inserting overlapping batches lock keys in one order.
    taken: set[tuple[str, int]] = set()
    for part in chunks(sorted(wanted)):
        taken.update((job_id, at) for job_id, at in conn.execute(_TICKS_PRESENT, {"keys": list(part)}))
    new = [wanted[k] for k in sorted(wanted) if k not in taken]
    if new:
        # A plain INSERT, not one that ignores duplicates: if another
        # transaction of this leader inserted one of these slots since the
        # SELECT, the INSERT fails and run_fenced_many re-runs the whole
        # unit, whose SELECT then sees that row. So a slot is returned to
        # exactly one claimant, ever.
        conn.execute(
            ticks.insert(),
            [
                {
                    "job_id": c.job_id,
                    "scheduled_at_ms": c.scheduled_at_ms,
                    "shard": shard,
                    "fence": fence,
                    "node_id": node_id,
                    "status": status,
                    "attempt": 0,
                    "manual": c.manual,
                    "claimed_at_ms": now_ms,
                    "finished_at_ms": finished_at_ms,
                    "error": error,
                }
                for c, shard, fence in new
            ],
        )
    return {(c.job_id, c.scheduled_at_ms) for c, _, _ in new}


# Which of the given (job_id, scheduled_at_ms) keys have a tick. Built once, keys
# bound at execution: a statement built per call with 500 literal pairs cost
# more than the round trip.
_TICKS_PRESENT = select(ticks.c.job_id, ticks.c.scheduled_at_ms).where(
    tuple_(ticks.c.job_id, ticks.c.scheduled_at_ms).in_(bindparam("keys", expanding=True))
)

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
    {"status": f"'{TickStatus.RUNNING.value}'", "attempt": "v.b_attempt", "started_at_ms": "v.b_started"})
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
    {"b_status": "TEXT", "b_attempt": "INTEGER", "b_started": "BIGINT", "b_finished": "BIGINT", "b_exit": "INTEGER",
     "b_http": "INTEGER", "b_output": "TEXT", "b_error": "TEXT"},
    {"status": "v.b_status", "attempt": "v.b_attempt", "started_at_ms": "v.b_started",
     "finished_at_ms": "v.b_finished", "exit_code": "v.b_exit", "http_status": "v.b_http", "output": "v.b_output",
     "error": "v.b_error"})


def _in_key_order(rows: Iterable[tuple]) -> list[tuple]:
    # Row locks taken in one order by every writer cannot deadlock each other. The executemany
    # (MariaDB) locks in this order; an UPDATE ... FROM a batch (ticks_batch) locks in the order its
    # plan visits the rows, so there a deadlock, if two writers ever cross, is broken by the server
    # and the unit re-run by fences.run_fenced_many.
    return sorted(rows, key=_KEY_OF_ROW)


_KEY_OF_ROW = operator.itemgetter(0, 1)  # job id and slot, in C: a lambda here was 4 % of a node's CPU


def _unique_keys(slots: Sequence[SlotRef]) -> list[tuple[str, int]]:
    return sorted({(s.job_id, s.scheduled_at_ms) for s in slots})


def _tick(r) -> Tick:
    return Tick(
        job_id=r.job_id,
        scheduled_at_ms=r.scheduled_at_ms,
        shard=r.shard,
        fence=r.fence,
        node_id=r.node_id,
        status=TickStatus(r.status),
        attempt=r.attempt,
        manual=bool(r.manual),
        claimed_at_ms=r.claimed_at_ms,
        started_at_ms=r.started_at_ms,
        finished_at_ms=r.finished_at_ms,
        exit_code=r.exit_code,
        http_status=r.http_status,
        output=r.output,
        error=r.error,
    )


__all__ = [
    "ManyOutcome",
    "SlotClaim",
    "abandon_ticks",
    "claim_ticks",
    "claim_ticks_many",
    "LastRun",
    "last_runs",
    "last_ticks",
    "list_ticks",
    "mark_running",
    "record_result_in",
    "record_results",
    "record_results_many",
    "runs_busy_since",
    "skip_ticks",
    "take_over",
    "ticks_between",
    "unresolved_ticks",
]
