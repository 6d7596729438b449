"""The dispatch executors' settings as plain data: parsing, validation and serialisation.

``spec.executor_table`` hands every executor table whose kind is a broker or a Python
call (celery, rq, arq, nats, amqp, redis-stream, python) to ``parse``, and
``executor_to_dict`` asks ``to_dict`` for the stored form; ``parse(to_dict(s))``
gives ``s`` back. Rejections are ``InvalidJob``s naming the field, as for
every other part of a job, whether it came from a file, the CLI or the API.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from shardcron.errors import InvalidJob
from shardcron.model import (
    AmqpSpec,
    ArqSpec,
    CelerySpec,
    ExecutorKind,
    ExecutorSpec,
    NatsSpec,
    PythonSpec,
    RedisStreamSpec,
    RqSpec,
)
from shardcron.spec.bounds import INT64_MAX, MAX_PAYLOAD_BYTES, check_int, shown
from shardcron.spec.durations import parse_duration_ms
from shardcron.spec.fields import check_keys, check_printable, parse_headers, utf8_size, whole_number
from shardcron.spec.nesting import check_json_value

MAX_NAME_CHARS = 255  # a task, queue, subject, stream or routing key
MAX_STREAM_FIELDS = 64
# Celery's priority is 0-9 on Redis and 0-255 on RabbitMQ (x-max-priority); the broker clamps within that.
MAX_PRIORITY = 255

URL_SCHEMES = {
    ExecutorKind.CELERY: ("redis", "rediss", "amqp", "amqps", "pyamqp"),
    ExecutorKind.RQ: ("redis", "rediss", "unix"),
    ExecutorKind.ARQ: ("redis", "rediss"),
    ExecutorKind.REDIS_STREAM: ("redis", "rediss", "unix"),
    ExecutorKind.NATS: ("nats", "tls"),
    ExecutorKind.AMQP: ("amqp", "amqps"),
}

_TASK_ARGS = ("args", "kwargs")
EXECUTOR_KEYS = {
    ExecutorKind.CELERY: frozenset({"kind", "url", "task", *_TASK_ARGS, "queue", "routing_key", "priority", "expires"}),
    ExecutorKind.RQ: frozenset({"kind", "url", "func", "queue", *_TASK_ARGS}),
    ExecutorKind.ARQ: frozenset({"kind", "url", "function", "queue", *_TASK_ARGS, "tick_kwarg"}),
    ExecutorKind.NATS: frozenset({"kind", "url", "subject", "jetstream", "body", "headers"}),
    ExecutorKind.AMQP: frozenset(
        {"kind", "url", "exchange", "routing_key", "body", "headers", "persistent", "content_type"}
    ),
    ExecutorKind.REDIS_STREAM: frozenset({"kind", "url", "stream", "fields", "maxlen", "dedupe_ttl"}),
    ExecutorKind.PYTHON: frozenset({"kind", "target", *_TASK_ARGS, "session"}),
}

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# A NATS subject to publish to: dot-separated tokens, no wildcards, no white space.
_NATS_TOKEN = re.compile(r"[^\s.*>]+")


def parse(kind: ExecutorKind, d: Mapping[str, Any], *, bounded: bool = True) -> ExecutorSpec:
    """The settings of a dispatch executor; ``bounded``: check its values' bounds too (``bounds.py``; a job
    read back from the store is not, see ``spec.job.job_from_dict``)."""
    check_keys(d, EXECUTOR_KEYS[kind], "executor", f" of the {kind.value} executor")
    return _PARSERS[kind](d, bounded)


def to_dict(spec: ExecutorSpec) -> dict[str, Any]:
    """The executor table's keys (beside ``kind``), defaults left out where they are the defaults."""
    s = spec.settings
    if s is None:
        return {}
    return _SERIALISERS[spec.kind](s)


# -- field checks ------------------------------------------------------------------------------


