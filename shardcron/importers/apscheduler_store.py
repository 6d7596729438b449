"""An APScheduler 3 ``SQLAlchemyJobStore`` as shardcron jobs: one ``python`` job per stored job, calling the
same function with the same arguments on the shard's leader.

The store is read, never written: each row is restored with APScheduler's own ``lookup_job`` (its
``get_all_jobs`` deletes the rows it cannot restore). A row whose callable does not import is refused, named
by its id and its callable's textual reference, read from the pickled state without importing anything.
"""

from __future__ import annotations

import io
import os
import pickle
from datetime import UTC, datetime
from typing import Any

from shardcron.errors import InvalidJob
from shardcron.importers.apscheduler_triggers import schedule_keys
from shardcron.importers.result import Imported, ImportResult, Refused, UniqueIds, id_stem
from shardcron.importers.translate import EntryRefused, SourceUnreadable, as_json, json_problem, ms_text, require
from shardcron.spec.bounds import MAX_DURATION_MS
from shardcron.spec.job import job_from_dict

DEFAULT_TABLE = "apscheduler_jobs"
STOP_NOTE = (
    "Shut the APScheduler scheduler down (or remove these jobs from its store) before these jobs run, or "
    "every run happens twice."
)


def import_apscheduler(url: str, table: str = DEFAULT_TABLE, *, now: datetime | None = None) -> ImportResult:
    """The jobs in the APScheduler job store at SQLAlchemy ``url`` (its table ``table``) as python jobs.
    ``now`` (default: the clock) decides whether a start date is still ahead. Raises ``SourceUnreadable``
    when the store cannot be opened or has no such table."""
    require(
        "apscheduler.jobstores.sqlalchemy", "reading an APScheduler 3 job store", "pip install 'shardcron[apscheduler]'"
    )
    store, rows = _open(url, table)
    now = now or datetime.now(UTC)
    result = ImportResult(notes=[STOP_NOTE])
    ids = UniqueIds()
    modules: list[str] = []
    unrestored = False
    try:
        for row_id, state in rows:
            where = f"{table} job {row_id!r}"
            try:
                job = store.lookup_job(row_id)
            except Exception as e:  # restoring imports the job's module and unpickles its trigger: anything
                reason = f"its callable {stored_func_ref(state)} does not restore: {type(e).__name__}: {e}"
                result.refused.append(Refused(where, reason))
                unrestored = True
                continue
            entry = _translated(job, where, now, ids)
            if isinstance(entry, Refused):
                result.refused.append(entry)
                continue
            result.jobs.append(entry)
            if (module := job.func_ref.partition(":")[0]) not in modules:
                modules.append(module)
    finally:
        store.shutdown()
    if unrestored:
        result.notes.append(
            "Some callables did not import here: run the import where the project's modules import (its "
            "directory on PYTHONPATH), or those jobs are refused."
        )
    if modules:
        flags = " ".join(f"--allow-python {m}" for m in modules)
        result.notes.append(
            f"These jobs call Python functions on the shard's leader: start every node with {flags} "
            "(each function must be defined in that module, not imported into it)."
        )
    return result


def _translated(job: Any, where: str, now: datetime, ids: UniqueIds) -> Imported | Refused:
    """A restored job as the job it becomes, checked by shardcron's own parser, or refused with the reason."""
    try:
        table, notes = job_table(job, now, ids)
        job_from_dict(table, require_executor=True)
    except EntryRefused as e:
        return Refused(where, e.reason, str(job))
    except InvalidJob as e:
        return Refused(where, f"shardcron refuses the job it becomes: {e}", str(job))
    return Imported(where, table, tuple(notes))


