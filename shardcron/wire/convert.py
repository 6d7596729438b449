"""Jobs between protobuf and ``model.Job``: the job and executor messages' fields.

A job arriving over the API becomes the same plain dict a TOML or YAML file
gives (``job_dict_from_proto``) and goes through ``spec.job.job_from_dict``, so
the API accepts and refuses exactly what a jobs file does, with the same field
names in its messages ("schedule.cron", "executor.url", ...). Unset proto
fields are left out of the dict, so the spec's defaults apply.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from google.protobuf.message import Message

from shardcron.jobkey import split_key
from shardcron.model import CatchUp, ExecutorKind, ExecutorSpec, Job, Overlap, ScheduleKind
from shardcron.spec.bounds import INT64_MAX, INT64_MIN, MAX_STORED_JSON_DEPTH
from shardcron.spec.executors import to_dict
from shardcron.spec.headers import MASK, mask_url, masked_headers
from shardcron.spec.job import job_from_dict
from shardcron.spec.nesting import load_json
from shardcron.v1 import scheduler_pb2 as pb

_CATCHUP_TO_PB = {CatchUp.ALL: pb.CATCH_UP_ALL, CatchUp.LATEST: pb.CATCH_UP_LATEST, CatchUp.NONE: pb.CATCH_UP_NONE}
_CATCHUP_FROM_PB = {v: k for k, v in _CATCHUP_TO_PB.items()}
OVERLAP_TO_PB: dict[Overlap, pb.Overlap] = {Overlap.SKIP: pb.OVERLAP_SKIP, Overlap.ALLOW: pb.OVERLAP_ALLOW}
OVERLAP_FROM_PB: dict[int, Overlap] = {v: k for k, v in OVERLAP_TO_PB.items()}
SECRET_MASK = MASK
# The job's fields that hold a Notification, and its deadlines (each ``<name>_ms`` in the message).
NOTIFICATION_FIELDS = ("on_failure", "on_recovery", "on_deadline")
DEADLINE_FIELDS = ("start_deadline", "deadline", "heartbeat")


# -- jobs: proto -> model -----------------------------------------------------------


def job_dict_from_proto(p: pb.Job, *, stored: bool = False) -> dict[str, Any]:
    """The job as ``spec.job``'s plain-data input, with only the fields the caller set.
    ``stored``: a job the server returned (``stored_job_from_proto``): its JSON is read without today's bounds."""
    d: dict[str, Any] = {"id": p.id}
    if p.namespace:
        d["namespace"] = p.namespace
    sched: dict[str, Any] = {}
    if p.HasField("schedule"):
        s = p.schedule
        if s.timezone:
            sched["timezone"] = s.timezone
        kind = s.WhichOneof("kind")
        if kind is not None:
            sched[kind] = getattr(s, kind)
    d["schedule"] = sched

    executor = executor_dict_from_proto(p, stored=stored)
    if executor is not None:
        d["executor"] = executor
    for name in NOTIFICATION_FIELDS:
        if p.HasField(name):
            # An empty Notification (no kind set) is refused by the spec, naming the field.
            d[name] = executor_dict_from_proto(getattr(p, name), stored=stored) or {}
    if p.catchup != pb.CATCH_UP_UNSPECIFIED:
        d["catchup"] = _CATCHUP_FROM_PB[p.catchup].value if p.catchup in _CATCHUP_FROM_PB else str(p.catchup)
    if p.overlap != pb.OVERLAP_UNSPECIFIED:
        d["overlap"] = OVERLAP_FROM_PB[p.overlap].value if p.overlap in OVERLAP_FROM_PB else str(p.overlap)
    # Durations go to the spec as "<n>ms" strings: a bare number would be read as seconds.
    if p.HasField("catchup_window_ms"):
        d["catchup_window"] = f"{p.catchup_window_ms}ms"
    if p.HasField("timeout_ms"):
        d["timeout"] = f"{p.timeout_ms}ms"
    if p.HasField("jitter_ms"):
        d["jitter"] = f"{p.jitter_ms}ms"
    if p.HasField("history_limit"):
        d["history_limit"] = p.history_limit
    for name in DEADLINE_FIELDS:
        if p.HasField(f"{name}_ms"):
            d[name] = f"{getattr(p, f'{name}_ms')}ms"
    if p.HasField("retry"):
        r = p.retry
        retry: dict[str, Any] = {}
        if r.HasField("max_attempts"):
            retry["max_attempts"] = r.max_attempts
        if r.HasField("backoff_initial_ms"):
            retry["backoff"] = f"{r.backoff_initial_ms}ms"
        if r.HasField("backoff_max_ms"):
            retry["backoff_max"] = f"{r.backoff_max_ms}ms"
        d["retry"] = retry
    if p.paused:
        d["paused"] = True
    if p.labels:
        d["labels"] = dict(p.labels)
    if p.calendars:
        d["calendars"] = list(p.calendars)
    return d


