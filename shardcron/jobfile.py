"""Job files (TOML, YAML or JSON): a list of jobs, or a table of them keyed by id.

    [[jobs]]                         jobs:
    id = "heartbeat"                   heartbeat:
    every = "1s"                         every: 1s
    executor = { kind = "noop" }         executor: {kind: noop}

A file may also define calendars the jobs name (``shardcron jobs apply`` puts
them before its jobs; see ``scheduling/calendars.parse_calendar`` for the keys):

    [calendars.business]             calendars:
    timezone = "Europe/Lisbon"         business:
    windows = { mon-fri = "09:00-18:00" }  timezone: Europe/Lisbon

A top-level ``namespace = "team-a"`` puts every job of the file in that namespace
(a job's own ``namespace`` key wins); without one, the jobs go to the namespace
``shardcron jobs apply`` names with ``-n`` (or SHARDCRON_NAMESPACE), else ``default``.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from shardcron.errors import InvalidJob, ShardcronError, job_named
from shardcron.jobspec import job_from_dict
from shardcron.model import Job
from shardcron.scheduling.calendars import Calendar, CalendarError, parse_calendar
from shardcron.tenancy.namespaces import validate_namespace


class JobFileError(ShardcronError):
    pass


def read_data_file(path: str) -> Mapping | object:
    """The TOML (default), YAML (.yaml, .yml) or JSON (.json) file at ``path`` as plain data."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise JobFileError(f"{path}: cannot read: {e.strerror or e}") from None
    kind = {".yaml": "YAML", ".yml": "YAML", ".json": "JSON"}.get(p.suffix.lower(), "TOML")
    try:
        if kind == "YAML":
            data = yaml.safe_load(text) or {}
        elif kind == "JSON":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, ValueError) as e:
        raise JobFileError(f"{path}: not valid {kind}: {e}") from None
    return data


def load_file_calendars(path: str, data: object = None) -> list[Calendar]:
    """The calendars a job file defines under ``calendars`` (none when it has no such table)."""
    data = read_data_file(path) if data is None else data
    raw = data.get("calendars") if isinstance(data, Mapping) else None
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise JobFileError(f"{path}: 'calendars' must be a table of calendars keyed by name")
    try:
        return [parse_calendar(str(name), body) for name, body in raw.items()]
    except CalendarError as e:
        raise JobFileError(f"{path}: calendars.{e.calendar}: {e.field}: {e.reason}") from None


def load_job_file(path: str, admit: Callable[[Job], None] | None = None) -> list[Job]:
    """The jobs of the file at ``path``; ``admit(job)`` may refuse one (``InvalidJob``), which is
    reported like a malformed job: the file, the job, the field (a node's --min-interval, --allow-shell)."""
    data = read_data_file(path)
    if not isinstance(data, Mapping) or "jobs" not in data:
        hint = difflib.get_close_matches("jobs", [str(k) for k in data], n=1) if isinstance(data, Mapping) else []
        raise JobFileError(f"{path}: expected a top-level 'jobs' list or table"
                           + (f" (found {hint[0]!r}: did you mean 'jobs'?)" if hint else ""))
    for key in data:
        if key not in ("jobs", "calendars", "namespace"):
            raise JobFileError(f"{path}: {key}: unknown top-level key; a job file holds only 'jobs', 'calendars' "
                               "and 'namespace'")
    namespace = data.get("namespace")
    if namespace is not None:
        try:
            validate_namespace(namespace)
        except InvalidJob as e:
            raise JobFileError(f"{path}: {e}") from None
    raw = data["jobs"]
    if isinstance(raw, Mapping):
        entries = [(str(k), v) for k, v in raw.items()]
    elif isinstance(raw, list):
        entries = [(None, v) for v in raw]
    else:
        raise JobFileError(f"{path}: 'jobs' must be a list or a table")
    jobs: list[Job] = []
    seen: set[str] = set()
    for i, (job_id, body) in enumerate(entries):
        named = job_id or (body.get("id") if isinstance(body, Mapping) else None)
        where = f"job {named!r}" if isinstance(named, str) and named else f"jobs[{i}]"
        try:
            # A file states every job's executor: a forgotten one must not become a noop.
            if namespace is not None and isinstance(body, Mapping) and "namespace" not in body:
                body = {**body, "namespace": namespace}
            job = job_from_dict(body, job_id=job_id, require_executor=True)
            if admit is not None:
                admit(job)
        except InvalidJob as e:
            raise JobFileError(f"{path}: {where}: {e}") from None
        if job.id in seen:
            raise JobFileError(f"{path}: {job_named(job.id)} appears twice")
        seen.add(job.id)
        jobs.append(job)
    return jobs
