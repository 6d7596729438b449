"""Job definitions as plain data: parsing, validation and serialisation.

One place decides what a valid job is, whichever way it arrives (a TOML or
YAML file, the gRPC API, the CLI). Every rejection is an ``InvalidJob`` that
names the field and says why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from shardcron.errors import InvalidJob
from shardcron.jobkey import DEFAULT_NAMESPACE, split_key
from shardcron.model import CatchUp, ExecutorKind, ExecutorSpec, Job, Overlap, RetryPolicy, ScheduleKind
from shardcron.spec.bounds import MAX_ATTEMPTS, MAX_HISTORY_LIMIT, MAX_VERSION, check_int, shown
from shardcron.spec.calendar_tables import check_calendar_name
from shardcron.spec.durations import duration_field
from shardcron.spec.executor_table import executor_to_dict, parse_executor
from shardcron.spec.fields import (
    CONTROL_CHAR,
    check_keys,
    check_printable,
    enum_value,
    utf8_size,
    validate_job_id,
    whole_number,
)
from shardcron.spec.headers import mask_url, masked_headers
from shardcron.spec.namespaces import store_key
from shardcron.spec.notifications import parse_table
from shardcron.spec.retention import RetentionError, parse_history_limit
from shardcron.spec.schedule import SCHEDULE_KEYS, jitter_field, parse_schedule

MAX_LABELS = 64
MAX_LABEL_CHARS = 256
# The keys a job and its retry table take; anything else is refused, naming the key (``fields.check_keys``).
JOB_KEYS = frozenset(
    {
        "id",
        "namespace",
        "schedule",
        "executor",
        "catchup",
        "catchup_window",
        "overlap",
        "timeout",
        "retry",
        "paused",
        "labels",
        "version",
        "jitter",
        "calendars",
        "history_limit",
        "on_failure",
        "on_recovery",
        "start_deadline",
        "deadline",
        "heartbeat",
        "on_deadline",
    }
)
# Deadlines count from the slot; shorter than a second, a judgement could come before the result is written.
MIN_DEADLINE_MS = 1000
RETRY_KEYS = frozenset({"max_attempts", "backoff", "backoff_max"})


def job_from_dict(
    d: Mapping[str, Any], job_id: str | None = None, *, require_executor: bool = False, stored: bool = False
) -> Job:
    """Parse and validate a job given as plain data (a TOML/YAML table or JSON).

    Every key must be one the job takes (``InvalidJob`` names the first that is
    not). The schedule is either a ``schedule`` table or its keys at the top
    level, not both. ``require_executor``: a job without ``executor`` is refused
    (job files and the API); otherwise it is a noop, for in-process callers.
    Every value is checked against its bound (``bounds.py``), except when
    ``stored``: a job read back from the store was admitted when it was written,
    possibly under looser bounds, and must stay readable (listed, shown, deleted);
    what runs it copes with any value its type holds (triggers end at year 9999).
    """
    bounded = not stored
    if not isinstance(d, Mapping):
        raise InvalidJob("job", "must be a table")
    flat = "schedule" not in d
    if flat:
        check_keys(d, JOB_KEYS | SCHEDULE_KEYS)
        sched = {k: v for k, v in d.items() if k in SCHEDULE_KEYS}
    else:
        sched = d["schedule"]
        if not isinstance(sched, Mapping):
            raise InvalidJob("schedule", "must be a table")
        for key in sorted(SCHEDULE_KEYS.intersection(d)):
            raise InvalidJob(key, "belongs in the schedule table, which is given too: give the schedule in one place")
        check_keys(d, JOB_KEYS)
    jid = validate_job_id(job_id if job_id is not None else d.get("id"), printable=bounded)
    if d.get("namespace") is not None:  # the job's key holds it (tenancy.keys); absent or empty: default
        jid = store_key(d["namespace"], jid)
    schedule = parse_schedule(sched, bounded=bounded)
    if "executor" in d or require_executor:
        executor = parse_executor(d.get("executor"), bounded=bounded)
    else:
        executor = ExecutorSpec(ExecutorKind.NOOP)
    retry_d = d.get("retry", {}) or {}
    if not isinstance(retry_d, Mapping):
        raise InvalidJob("retry", "must be a table with max_attempts, backoff and backoff_max")
    check_keys(retry_d, RETRY_KEYS, "retry")
    retry = RetryPolicy(
        max_attempts=whole_number(retry_d.get("max_attempts", 1), "retry.max_attempts", 1),
        backoff_initial_ms=duration_field(retry_d, "backoff", "retry.backoff", 1000),
        backoff_max_ms=duration_field(retry_d, "backoff_max", "retry.backoff_max", 60_000),
    )
    if retry.max_attempts > MAX_ATTEMPTS:
        raise InvalidJob("retry.max_attempts", f"at most {MAX_ATTEMPTS}, got {shown(retry.max_attempts)}")
    labels = d.get("labels", {}) or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise InvalidJob("labels", "must be a table of string = string")
    if len(labels) > MAX_LABELS:
        raise InvalidJob("labels", f"at most {MAX_LABELS} labels, got {len(labels)}")
    for k, v in labels.items():
        if bounded:
            check_printable(k + v, "labels", f"label {shown(k, 40)}: keys and values ")
        elif CONTROL_CHAR.search(k + v):  # the store's rule when the job was written, kept for reading it back
            raise InvalidJob("labels", f"label {shown(k, 40)}: keys and values must not contain control characters")
        if not k or len(k) > MAX_LABEL_CHARS or len(v) > MAX_LABEL_CHARS:
            raise InvalidJob(
                "labels",
                f"label {shown(k, 40)}: keys must be 1-{MAX_LABEL_CHARS} and values at most "
                f"{MAX_LABEL_CHARS} characters",
            )
        utf8_size(k + v, "labels")
    paused = d.get("paused", False)
    if not isinstance(paused, bool):
        raise InvalidJob("paused", f"must be true or false, got {shown(paused)}")
    jitter_ms = jitter_field(d.get("jitter"), schedule, bounded=bounded)
    start_deadline_ms = _deadline(d, "start_deadline")
    if bounded and start_deadline_ms is not None and start_deadline_ms <= jitter_ms:
        raise InvalidJob(
            "start_deadline",
            f"must be longer than the job's jitter ({jitter_ms} ms): a slot may start that late on purpose",
        )
    calendars = _calendar_names(d.get("calendars"))
    return Job(
        id=jid,
        schedule=schedule,
        executor=executor,
        catchup=enum_value(CatchUp, d.get("catchup", "all"), "catchup"),
        catchup_window_ms=duration_field(d, "catchup_window", "catchup_window", 3_600_000, minimum=0),
        overlap=enum_value(Overlap, d.get("overlap", "skip"), "overlap"),
        timeout_ms=duration_field(d, "timeout", "timeout", 60_000),
        retry=retry,
        paused=paused,
        labels=dict(labels),
        version=check_int(d.get("version", 0), "version", 0, MAX_VERSION, " (the store's version column)"),
        jitter_ms=jitter_ms,
        calendars=calendars,
        history_limit=_history_limit(d.get("history_limit"), bounded=bounded),
        on_failure=parse_table(d.get("on_failure"), "on_failure", bounded=bounded),
        on_recovery=parse_table(d.get("on_recovery"), "on_recovery", bounded=bounded),
        start_deadline_ms=start_deadline_ms,
        deadline_ms=_deadline(d, "deadline"),
        heartbeat_ms=_deadline(d, "heartbeat"),
        on_deadline=parse_table(d.get("on_deadline"), "on_deadline", bounded=bounded),
    )


def _deadline(d: Mapping[str, Any], key: str) -> int | None:
    """A deadline in ms from the slot (absent: none), at least ``MIN_DEADLINE_MS``."""
    if d.get(key) is None:
        return None
    return duration_field(d, key, key, 0, minimum=MIN_DEADLINE_MS)


def _calendar_names(raw: object) -> tuple[str, ...]:
    """A job's calendars: a list of calendar names (absent: none); whether each exists is the API's check."""
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, list | tuple):
        raise InvalidJob("calendars", f'must be a list of calendar names such as ["business"], got {shown(raw)}')
    names: list[str] = []
    for i, name in enumerate(raw):
        reason = check_calendar_name(name)
        if reason:
            raise InvalidJob(f"calendars[{i}]", reason)
        if name not in names:
            names.append(name)
    return tuple(names)


def _history_limit(raw: object, *, bounded: bool) -> int | None:
    """The job's history limit (absent: keep every tick), a whole number of ticks, at least 1
    and, when ``bounded``, at most ``bounds.MAX_HISTORY_LIMIT``."""
    if raw is None:
        return None
    try:
        limit = parse_history_limit(raw, "history_limit")
    except RetentionError as e:
        raise InvalidJob("history_limit", e.reason) from None
    if bounded and limit is not None and limit > MAX_HISTORY_LIMIT:
        raise InvalidJob(
            "history_limit",
            f"at most {MAX_HISTORY_LIMIT} ticks, got {shown(limit)}; to keep every tick, leave history_limit out",
        )
    return limit


def job_to_dict(job: Job) -> dict[str, Any]:
    """The stored and exported form; ``job_from_dict(job_to_dict(j)) == j``."""
    s = job.schedule
    sched: dict[str, Any] = {"timezone": s.timezone}
    if s.kind is ScheduleKind.CRON:
        sched["cron"] = s.cron
    elif s.kind is ScheduleKind.INTERVAL:
        sched["interval_ms"] = s.interval_ms
    else:
        sched["at_ms"] = s.at_ms
    ex = executor_to_dict(job.executor)
    key = split_key(job.id)
    return {
        "id": key.id,
        # Only outside default: a default job keeps the JSON it was stored with before namespaces.
        **({"namespace": key.namespace} if key.namespace != DEFAULT_NAMESPACE else {}),
        "schedule": sched,
        "executor": ex,
        "catchup": job.catchup.value,
        "catchup_window": f"{job.catchup_window_ms}ms",
        "overlap": job.overlap.value,
        "timeout": f"{job.timeout_ms}ms",
        "retry": {
            "max_attempts": job.retry.max_attempts,
            "backoff": f"{job.retry.backoff_initial_ms}ms",
            "backoff_max": f"{job.retry.backoff_max_ms}ms",
        },
        "paused": job.paused,
        "labels": dict(job.labels),
        "version": job.version,
        # Only when set: a job without jitter keeps the JSON it was stored with before jitter existed.
        **({"jitter": f"{job.jitter_ms}ms"} if job.jitter_ms else {}),
        **({"calendars": list(job.calendars)} if job.calendars else {}),
        **({"history_limit": job.history_limit} if job.history_limit is not None else {}),
        **({"on_failure": executor_to_dict(job.on_failure)} if job.on_failure else {}),
        **({"on_recovery": executor_to_dict(job.on_recovery)} if job.on_recovery else {}),
        **({"start_deadline": f"{job.start_deadline_ms}ms"} if job.start_deadline_ms is not None else {}),
        **({"deadline": f"{job.deadline_ms}ms"} if job.deadline_ms is not None else {}),
        **({"heartbeat": f"{job.heartbeat_ms}ms"} if job.heartbeat_ms is not None else {}),
        **({"on_deadline": executor_to_dict(job.on_deadline)} if job.on_deadline else {}),
    }


def job_to_json(job: Job) -> str:
    return json.dumps(job_to_dict(job), sort_keys=True, separators=(",", ":"))


def job_from_json(text: str) -> Job:
    """A job as the store holds it (``job_to_json``): read back without the gate's bounds (``stored``)."""
    return job_from_dict(json.loads(text), stored=True)


def redacted(job: Job) -> dict[str, Any]:
    """``job_to_dict`` with secret header values (``headers.secret_names``) and broker passwords masked,
    for logs and API answers."""
    d = job_to_dict(job)
    if job.executor.http:
        d["executor"]["headers"] = [list(pair) for pair in masked_headers(job.executor.http)]
    if "url" in d["executor"] and job.executor.kind is not ExecutorKind.HTTP:
        d["executor"]["url"] = mask_url(d["executor"]["url"])
    for key in ("on_failure", "on_recovery"):
        spec = getattr(job, key)
        if spec is not None and spec.http:
            d[key]["headers"] = [list(pair) for pair in masked_headers(spec.http)]
        elif spec is not None and "url" in d[key]:
            d[key]["url"] = mask_url(d[key]["url"])
    return d


def with_version(job: Job, version: int) -> Job:
    return replace(job, version=version)


__all__ = [
    "job_from_dict",
    "job_from_json",
    "job_to_dict",
    "job_to_json",
    "redacted",
    "with_version",
]