def executor_dict_from_proto(p: pb.Job | pb.Notification, *, stored: bool = False) -> dict[str, Any] | None:
    """The executor table of a message with ``oneof executor`` (a Job or a Notification); None when unset,
    or a kind added to the proto after this server was built (it arrives as an unknown field): never
    guess, the spec refuses a missing executor."""
    kind = p.WhichOneof("executor")
    if kind == "http":
        h = p.http
        ex: dict[str, Any] = {
            "kind": "http",
            "url": h.url,
            "body": h.body,
            "headers": [(x.name, x.value) for x in h.headers],
            "secret_headers": list(h.secret_headers),
        }
        if h.method:
            ex["method"] = h.method
        return ex
    if kind == "shell":
        return {"kind": "shell", "command": p.shell.command}
    if kind == "noop":
        return {"kind": "noop"}
    if kind in _DISPATCH_KINDS:
        return _dispatch_dict_from_proto(kind, getattr(p, kind), stored=stored)
    return None


def job_from_proto(p: pb.Job) -> Job:
    """A job as the caller defined it, validated by the spec; version and active_since_ms are ignored."""
    # Every value is bounded there (bounds.py), well inside the message's int64 fields.
    return job_from_dict(job_dict_from_proto(p), require_executor=True)


def stored_job_from_proto(p: pb.Job) -> Job:
    """A job as the server returned it, with its store-assigned version and active_since_ms.
    Read as stored (``job_from_dict``'s ``stored``): one admitted under looser bounds must still list."""
    job = job_from_dict(job_dict_from_proto(p, stored=True), require_executor=True, stored=True)
    return replace(job, version=p.version, active_since_ms=p.active_since_ms)


# -- jobs: model -> proto -------------------------------------------------------------


def job_to_proto(job: Job, *, redact: bool) -> pb.Job:
    """``redact``: mask the values of secret headers (every API answer does)."""
    s = job.schedule
    sched = pb.Schedule(timezone=s.timezone)
    if s.kind is ScheduleKind.CRON:
        sched.cron = s.cron or ""
    elif s.kind is ScheduleKind.INTERVAL:
        sched.interval_ms = _int64(s.interval_ms or 0)
    else:
        sched.at_ms = _int64(s.at_ms or 0)
    key = split_key(job.id)
    p = pb.Job(
        id=key.id,
        namespace=key.namespace,
        schedule=sched,
        catchup=_CATCHUP_TO_PB[job.catchup],
        catchup_window_ms=_ms(job.catchup_window_ms),
        overlap=OVERLAP_TO_PB[job.overlap],
        timeout_ms=_ms(job.timeout_ms),
        retry=pb.RetryPolicy(
            max_attempts=job.retry.max_attempts,
            backoff_initial_ms=_ms(job.retry.backoff_initial_ms),
            backoff_max_ms=_ms(job.retry.backoff_max_ms),
        ),
        paused=job.paused,
        labels=job.labels,
        version=job.version,
        active_since_ms=job.active_since_ms,
    )
    if job.jitter_ms:
        p.jitter_ms = job.jitter_ms
    if job.calendars:
        p.calendars.extend(job.calendars)
    if job.history_limit is not None:
        p.history_limit = _int64(job.history_limit)  # a stored job admitted under looser bounds
    for name in DEADLINE_FIELDS:
        ms = getattr(job, f"{name}_ms")
        if ms is not None:
            setattr(p, f"{name}_ms", _int64(ms))
    executor_to_proto(p, job.executor, redact=redact)
    for name in NOTIFICATION_FIELDS:
        spec = getattr(job, name)
        if spec is not None:
            executor_to_proto(getattr(p, name), spec, redact=redact)
    return p


