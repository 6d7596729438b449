"""Namespaces in the store: their weight and quotas, and their usage kept exact under the row's lock.

A namespace's row (``schema.namespaces``) holds its settings and its usage: the
jobs it holds and the sum of their peak rates (``rules.quotas.job_rate``), a
``Fraction`` as text so that ten jobs every 3 s sum to exactly 10/3. Namespaces are
cluster-wide, not sharded: their own writes take no fence.

Usage is changed only inside the transaction of the job write that changes it
(``store/jobs.py`` calls ``lock_rooms``/``take_room`` and ``give_back``): the
row is read ``FOR UPDATE`` there, so two puts on two leaders for the namespace's
last room queue on the row and the second sees what the first took. SQLite
serialises its writers anyway (BEGIN IMMEDIATE, see engine.py). Lock order:
a job write locks its job rows first, then namespace rows in name order, so
writers cannot wait on each other in a cycle.

``default`` always exists: requests and job files that name no namespace use it,
so its row is created whenever it is found missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from croniter import CroniterError
from sqlalchemy import Connection, Engine, bindparam, func, select
from sqlalchemy import exc as sa_exc

from shardcron.errors import (
    InvalidJob,
    NamespaceExists,
    NamespaceMissing,
    NamespaceNotFound,
    QuotaRefused,
    ShardcronError,
)
from shardcron.jobkey import DEFAULT_NAMESPACE
from shardcron.model import Schedule
from shardcron.rules.namespace_settings import NamespaceSettings, StoredNamespace, check_weight
from shardcron.rules.quotas import (
    QUOTA_KEYS,
    PutChange,
    Quota,
    QuotaExceeded,
    Usage,
    check_put,
    job_rate,
    usage_after,
)
from shardcron.spec.job import job_from_dict
from shardcron.spec.namespaces import delete_refusal
from shardcron.spec.schedule import shortest_gap_ms
from shardcron.store.engine import reading, writing
from shardcron.store.schema import jobs, namespaces
from shardcron.store.sql import AnyRow, insert_ignoring_duplicates


class NamespaceInUse(ShardcronError):
    """A delete refused (FAILED_PRECONDITION): ``default``, or a namespace that still holds jobs."""


# -- management ---------------------------------------------------------------------------------


def create_namespace(
    engine: Engine, name: str, settings: NamespaceSettings, *, node_id: str, now_ms: int
) -> StoredNamespace:
    """A new namespace with no jobs; ``NamespaceExists`` when the name is taken."""
    check_weight(settings.weight)
    row = {
        "name": name,
        "weight": settings.weight,
        **_quota_columns(settings.quota),
        "jobs": 0,
        "slots_per_second": "0",
        "node_id": node_id,
        "created_at_ms": now_ms,
        "updated_at_ms": now_ms,
    }
    try:
        with writing(engine) as conn:
            if name == DEFAULT_NAMESPACE:
                _ensure_default(conn, now_ms)  # it always exists: the insert below then says so
            conn.execute(namespaces.insert().values(**row))
    except sa_exc.IntegrityError:
        raise NamespaceExists(name) from None
    return StoredNamespace(name, settings, Usage(), now_ms, now_ms)


def get_namespace(engine: Engine, name: str) -> StoredNamespace:
    if name == DEFAULT_NAMESPACE:
        _ensure_default_row(engine)
    with reading(engine) as conn:
        row = conn.execute(select(namespaces).where(namespaces.c.name == name)).first()
    if row is None:
        raise NamespaceNotFound(name)
    return _stored(row)


def list_namespaces(engine: Engine) -> list[StoredNamespace]:
    """Every namespace, by name (a cluster has tens: no paging)."""
    _ensure_default_row(engine)
    with reading(engine) as conn:
        rows = conn.execute(select(namespaces).order_by(namespaces.c.name)).all()
    return [_stored(r) for r in rows]


def namespace_settings(engine: Engine) -> dict[str, NamespaceSettings]:
    """What each node's scheduler runs ticks with: every namespace's weight and quota."""
    with reading(engine) as conn:
        rows = conn.execute(select(namespaces)).all()
    return {r.name: _settings(r) for r in rows}


def update_namespace(
    engine: Engine,
    name: str,
    *,
    weight: float | None = None,
    quota: Mapping[str, int | Fraction | None] | None = None,
    node_id: str,
    now_ms: int,
) -> StoredNamespace:
    """Change the weight (None: unchanged) and the named quotas (a value of None removes that limit).

    Lowering a quota below the usage is allowed: it then refuses growth only
    (``rules.quotas``), never a delete or a slower replacement."""
    values: dict[str, object] = {}
    if weight is not None:
        values["weight"] = check_weight(weight)
    unknown = sorted(set(quota or ()) - set(QUOTA_KEYS))
    if unknown:
        raise InvalidJob(f"quota.{unknown[0]}", f"is not a quota; the quotas are {', '.join(QUOTA_KEYS)}")
    if quota:
        given: dict[str, Any] = {k: quota.get(k) for k in quota}  # names checked above; Quota's types, by the caller
        values.update(_quota_columns(Quota(**given), only=quota.keys()))
    with writing(engine) as conn:
        if name == DEFAULT_NAMESPACE:
            _ensure_default(conn, now_ms)
        row = conn.execute(select(namespaces).where(namespaces.c.name == name).with_for_update()).first()
        if row is None:
            raise NamespaceNotFound(name)
        if values:
            conn.execute(
                namespaces.update()
                .where(namespaces.c.name == name)
                .values(**values, node_id=node_id, updated_at_ms=now_ms)
            )
            row = conn.execute(select(namespaces).where(namespaces.c.name == name)).one()  # locked above
    return _stored(row)


def delete_namespace(engine: Engine, name: str) -> None:
    """Delete the namespace's row; refused (``NamespaceInUse``) for ``default`` or while it holds jobs.

    A forced delete (the API's) deletes the jobs first, each under its shard's
    fence, then calls this: the count is taken under the row's lock, so a put that
    raced in is seen and the delete refused rather than the job orphaned."""
    with writing(engine) as conn:
        row = conn.execute(select(namespaces.c.name).where(namespaces.c.name == name).with_for_update()).first()
        if row is None and name != DEFAULT_NAMESPACE:
            raise NamespaceNotFound(name)
        refusal = delete_refusal(name, _count_jobs(conn, name), force=False)
        if refusal:
            raise NamespaceInUse(refusal)
        conn.execute(namespaces.delete().where(namespaces.c.name == name))


def count_jobs(engine: Engine, name: str) -> int:
    with reading(engine) as conn:
        return _count_jobs(conn, name)


def job_keys(engine: Engine, name: str, *, after: str | None = None, limit: int = 500) -> list[str]:
    """A page of the namespace's job keys in key order (the (namespace, id) index); pass the last as ``after``."""
    q = select(jobs.c.id).where(jobs.c.namespace == name).order_by(jobs.c.id).limit(limit)
    if after is not None:
        q = q.where(jobs.c.id > after)
    with reading(engine) as conn:
        return list(conn.execute(q).scalars())


# -- usage, inside a job write's transaction ---------------------------------------------------------


@dataclass
class _Room:
    quota: Quota
    before: Usage
    usage: Usage


@dataclass
class Rooms:
    """The namespace rows a job write locked: admits its puts in turn and gives back what deletes free.

    ``save`` writes the usage that changed; nothing is written for a namespace whose usage did not move."""

    rooms: dict[str, _Room] = field(default_factory=dict)

    def admit(self, namespace: str, change: PutChange) -> ShardcronError | None:
        """None when the put fits (and is counted), else why not: ``QuotaRefused`` or ``NamespaceMissing``."""
        room = self.rooms.get(namespace)
        if room is None:
            return NamespaceMissing(namespace)
        refused = check_put(namespace, room.quota, room.usage, change)
        if refused is not None:
            return QuotaRefused(refused)
        room.usage = usage_after(room.usage, change)
        return None

    def release(self, namespace: str, rate: Fraction) -> None:
        """A job of ``namespace`` of this rate was deleted (a namespace without a row: nothing to give back)."""
        room = self.rooms.get(namespace)
        if room is not None:
            u = room.usage
            # Never below 0: a count that drifted (a row restored by hand) must not refuse what is within it.
            room.usage = replace(
                u, jobs=max(0, u.jobs - 1), slots_per_second=max(Fraction(0), u.slots_per_second - rate)
            )

    def save(self, conn: Connection) -> None:
        rows = [
            {"b_name": n, "b_jobs": r.usage.jobs, "b_rate": _fraction_text(r.usage.slots_per_second)}
            for n, r in sorted(self.rooms.items())
            if r.usage != r.before
        ]
        if rows:
            conn.execute(_SET_USAGE, rows)


_SET_USAGE = (
    namespaces.update()
    .where(namespaces.c.name == bindparam("b_name"))
    .values(jobs=bindparam("b_jobs"), slots_per_second=bindparam("b_rate"))
)
_ROWS_FOR_UPDATE = (
    select(namespaces)
    .where(namespaces.c.name.in_(bindparam("names", expanding=True)))
    .order_by(namespaces.c.name)
    .with_for_update()
)


def lock_rooms(conn: Connection, names: Iterable[str], now_ms: int = 0) -> Rooms:
    """Lock the rows of ``names`` (in name order) in the caller's transaction and read their quota and usage.

    A name without a row has no room (``Rooms.admit`` says ``NamespaceMissing``), except ``default``, whose
    row is created here when missing."""
    wanted = sorted(set(names))
    if not wanted:
        return Rooms()
    rows = conn.execute(_ROWS_FOR_UPDATE, {"names": wanted}).all()
    if DEFAULT_NAMESPACE in wanted and not any(r.name == DEFAULT_NAMESPACE for r in rows):
        _ensure_default(conn, now_ms)  # rarely: only a store whose row went missing
        rows = conn.execute(_ROWS_FOR_UPDATE, {"names": wanted}).all()
    return Rooms({r.name: _Room(_settings(r).quota, _usage(r), _usage(r)) for r in rows})


def take_room(
    conn: Connection, namespace: str, changes: Sequence[PutChange], now_ms: int = 0
) -> list[QuotaExceeded | None]:
    """Admit ``changes`` to ``namespace`` in order under its row's lock and write the new usage:
    one answer per change, None (admitted) or the quota it would cross. ``NamespaceMissing`` when
    the namespace has no row."""
    rooms = lock_rooms(conn, [namespace], now_ms)
    out: list[QuotaExceeded | None] = []
    for change in changes:
        answer = rooms.admit(namespace, change)
        if isinstance(answer, NamespaceMissing):
            raise answer
        out.append(answer.exceeded if isinstance(answer, QuotaRefused) else None)
    rooms.save(conn)
    return out


def give_back(conn: Connection, namespace: str, removed_rates: Sequence[Fraction]) -> None:
    """Deleted jobs of ``namespace`` (their rates): their room is free again, in the caller's transaction."""
    if not removed_rates:
        return
    rooms = lock_rooms(conn, [namespace])
    for rate in removed_rates:
        rooms.release(namespace, rate)
    rooms.save(conn)


def schedule_rate(schedule: Schedule) -> Fraction:
    """``quotas.job_rate``, never failing: a cron whose shortest gap croniter cannot walk to (a date that
    never comes, such as 30 February) is rated by the gap its fields imply, a lower bound of the real one,
    so its rate is never understated."""
    try:
        return job_rate(schedule)
    except CroniterError:
        gap = shortest_gap_ms(schedule, below_ms=1)  # the fields' bound: no walk through the calendar
        return Fraction(0) if not gap else Fraction(1000, gap)


def rate_of_spec(spec: str | None) -> Fraction:
    """The peak rate of a stored job spec. One this version cannot read counts 0, as migration 0007
    counted it (the node and the audit report such a job on their own)."""
    if spec is None:
        return Fraction(0)
    try:
        # Read with a stand-in id: the spec of a namespaced job holds its key, which the id rule refuses
        # (it holds U+001F), and the rate is the schedule's alone.
        return schedule_rate(job_from_dict(json.loads(spec), job_id="rate").schedule)
    except (InvalidJob, ValueError):
        return Fraction(0)


# -- rows ------------------------------------------------------------------------------------------


def _ensure_default(conn: Connection, now_ms: int) -> None:
    """``default``'s row, made when missing (by an empty store's schema, or by hand); its usage then
    counts the jobs there are, as migration 0007 does."""
    if conn.execute(select(namespaces.c.name).where(namespaces.c.name == DEFAULT_NAMESPACE)).first():
        return
    count, rate = 0, Fraction(0)
    for (spec,) in conn.execute(select(jobs.c.spec).where(jobs.c.namespace == DEFAULT_NAMESPACE)):
        count, rate = count + 1, rate + rate_of_spec(spec)
    insert_ignoring_duplicates(
        conn,
        namespaces,
        [
            {
                "name": DEFAULT_NAMESPACE,
                "weight": 1.0,
                "max_jobs": None,
                "max_slots_per_second": None,
                "max_running": None,
                "jobs": count,
                "slots_per_second": _fraction_text(rate),
                "node_id": "",
                "created_at_ms": now_ms,
                "updated_at_ms": now_ms,
            }
        ],
    )


def _ensure_default_row(engine: Engine) -> None:
    with reading(engine) as conn:
        if conn.execute(select(namespaces.c.name).where(namespaces.c.name == DEFAULT_NAMESPACE)).first():
            return
    with writing(engine) as conn:
        _ensure_default(conn, 0)


def _count_jobs(conn: Connection, name: str) -> int:
    return conn.execute(select(func.count()).select_from(jobs).where(jobs.c.namespace == name)).scalar() or 0


def _quota_columns(quota: Quota, only: Iterable[str] | None = None) -> dict[str, int | str | None]:
    cols = {
        "max_jobs": quota.max_jobs,
        "max_running": quota.max_running,
        "max_slots_per_second": None
        if quota.max_slots_per_second is None
        else _fraction_text(quota.max_slots_per_second),
    }
    return cols if only is None else {k: cols[k] for k in only}


def _fraction_text(x: Fraction) -> str:
    return str(Fraction(x))  # "10/3", "5", "0": exact, and Fraction() reads it back


def _settings(row: AnyRow) -> NamespaceSettings:
    rate = row.max_slots_per_second
    return NamespaceSettings(
        float(row.weight), Quota(row.max_jobs, None if rate is None else Fraction(rate), row.max_running)
    )


def _usage(row: AnyRow) -> Usage:
    return Usage(int(row.jobs), Fraction(row.slots_per_second))


def _stored(row: AnyRow) -> StoredNamespace:
    return StoredNamespace(row.name, _settings(row), _usage(row), row.created_at_ms, row.updated_at_ms)


__all__ = [
    "NamespaceInUse",
    "Rooms",
    "count_jobs",
    "create_namespace",
    "delete_namespace",
    "get_namespace",
    "give_back",
    "job_keys",
    "list_namespaces",
    "lock_rooms",
    "namespace_settings",
    "rate_of_spec",
    "schedule_rate",
    "take_room",
    "update_namespace",
]