def _url(d: Mapping[str, Any], kind: ExecutorKind) -> str:
    url = d.get("url")
    schemes = URL_SCHEMES[kind]
    example = f"{schemes[0]}://127.0.0.1"
    if not isinstance(url, str) or not url.strip():
        raise InvalidJob("executor.url", f"a {kind.value} job needs the broker's url, such as {example}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise InvalidJob("executor.url", "is not a valid URL") from None
    if parts.scheme not in schemes:
        raise InvalidJob(
            "executor.url",
            f"a {kind.value} url must start with one of "
            f"{', '.join(s + '://' for s in schemes)}; got {parts.scheme or 'no'} scheme",
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise InvalidJob("executor.url", f"names no host; expected something like {example}")
    return url.strip()


def _name(
    d: Mapping[str, Any],
    key: str,
    *,
    required: bool,
    default: str | None = None,
    what: str = "",
    pattern: re.Pattern[str] | None = None,
    hint: str = "",
    allow_empty: bool = False,
    bounded: bool = True,
) -> str | None:
    field = f"executor.{key}"
    value = d.get(key)
    if value is None:
        if required:
            raise InvalidJob(field, f"missing: {what}")
        return default
    if not isinstance(value, str):
        raise InvalidJob(field, f"must be a string, got {shown(value)}")
    if not value and allow_empty:
        return value
    if not value.strip() or value != value.strip():
        raise InvalidJob(field, "must not be empty nor start or end with white space")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidJob(field, f"is {len(value)} characters long; the limit is {MAX_NAME_CHARS}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidJob(field, "must not contain control characters")
    if bounded:
        check_printable(value, field)
    else:  # read back from the store: still no lone surrogate, which no message could carry
        utf8_size(value, field)
    if pattern is not None and not pattern.fullmatch(value):
        raise InvalidJob(field, f"{shown(value)} is not {hint}")
    return value


def _given_name(d: Mapping[str, Any], key: str, **how: Any) -> str:
    """``_name`` of a key that is required or has a default: never None."""
    value = _name(d, key, **how)
    if value is None:  # required raised already, and a default is a string
        raise InvalidJob(f"executor.{key}", "missing")
    return value


def _json_size(value: Any, field: str) -> None:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidJob(
            field, f"must hold JSON values only (strings, numbers, booleans, null, lists, tables): {e}"
        ) from None
    if utf8_size(text, field) > MAX_PAYLOAD_BYTES:
        raise InvalidJob(field, f"is larger than {MAX_PAYLOAD_BYTES} bytes as JSON")


def _args(d: Mapping[str, Any], bounded: bool) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args = d.get("args", ()) or ()
    if isinstance(args, str) or not isinstance(args, list | tuple):
        raise InvalidJob("executor.args", f"must be a list of JSON values, got {shown(args)}")
    kwargs = d.get("kwargs", {}) or {}
    if not isinstance(kwargs, Mapping):
        raise InvalidJob("executor.kwargs", f"must be a table of name = JSON value, got {shown(kwargs)}")
    for name in kwargs:
        if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
            raise InvalidJob("executor.kwargs", f"{shown(name)} is not a valid keyword argument name")
    # Before anything walks them recursively (json.dumps below): depth, 64-bit integers, finite floats.
    # A stored job's values were walked by json.dumps when it was written, so they are shallow enough for it.
    if bounded:
        check_json_value(list(args), "executor.args")
        check_json_value(dict(kwargs), "executor.kwargs")
    _json_size(list(args), "executor.args")
    _json_size(dict(kwargs), "executor.kwargs")
    # Through JSON and back: what is stored is exactly what the worker will get (tuples become lists, ...).
    return tuple(json.loads(json.dumps(list(args)))), json.loads(json.dumps(dict(kwargs)))


def _bool(d: Mapping[str, Any], key: str, default: bool) -> bool:
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise InvalidJob(f"executor.{key}", f"must be true or false, got {shown(value)}")
    return value


def _body(d: Mapping[str, Any]) -> str:
    body = d.get("body", "") or ""
    if not isinstance(body, str):
        raise InvalidJob("executor.body", "must be a string")
    if (size := utf8_size(body, "executor.body")) > MAX_PAYLOAD_BYTES:
        raise InvalidJob("executor.body", f"is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    return body


def _optional_duration(d: Mapping[str, Any], key: str, minimum_ms: int, why: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    ms = parse_duration_ms(value, f"executor.{key}")
    if ms < minimum_ms:
        raise InvalidJob(f"executor.{key}", f"{why}, got {shown(value)}")
    return ms


def _with_args(out: dict[str, Any], s: CelerySpec | RqSpec | ArqSpec | PythonSpec) -> dict[str, Any]:
    if s.args:
        out["args"] = list(s.args)
    if s.kwargs:
        out["kwargs"] = dict(s.kwargs)
    return out


# -- one parser and one serialiser per kind ---------------------------------------------------------


def _celery(d: Mapping[str, Any], bounded: bool) -> ExecutorSpec:
    args, kwargs = _args(d, bounded)
    priority = d.get("priority")
    if priority is not None:
        priority = whole_number(priority, "executor.priority", 0)
        if priority > MAX_PRIORITY:
            raise InvalidJob("executor.priority", f"at most {MAX_PRIORITY}, got {shown(priority)}")
    expires_ms = _optional_duration(d, "expires", 1, "must be a positive duration")
    return ExecutorSpec(
        ExecutorKind.CELERY,
        celery=CelerySpec(
            url=_url(d, ExecutorKind.CELERY),
            task=_given_name(
                d,
                "task",
                bounded=bounded,
                required=True,
                what="the registered Celery task name, such as app.tasks.report",
            ),
            args=args,
            kwargs=kwargs,
            queue=_name(d, "queue", bounded=bounded, required=False),
            routing_key=_name(d, "routing_key", bounded=bounded, required=False),
            priority=priority,
            expires_ms=expires_ms,
        ),
    )


def _celery_dict(s: CelerySpec) -> dict[str, Any]:
    out: dict[str, Any] = {"url": s.url, "task": s.task}
    for key in ("queue", "routing_key", "priority"):
        if getattr(s, key) is not None:
            out[key] = getattr(s, key)
    if s.expires_ms is not None:
        out["expires"] = f"{s.expires_ms}ms"
    return _with_args(out, s)


def _rq(d: Mapping[str, Any], bounded: bool) -> ExecutorSpec:
    args, kwargs = _args(d, bounded)
    return ExecutorSpec(
        ExecutorKind.RQ,
        rq=RqSpec(
            url=_url(d, ExecutorKind.RQ),
            func=_given_name(
                d,
                "func",
                bounded=bounded,
                required=True,
                what="the dotted path a worker imports, such as app.tasks.report",
                pattern=_DOTTED,
                hint="a dotted path such as app.tasks.report",
            ),
            queue=_given_name(d, "queue", bounded=bounded, required=False, default="default"),
            args=args,
            kwargs=kwargs,
        ),
    )


def _rq_dict(s: RqSpec) -> dict[str, Any]:
    return _with_args({"url": s.url, "func": s.func, "queue": s.queue}, s)


def _arq(d: Mapping[str, Any], bounded: bool) -> ExecutorSpec:
    args, kwargs = _args(d, bounded)
    tick_kwarg = _name(
        d, "tick_kwarg", bounded=bounded, required=False, pattern=_IDENTIFIER, hint="a keyword argument name"
    )
    if tick_kwarg is not None and tick_kwarg in kwargs:
        raise InvalidJob("executor.tick_kwarg", f"{shown(tick_kwarg)} is also one of the kwargs")
    return ExecutorSpec(
        ExecutorKind.ARQ,
        arq=ArqSpec(
            url=_url(d, ExecutorKind.ARQ),
            function=_given_name(
                d,
                "function",
                bounded=bounded,
                required=True,
                what="the name of a function in the worker's functions",
                pattern=_IDENTIFIER,
                hint="a function name",
            ),
            queue=_given_name(d, "queue", bounded=bounded, required=False, default="arq:queue"),
            args=args,
            kwargs=kwargs,
            tick_kwarg=tick_kwarg,
        ),
    )


def _arq_dict(s: ArqSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"url": s.url, "function": s.function, "queue": s.queue}
    if s.tick_kwarg is not None:
        out["tick_kwarg"] = s.tick_kwarg
    return _with_args(out, s)


def _nats(d: Mapping[str, Any], bounded: bool) -> ExecutorSpec:
    subject = _given_name(
        d, "subject", bounded=bounded, required=True, what="the subject to publish to, such as jobs.reports"
    )
    if not all(_NATS_TOKEN.fullmatch(token) for token in subject.split(".")):
        raise InvalidJob(
            "executor.subject",
            f"{shown(subject)} is not a subject to publish to: dot-separated tokens, "
            "no white space and no wildcards (* or >)",
        )
    return ExecutorSpec(
        ExecutorKind.NATS,
        nats=NatsSpec(
            url=_url(d, ExecutorKind.NATS),
            subject=subject,
            jetstream=_bool(d, "jetstream", True),
            body=_body(d),
            headers=parse_headers(d.get("headers"), "executor.headers"),
        ),
    )


def _nats_dict(s: NatsSpec) -> dict[str, Any]:
    return {
        "url": s.url,
        "subject": s.subject,
        "jetstream": s.jetstream,
        "body": s.body,
        "headers": [list(p) for p in s.headers],
    }


def _amqp(d: Mapping[str, Any], bounded: bool) -> ExecutorSpec:
    exchange = _given_name(d, "exchange", bounded=bounded, required=False, default="", allow_empty=True)
    routing_key = _given_name(
        d,
        "routing_key",
        bounded=bounded,
        required=exchange == "",
        default="",
        allow_empty=exchange != "",
        what="with the default exchange, the routing key names the queue to deliver to",
    )
    content_type = _given_name(d, "content_type", bounded=bounded, required=False, default="application/json")
    return ExecutorSpec(
        ExecutorKind.AMQP,
        amqp=AmqpSpec(
            url=_url(d, ExecutorKind.AMQP),
            routing_key=routing_key,
            exchange=exchange,
            body=_body(d),
            headers=parse_headers(d.get("headers"), "executor.headers"),
            persistent=_bool(d, "persistent", True),
            content_type=content_type,
        ),
    )


def _amqp_dict(s: AmqpSpec) -> dict[str, Any]:
    return {
        "url": s.url,
        "exchange": s.exchange,
        "routing_key": s.routing_key,
        "body": s.body,
        "headers": [list(p) for p in s.headers],
        "persistent": s.persistent,
        "content_type": s.content_type,
    }


def _redis_stream(d: Mapping[str, Any], bounded: bool) -> ExecutorSpec:
    raw = d.get("fields", {}) or {}
    if not isinstance(raw, Mapping):
        raise InvalidJob("executor.fields", "must be a table of name = string")
    if len(raw) > MAX_STREAM_FIELDS:
        raise InvalidJob("executor.fields", f"at most {MAX_STREAM_FIELDS} fields, got {len(raw)}")
    fields: list[tuple[str, str]] = []
    for name, value in raw.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise InvalidJob("executor.fields", f"field {shown(name)}: names and values must be non-empty strings")
        if name.lower().startswith("shardcron_"):
            raise InvalidJob("executor.fields", f"field {shown(name)}: names starting with shardcron_ carry the tick")
        fields.append((name, value))
    fields.sort()  # the order the stored JSON (sorted keys) gives back, so a job equals itself read back
    _json_size(dict(fields), "executor.fields")
    maxlen = d.get("maxlen")
    if maxlen is not None:
        maxlen = check_int(maxlen, "executor.maxlen", 1, INT64_MAX, " (Redis takes a signed 64-bit count)")
    ttl_ms = _optional_duration(d, "dedupe_ttl", 60_000, "must be at least 1m (it must outlast a failover)")
    return ExecutorSpec(
        ExecutorKind.REDIS_STREAM,
        redis_stream=RedisStreamSpec(
            url=_url(d, ExecutorKind.REDIS_STREAM),
            stream=_given_name(d, "stream", bounded=bounded, required=True, what="the stream key to XADD to"),
            fields=tuple(fields),
            maxlen=maxlen,
            dedupe_ttl_ms=ttl_ms,
        ),
    )


def _redis_stream_dict(s: RedisStreamSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"url": s.url, "stream": s.stream, "fields": dict(s.fields)}
    if s.maxlen is not None:
        out["maxlen"] = s.maxlen
    if s.dedupe_ttl_ms is not None:
        out["dedupe_ttl"] = f"{s.dedupe_ttl_ms}ms"
    return out


def _python(d: Mapping[str, Any], bounded: bool) -> ExecutorSpec:
    target = _given_name(
        d, "target", bounded=bounded, required=True, what="the callable to run, as package.module:function"
    )
    module, colon, function = target.partition(":")
    if not colon or not _DOTTED.fullmatch(module) or not _DOTTED.fullmatch(function):
        raise InvalidJob("executor.target", f"{shown(target)} is not package.module:function")
    args, kwargs = _args(d, bounded)
    return ExecutorSpec(
        ExecutorKind.PYTHON,
        python=PythonSpec(target=target, args=args, kwargs=kwargs, session=_bool(d, "session", False)),
    )


def _python_dict(s: PythonSpec) -> dict[str, Any]:
    return _with_args({"target": s.target, "session": s.session}, s)


_PARSERS: dict[ExecutorKind, Callable[[Mapping[str, Any], bool], ExecutorSpec]] = {
    ExecutorKind.CELERY: _celery,
    ExecutorKind.RQ: _rq,
    ExecutorKind.ARQ: _arq,
    ExecutorKind.NATS: _nats,
    ExecutorKind.AMQP: _amqp,
    ExecutorKind.REDIS_STREAM: _redis_stream,
    ExecutorKind.PYTHON: _python,
}
_SERIALISERS: dict[ExecutorKind, Callable[[Any], dict[str, Any]]] = {
    ExecutorKind.CELERY: _celery_dict,
    ExecutorKind.RQ: _rq_dict,
    ExecutorKind.ARQ: _arq_dict,
    ExecutorKind.NATS: _nats_dict,
    ExecutorKind.AMQP: _amqp_dict,
    ExecutorKind.REDIS_STREAM: _redis_stream_dict,
    ExecutorKind.PYTHON: _python_dict,
}


def python_module_allowed(target: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``--allow-python`` prefixes cover ``target``'s module, on dotted boundaries:
    ``myapp`` covers ``myapp`` and ``myapp.tasks``, not ``myappx``."""
    module = target.partition(":")[0]
    return any(module == p or module.startswith(p + ".") for p in prefixes)