def executor_to_proto(p: pb.Job | pb.Notification, ex: ExecutorSpec, *, redact: bool) -> None:
    """Set the ``oneof executor`` of ``p`` (a Job or a Notification) from ``ex``."""
    if ex.kind is ExecutorKind.HTTP and ex.http is not None:
        h = ex.http
        headers = masked_headers(h) if redact else h.headers
        p.http.CopyFrom(
            pb.HttpExecutor(
                url=h.url,
                method=h.method,
                body=h.body,
                secret_headers=list(h.secret_headers),
                headers=[pb.Header(name=k, value=v) for k, v in headers],
            )
        )
    elif ex.kind is ExecutorKind.SHELL and ex.shell is not None:
        p.shell.command = ex.shell.command
    elif ex.kind.value.replace("-", "_") in _DISPATCH_KINDS and ex.settings is not None:
        _dispatch_to_proto(p, ex, redact=redact)
    else:
        p.noop.SetInParent()


def put_job_request_bytes(job: Job) -> bytes:
    """A serialized PutJob request for ``job``: for a caller that sends bytes as they are
    (``shardcron bench submit`` builds its requests before it measures)."""
    return pb.PutJobRequest(job=job_to_proto(job, redact=False)).SerializeToString()


# -- the dispatch executors -------------------------------------------------------------
# Their messages mirror the job file's executor table: proto field name = table key, except
# args_json / kwargs_json (JSON text in the message, JSON values in the table) and the _ms
# durations (a "<n>ms" string in the table). spec.executors validates the table.

_DISPATCH_KINDS = frozenset({"celery", "rq", "arq", "nats", "amqp", "redis_stream", "python"})
_DURATION_FIELDS = {"expires_ms": "expires", "dedupe_ttl_ms": "dedupe_ttl"}


def _dispatch_dict_from_proto(kind: str, m: Message, *, stored: bool) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": kind.replace("_", "-")}
    for f in m.DESCRIPTOR.fields:
        name = f.name
        if f.has_presence and not m.HasField(name):
            continue
        value = getattr(m, name)
        if name in ("args_json", "kwargs_json"):
            if value:
                d[name[: -len("_json")]] = _json_field(value, f"executor.{name[: -len('_json')]}", stored=stored)
        elif name in _DURATION_FIELDS:
            d[_DURATION_FIELDS[name]] = f"{value}ms"
        elif name == "headers":
            d["headers"] = [(h.name, h.value) for h in value]
        elif name == "fields":
            d["fields"] = dict(value)
        elif isinstance(value, str) and not value and not f.has_presence and name not in ("url", "exchange", "body"):
            continue  # an unset string: the spec's default (queue "default", ...) applies
        else:
            d[name] = value
    return d


def _json_field(text: str, field: str, *, stored: bool) -> Any:
    # Depth-checked before json.loads, whose C parser recurses per level. A stored job's JSON was
    # written under no depth limit, so it gets the store's safety cap, not today's bound.
    if stored:
        return load_json(text, field, MAX_STORED_JSON_DEPTH, check_values=False)
    return load_json(text, field)


def _dispatch_to_proto(p: pb.Job | pb.Notification, ex: ExecutorSpec, *, redact: bool) -> None:
    table = to_dict(ex)
    m = getattr(p, ex.kind.value.replace("-", "_"))
    for key, value in table.items():
        if key in ("args", "kwargs"):
            setattr(m, f"{key}_json", json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        elif key in _DURATION_FIELDS.values():
            name = next(k for k, v in _DURATION_FIELDS.items() if v == key)
            setattr(m, name, _ms(int(value[: -len("ms")])))
        elif key == "headers":
            m.headers.extend(pb.Header(name=k, value=v) for k, v in value)
        elif key == "fields":
            m.fields.update(value)
        elif key == "url" and redact:
            m.url = mask_url(value)
        else:
            setattr(m, key, value)
    m.SetInParent()


def _ms(value: int) -> int:
    # A jobs file may hold a duration past int64 milliseconds (292 million years):
    # answered as the largest one, which means the same.
    return _int64(value)


def _int64(value: int) -> int:
    """``value`` clamped into an int64 field: a stored job admitted under looser bounds (an instant
    in year 10**12, an interval of 2**64 ms) is still answered, as the nearest value the field holds."""
    return max(INT64_MIN, min(int(value), INT64_MAX))
