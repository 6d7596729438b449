"""Named calendars in the store: cluster-wide, not sharded, so written without a fence.

``calendars`` holds each calendar's current definition (``calendars.calendar_to_dict``
as JSON) and version; ``calendar_versions`` keeps every version, a deletion as a
NULL spec, with the writer's clock when it took effect, written in the same
transaction. The audit judges each slot by the version in force at it
(``rules/calendar_history.py``).

Versions keep counting across a delete and a re-create, so (name, version) names
one definition forever.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sqlalchemy import Engine, func, select
from sqlalchemy import exc as sa_exc

from shardcron.errors import ShardcronError, VersionConflict
from shardcron.jobkey import display_key
from shardcron.spec.calendar import Calendar, StoredCalendar
from shardcron.spec.calendar_tables import calendar_to_dict, parse_calendar
from shardcron.spec.job import job_from_json
from shardcron.store.engine import reading, writing
from shardcron.store.schema import calendar_versions, calendars, jobs
from shardcron.store.sql import AnyRow

MAX_USERS_LISTED = 100  # jobs named in an answer about who uses a calendar


class CalendarNotFound(ShardcronError):
    def __init__(self, name: str):
        super().__init__(f"calendar {name!r} not found; `shardcron calendars list` shows the calendars")
        self.name = name


class CalendarInUse(ShardcronError):
    """A delete refused because jobs still name the calendar (FAILED_PRECONDITION)."""

    def __init__(self, name: str, job_ids: list[str]):
        shown = ", ".join(display_key(k) for k in job_ids[:10]) + (
            f" and {len(job_ids) - 10} more" if len(job_ids) > 10 else ""
        )
        super().__init__(
            f"calendar {name!r} is used by {len(job_ids)} job(s): {shown}; change those jobs "
            "first, or delete with --force (they then owe no slot until it is put again)"
        )
        self.name = name
        self.job_ids = job_ids


class CalendarVersionConflict(VersionConflict):
    """ABORTED: the calendar is not at the expected version."""

    def __init__(self, name: str, expected: int | None, actual: int | None):
        if actual is None:
            why = "was created by another call at the same moment; read it and try again"
        else:
            why = f"expected version {expected}, found {actual}"
        ShardcronError.__init__(self, f"calendar {name!r}: {why}")


@dataclass(frozen=True)
class CalendarVersion:
    """One row of the history: ``calendar`` None means deleted from ``effective_at_ms`` on."""

    name: str
    version: int
    effective_at_ms: int
    calendar: Calendar | None


def put_calendar(
    engine: Engine, calendar: Calendar, *, node_id: str, now_ms: int, expected_version: int | None = None
) -> StoredCalendar:
    """Create or replace; ``expected_version`` 0: only create, N: only over version N (else ``VersionConflict``)."""
    spec = json.dumps(calendar_to_dict(calendar), sort_keys=True, separators=(",", ":"))
    try:
        return _put(engine, calendar, spec, node_id, now_ms, expected_version)
    except sa_exc.IntegrityError:
        # Two calls created the same calendar at once (the row lock guards only an existing one).
        raise CalendarVersionConflict(calendar.name, expected_version, None) from None


def _put(
    engine: Engine, calendar: Calendar, spec: str, node_id: str, now_ms: int, expected_version: int | None
) -> StoredCalendar:
    with writing(engine) as conn:
        row = conn.execute(
            select(calendars.c.version).where(calendars.c.name == calendar.name).with_for_update()
        ).first()
        current = row.version if row else 0
        if expected_version is not None and expected_version != current:
            raise CalendarVersionConflict(calendar.name, expected_version, current)
        # After a delete the history goes on counting, so a re-created calendar never reuses a version.
        last = (
            conn.execute(
                select(func.max(calendar_versions.c.version)).where(calendar_versions.c.name == calendar.name)
            ).scalar()
            or 0
        )
        version = max(current, last) + 1
        values = dict(spec=spec, version=version, node_id=node_id, updated_at_ms=now_ms)
        if row is None:
            conn.execute(calendars.insert().values(name=calendar.name, **values))
        else:
            conn.execute(calendars.update().where(calendars.c.name == calendar.name).values(**values))
        conn.execute(
            calendar_versions.insert().values(name=calendar.name, version=version, spec=spec, effective_at_ms=now_ms)
        )
    return StoredCalendar(calendar, version, now_ms)


def import_calendars(engine: Engine, calendars_: Iterable[Calendar], *, node_id: str, now_ms: int) -> list[str]:
    """A node's --jobs file's calendars: each one absent or different is written; returns their names.

    Several nodes may start with one file at once: a write another node won (a version
    conflict, or the same name inserted first) is left to it.
    """
    written = []
    for cal in calendars_:
        try:
            current = get_calendar(engine, cal.name)
        except CalendarNotFound:
            current = None
        if current is not None and current.calendar == cal:
            continue
        try:
            put_calendar(
                engine, cal, node_id=node_id, now_ms=now_ms, expected_version=current.version if current else 0
            )
        except (CalendarVersionConflict, sa_exc.IntegrityError):
            continue
        written.append(cal.name)
    return written


def get_calendar(engine: Engine, name: str) -> StoredCalendar:
    with reading(engine) as conn:
        row = conn.execute(select(calendars).where(calendars.c.name == name)).first()
    if row is None:
        raise CalendarNotFound(name)
    return _stored(row)


def list_calendars(engine: Engine) -> list[StoredCalendar]:
    """Every calendar, by name (a cluster has a handful: no paging)."""
    with reading(engine) as conn:
        rows = conn.execute(select(calendars).order_by(calendars.c.name)).all()
    return [_stored(r) for r in rows]


def delete_calendar(engine: Engine, name: str, *, now_ms: int, force: bool = False) -> None:
    """Delete; refused with ``CalendarInUse`` while a job names it, unless ``force``."""
    users = jobs_using(engine, name)
    if users and not force:
        raise CalendarInUse(name, users)
    with writing(engine) as conn:
        row = conn.execute(select(calendars.c.version).where(calendars.c.name == name).with_for_update()).first()
        if row is None:
            raise CalendarNotFound(name)
        conn.execute(calendars.delete().where(calendars.c.name == name))
        conn.execute(
            calendar_versions.insert().values(name=name, version=row.version + 1, spec=None, effective_at_ms=now_ms)
        )


def jobs_using(
    engine: Engine, name: str, limit: int = MAX_USERS_LISTED, namespaces: Collection[str] | None = None
) -> list[str]:
    """Keys of jobs whose definition names ``name``, by key, at most ``limit``; of ``namespaces`` only
    (None: every namespace; the API lists only the caller's).

    The spec is JSON text: a LIKE finds the candidates (only jobs with calendars at all),
    and each is parsed to be sure. A full scan of jobs, paid on a delete or a get only.
    """
    q = select(jobs.c.id, jobs.c.spec).where(jobs.c.spec.contains('"calendars"')).order_by(jobs.c.id)
    if namespaces is not None:
        q = q.where(jobs.c.namespace.in_(sorted(namespaces)))
    out = []
    with reading(engine) as conn:
        for row in conn.execute(q):
            if name in job_from_json(row.spec).calendars:
                out.append(row.id)
                if len(out) >= limit:
                    break
    return out


def calendar_history(engine: Engine, names: Iterable[str] | None = None) -> list[CalendarVersion]:
    """Every version of the named calendars (all, when ``names`` is None), by name then version."""
    q = select(calendar_versions).order_by(calendar_versions.c.name, calendar_versions.c.version)
    if names is not None:
        wanted = sorted(set(names))
        if not wanted:
            return []
        q = q.where(calendar_versions.c.name.in_(wanted))
    with reading(engine) as conn:
        rows = conn.execute(q).all()
    return [
        CalendarVersion(
            r.name, r.version, r.effective_at_ms, None if r.spec is None else parse_calendar(r.name, json.loads(r.spec))
        )
        for r in rows
    ]


def _stored(row: AnyRow) -> StoredCalendar:
    return StoredCalendar(parse_calendar(row.name, json.loads(row.spec)), row.version, row.updated_at_ms)


__all__ = [
    "CalendarInUse",
    "CalendarNotFound",
    "CalendarVersionConflict",
    "CalendarVersion",
    "StoredCalendar",
    "calendar_history",
    "delete_calendar",
    "get_calendar",
    "import_calendars",
    "jobs_using",
    "list_calendars",
    "put_calendar",
]