def job_table(job: Any, now: datetime, ids: UniqueIds) -> tuple[dict[str, Any], list[str]]:
    """A restored APScheduler job as a job's table, and the notes on what is approximated."""
    notes: list[str] = []
    executor: dict[str, Any] = {"kind": "python", "target": job.func_ref}
    for key, value in (("args", list(job.args)), ("kwargs", dict(job.kwargs))):
        if value:
            problem = json_problem(value, key)
            if problem:
                raise EntryRefused(f"{key} must travel as JSON: {problem}")
            executor[key] = as_json(value)
    table: dict[str, Any] = {
        "id": ids.take(id_stem(job.id)),
        **schedule_keys(job.trigger, now, notes),
        **_missed_runs(job.misfire_grace_time, job.coalesce, notes),
        "overlap": "skip" if job.max_instances <= 1 else "allow",
        "executor": executor,
    }
    if job.max_instances > 1:
        notes.append(f"APScheduler allowed {job.max_instances} runs at once; shardcron allows any number")
    if job.next_run_time is None:
        table["paused"] = True
    if job.executor != "default":
        notes.append(f"APScheduler ran it on its executor {job.executor!r}; shardcron calls it on the leader")
    if job.name and job.name != job.func_ref.rpartition(":")[2]:
        notes.append(f"APScheduler's name for it: {job.name!r}")
    return table, notes


def _missed_runs(grace_s: float | None, coalesce: bool, notes: list[str]) -> dict[str, Any]:
    """Catch-up: coalesce runs only the latest missed run, else every one; misfire_grace_time is how late a
    run may still start (None: however late), which is the catch-up window."""
    if grace_s is None:
        window_ms = MAX_DURATION_MS
        notes.append("misfire_grace_time None (however late): the catch-up window is shardcron's longest, ten years")
    else:
        window_ms = round(grace_s * 1000)
    return {"catchup": "latest" if coalesce else "all", "catchup_window": ms_text(window_ms)}


def stored_func_ref(state: bytes) -> str:
    """The textual reference (``module:function``) of a job's callable, from its pickled state, importing
    nothing: every class the pickle names is read as an inert stand-in."""
    try:
        loaded = _InertUnpickler(state).load()
    except Exception:  # a damaged pickle: say so rather than fail the import
        return "(unreadable state)"
    func = loaded.get("func") if isinstance(loaded, dict) else None
    return repr(func) if isinstance(func, str) else "(no textual reference)"


class _Inert:
    """Whatever a pickle names, built without importing it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:  # a stand-in for a function the pickle calls
        return _Inert()


class _InertUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))

    def find_class(self, module: str, name: str) -> Any:
        return _Inert


def _open(url: str, table: str) -> tuple[Any, list[tuple[str, bytes]]]:
    """APScheduler's store on ``url`` and its rows (id, pickled state), in the order it runs them."""
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from sqlalchemy import inspect, make_url, select
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        where = make_url(url)
    except ArgumentError as e:
        raise SourceUnreadable(f"{url!r} is not a SQLAlchemy URL: {e}") from None
    if where.drivername.startswith("sqlite") and where.database not in (None, "", ":memory:"):
        if not os.path.isfile(where.database):  # SQLite would create an empty one
            raise SourceUnreadable(f"{url!r}: no such file {where.database!r}")
    try:
        store = SQLAlchemyJobStore(url=url, tablename=table)
    except (ArgumentError, ValueError, ImportError) as e:
        raise SourceUnreadable(f"{url!r} is not a SQLAlchemy URL this machine can open: {e}") from None
    try:
        if not inspect(store.engine).has_table(table):
            raise SourceUnreadable(f"{store.engine.url!r} has no table {table!r} (give the store's tablename)")
        columns = store.jobs_t.c
        query = select(columns.id, columns.job_state).order_by(columns.next_run_time, columns.id)
        with store.engine.connect() as connection:
            rows = [(row.id, row.job_state) for row in connection.execute(query)]
    except SQLAlchemyError as e:
        store.shutdown()
        raise SourceUnreadable(f"cannot read table {table!r} at {store.engine.url!r}: {e}") from None
    except SourceUnreadable:
        store.shutdown()
        raise
    return store, rows
