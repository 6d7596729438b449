"""Job files (TOML, YAML or JSON): a list of jobs, or a table of them keyed by id.

    [[jobs]]                         jobs:
    id = "heartbeat"                   heartbeat:
    every = "1s"                         every: 1s
    executor = { kind = "noop" }         executor: {kind: noop}

A file may also define calendars the jobs name (``shardcron jobs apply`` puts
them before its jobs; see ``spec/calendar_tables.parse_calendar`` for the keys):

    [calendars.business]             calendars:
    timezone = "Europe/Lisbon"         business:
    windows = { mon-fri = "09:00-18:00" }  timezone: Europe/Lisbon

A top-level ``namespace = "team-a"`` puts every job of the file in that namespace
(a job's own ``namespace`` key wins); without one, the jobs go to the namespace
``shardcron jobs apply`` names with ``-n`` (or SHARDCRON_NAMESPACE), else ``default``.

A file is read as a caller's text (limits in ``bounds.py``): at most 64 MiB, read
no further than that; UTF-8 only; nested at most 64 levels; in YAML no anchors
nor aliases (``&a``, ``*a``, ``<<: *a``), which let a few bytes expand to gigabytes.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shardcron.errors import InvalidJob, ShardcronError, job_named
from shardcron.model import Job
from shardcron.spec.bounded_text import NotUtf8, TooLarge, read_bounded, utf8
from shardcron.spec.bounds import INT64_MAX, INT64_MIN, MAX_FILE_BYTES, MAX_FILE_DEPTH, cut, shown
from shardcron.spec.calendar import Calendar, CalendarError
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from shardcron.spec.namespaces import validate_namespace
from shardcron.spec.nesting import text_depth, value_depth


class JobFileError(ShardcronError):
    pass


def read_data_file(path: str) -> object:
    """The TOML (default), YAML (.yaml, .yml) or JSON (.json) file at ``path`` as plain data."""
    text = read_text_file(path)
    kind = {".yaml": "YAML", ".yml": "YAML", ".json": "JSON"}.get(Path(path).suffix.lower(), "TOML")
    too_deep = JobFileError(f"{path}: nested deeper than the limit of {MAX_FILE_DEPTH} levels")
    if kind == "JSON" and text_depth(text, MAX_FILE_DEPTH) > MAX_FILE_DEPTH:
        raise too_deep  # measured before parsing: json.loads recurses per level
    try:
        if kind == "YAML":
            data = yaml.load(text, Loader=BoundedYamlLoader) or {}  # noqa: S506 - a SafeLoader, bounded
        elif kind == "JSON":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except RefusedYaml as e:
        raise JobFileError(f"{path}: {e}") from None
    except RecursionError:  # tomllib recurses per level of nesting; the limit below says how deep is allowed
        raise too_deep from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError, ValueError) as e:
        raise JobFileError(f"{path}: not valid {kind}: {cut(str(e), 400)}") from None
    if value_depth(data, MAX_FILE_DEPTH) > MAX_FILE_DEPTH:
        raise too_deep
    return data


def read_text_file(path: str) -> str:
    """The UTF-8 text of the file at ``path``, read no further than ``bounds.MAX_FILE_BYTES`` plus one byte."""
    try:
        return utf8(read_bounded(path, MAX_FILE_BYTES))
    except OSError as e:
        raise JobFileError(f"{path}: cannot read: {e.strerror or e}") from None
    except TooLarge:
        raise JobFileError(f"{path}: larger than the limit of {MAX_FILE_BYTES // (1024 * 1024)} MiB") from None
    except NotUtf8 as e:
        raise JobFileError(f"{path}: not UTF-8: {e}; save the file as UTF-8") from None


class RefusedYaml(Exception):
    """YAML that ``BoundedYamlLoader`` refuses: an anchor, an alias, or nesting past the limit."""


class BoundedYamlLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, refusing anchors and aliases and nesting deeper than ``bounds.MAX_FILE_DEPTH``.

    The check sits in ``compose_node``, before a node is built: an alias is refused
    before anything expands it, and the composer (which recurses per level) never
    goes deeper than the limit. The parser beneath it keeps its own stack, not Python's.
    """

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves peek_event untyped
        where = f"line {event.start_mark.line + 1}, column {event.start_mark.column + 1}"
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise RefusedYaml(
                f"{where}: YAML anchors and aliases (&name, *name, <<: *name) are not accepted in a "
                "job file (one alias can expand to gigabytes); write each value out"
            )
        if self._depth >= MAX_FILE_DEPTH:
            raise RefusedYaml(f"{where}: nested deeper than the limit of {MAX_FILE_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


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


@dataclass(frozen=True)
class JobFile:
    """A job file, read once: its jobs, its calendars, and its top-level ``namespace`` (None: not given)."""

    jobs: list[Job]
    calendars: list[Calendar]
    namespace: str | None


def read_job_file(path: str, fallback_namespace: str | None = None) -> JobFile:
    """Everything the file at ``path`` defines (``shardcron jobs apply`` and ``diff``); ``fallback_namespace``:
    see ``load_job_file``."""
    data = read_data_file(path)
    jobs = load_job_file(path, data=data, fallback_namespace=fallback_namespace)
    assert isinstance(data, Mapping), "load_job_file refuses a file that is not a table"
    return JobFile(jobs, load_file_calendars(path, data), data.get("namespace"))


def load_job_file(
    path: str,
    admit: Callable[[Job], None] | None = None,
    data: object = None,
    fallback_namespace: str | None = None,
) -> list[Job]:
    """The jobs of the file at ``path`` (``data``: its contents, already read); ``admit(job)`` may refuse one
    (``InvalidJob``), which is reported like a malformed job: the file, the job, the field (a node's
    --min-interval, --allow-shell). ``fallback_namespace``: of a job when neither it nor the file names
    one (``-n``); None leaves such a job's key bare, for its caller to place."""
    data = read_data_file(path) if data is None else data
    if not isinstance(data, Mapping) or "jobs" not in data:
        keys = [k for k in data if isinstance(k, str)] if isinstance(data, Mapping) else []
        hint = difflib.get_close_matches("jobs", keys, n=1)
        raise JobFileError(
            f"{path}: expected a top-level 'jobs' list or table"
            + (f" (found {shown(hint[0])}: did you mean 'jobs'?)" if hint else "")
        )
    for key in data:
        if key not in ("jobs", "calendars", "namespace"):
            raise JobFileError(
                f"{path}: {shown(key)}: unknown top-level key; a job file holds only 'jobs', "
                "'calendars' and 'namespace'"
            )
    namespace = data.get("namespace")
    if namespace is not None:
        try:
            validate_namespace(namespace)
        except InvalidJob as e:
            raise JobFileError(f"{path}: {e}") from None
    raw = data["jobs"]
    if isinstance(raw, Mapping):
        entries: list[tuple[str | None, Any]] = [(_table_id(path, k), v) for k, v in raw.items()]
    elif isinstance(raw, list):
        entries = [(None, v) for v in raw]
    else:
        raise JobFileError(f"{path}: 'jobs' must be a list or a table")
    jobs: list[Job] = []
    seen: set[str] = set()
    for i, (job_id, body) in enumerate(entries):
        named = job_id or (body.get("id") if isinstance(body, Mapping) else None)
        where = f"job {shown(named)}" if isinstance(named, str) and named else f"jobs[{i}]"
        try:
            # A file states every job's executor: a forgotten one must not become a noop.
            given = namespace if namespace is not None else fallback_namespace
            if given is not None and isinstance(body, Mapping) and "namespace" not in body:
                body = {**body, "namespace": given}
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


def _table_id(path: str, key: object) -> str:
    """The id a key of the ``jobs`` table gives its job: YAML reads ``123:`` as a number, which names the job
    "123"; a number past 64 bits or a key of another type names none."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool) and INT64_MIN <= key <= INT64_MAX:
        return str(key)
    raise JobFileError(f"{path}: jobs: the key {shown(key)} is not a job id; write the id as a string")
