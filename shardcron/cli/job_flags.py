"""The job ``jobs put`` describes: its flags, and the job table they make, validated by ``spec`` like any other."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from shardcron.cli.args import whole
from shardcron.errors import ConfigError, InvalidJob
from shardcron.model import Job
from shardcron.spec.bounded_text import TooLarge, read_bounded
from shardcron.spec.bounds import INT64_MAX, MAX_ATTEMPTS, MAX_HISTORY_LIMIT, MAX_PAYLOAD_BYTES, MAX_VERSION
from shardcron.spec.executors import MAX_PRIORITY
from shardcron.spec.job import job_from_dict
from shardcron.spec.notifications import parse_cli, to_table


def add_put_flags(put: argparse.ArgumentParser) -> None:
    """The flags of ``jobs put``: when, what, and the job's policies."""
    when = put.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help='cron expression, e.g. "*/5 * * * *" (6 fields: seconds first)')
    when.add_argument("--every", metavar="DURATION", help="a fixed interval, e.g. 30s, 5m, 1h30m")
    when.add_argument("--at", metavar="TIME", help="run once, at an ISO-8601 time")
    put.add_argument("--tz", metavar="ZONE", help="IANA zone the schedule is read in (default UTC)")
    what = put.add_mutually_exclusive_group(required=True)
    what.add_argument("--http", metavar="URL", help="call this http:// or https:// URL")
    what.add_argument("--shell", metavar="CMD", help="run this shell command (needs nodes with --allow-shell)")
    what.add_argument("--noop", action="store_true", help="do nothing (records ticks only)")
    what.add_argument("--celery", metavar="TASK", help="send this Celery task (by its registered name) to --broker")
    what.add_argument("--rq", metavar="FUNC", help="enqueue this dotted function path on an RQ queue at --broker")
    what.add_argument("--arq", metavar="FUNCTION", help="enqueue this arq function at --broker")
    what.add_argument(
        "--nats", metavar="SUBJECT", help="publish to this NATS subject (JetStream unless --no-jetstream)"
    )
    what.add_argument(
        "--amqp",
        metavar="ROUTING_KEY",
        help="publish to RabbitMQ with this routing key (the queue, with the default exchange)",
    )
    what.add_argument("--redis-stream", metavar="STREAM", help="XADD to this Redis stream at --broker")
    what.add_argument(
        "--python",
        metavar="MODULE:FUNCTION",
        help="call this function on the leader (needs nodes with --allow-python covering the module)",
    )
    dispatch = put.add_argument_group("brokers and python calls")
    dispatch.add_argument(
        "--broker", metavar="URL", help="the broker's URL: redis://, amqp://, nats:// [SHARDCRON_BROKER]"
    )
    dispatch.add_argument("--args", metavar="JSON", help="positional arguments, a JSON array")
    dispatch.add_argument("--kwargs", metavar="JSON", help="keyword arguments, a JSON object")
    dispatch.add_argument("--queue", metavar="NAME", help="queue (celery, rq: default; arq: arq:queue)")
    dispatch.add_argument("--routing-key", metavar="KEY", help="celery: the routing key")
    dispatch.add_argument("--exchange", metavar="NAME", help="amqp: the exchange (default: the default exchange)")
    dispatch.add_argument(
        "--priority", type=whole(0, MAX_PRIORITY), metavar="N", help="celery: the task's priority (0-255)"
    )
    dispatch.add_argument("--expires", metavar="D", help="celery: workers drop the task this long after its slot")
    dispatch.add_argument("--no-jetstream", action="store_true", help="nats: a core publish (no ack, no dedupe)")
    dispatch.add_argument("--transient", action="store_true", help="amqp: not persistent (delivery mode 1)")
    dispatch.add_argument(
        "--content-type", metavar="TYPE", help="amqp: the message's content type (default application/json)"
    )
    dispatch.add_argument("--field", action="append", metavar="K=V", help="redis-stream: an entry field; repeatable")
    dispatch.add_argument(
        "--maxlen", type=whole(1, INT64_MAX), metavar="N", help="redis-stream: trim the stream to about N entries"
    )
    dispatch.add_argument(
        "--dedupe-ttl",
        metavar="D",
        help="redis-stream: how long a slot's dedupe marker lives (default: longer than the catch-up window)",
    )
    dispatch.add_argument("--tick-kwarg", metavar="NAME", help="arq: pass the tick as this keyword argument")
    dispatch.add_argument(
        "--session", action="store_true", help="python: pass a fenced database session (PostgreSQL, MariaDB)"
    )
    put.add_argument("--method", default=None, help="HTTP method (default POST)")
    put.add_argument(
        "--header",
        action="append",
        metavar="K:V",
        help="HTTP, NATS or AMQP header; repeatable (Authorization, Proxy-Authorization, Cookie and X-Api-Key "
        "are always secret)",
    )
    put.add_argument(
        "--secret-header",
        action="append",
        metavar="NAME[:VALUE]",
        help="a header whose value is never logged nor shown: NAME marks a --header, NAME:VALUE gives one; repeatable",
    )
    body = put.add_mutually_exclusive_group()
    body.add_argument("--body", metavar="B", help="HTTP request body, or the NATS or AMQP message body")
    body.add_argument(
        "--body-file",
        metavar="PATH",
        help="HTTP request body read from PATH (- for stdin), for bodies too long for the command line (up to 1 MiB)",
    )
    put.add_argument("--catchup", choices=["all", "latest", "none"], help="missed slots policy (default all)")
    put.add_argument("--catchup-window", metavar="D", help="how far back missed slots are owed (default 1h)")
    put.add_argument("--overlap", choices=["skip", "allow"], help="when the previous run is still going (default skip)")
    put.add_argument("--timeout", dest="timeout_job", metavar="D", help="the job's run timeout (default 60s)")
    put.add_argument(
        "--history-limit",
        type=whole(1, MAX_HISTORY_LIMIT),
        metavar="N",
        help="keep at most the job's N newest ticks; older finished ones are deleted (default: all)",
    )
    put.add_argument(
        "--jitter",
        metavar="D",
        help="start each slot a fixed offset in [0, D) after it, the same on "
        "every leader; shorter than the gap between slots (default 0)",
    )
    put.add_argument(
        "--calendar",
        action="append",
        metavar="NAME",
        help="a stored calendar the job follows: slots it excludes are not run; repeatable",
    )
    put.add_argument(
        "--on-failure",
        metavar="SPEC",
        help="run once per failed slot, after its retries: an http(s):// webhook URL, or an executor table as JSON",
    )
    put.add_argument(
        "--on-recovery", metavar="SPEC", help="run once when a slot succeeds after failed ones (same SPEC forms)"
    )
    put.add_argument("--start-deadline", metavar="D", help="each tick must start within D of its slot (default: none)")
    put.add_argument("--deadline", metavar="D", help="each slot must succeed within D of it (default: none)")
    put.add_argument(
        "--heartbeat", metavar="D", help="each slot must be acked (`jobs ack`) within D of it (default: none)"
    )
    put.add_argument(
        "--on-deadline", metavar="SPEC", help="run once per missed deadline (same SPEC forms; default: --on-failure's)"
    )
    put.add_argument(
        "--retries",
        type=whole(0, MAX_ATTEMPTS - 1),
        metavar="N",
        help="retries after a failed attempt, so N+1 attempts at most (default 0)",
    )
    put.add_argument("--retry-backoff", metavar="D", help="first retry delay (default 1s)")
    put.add_argument("--label", action="append", metavar="K=V", help="label; repeatable")
    put.add_argument("--paused", action="store_true", help="create it paused")
    put.add_argument(
        "--expected-version",
        type=whole(0, MAX_VERSION),
        metavar="N",
        help="only if the stored job is at version N (0: only create)",
    )


def pairs(values: list[str] | None, sep: str, flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values or []:
        k, found, rest = v.partition(sep)
        if not found or not k.strip():
            raise InvalidJob(flag.lstrip("-"), f"expected KEY{sep}VALUE, got {v!r}")
        out.append((k.strip(), rest.strip() if sep == ":" else rest))
    return out


# The kind flags of ``jobs put`` (one of them is required) and the executor table key each one's value fills.
KIND_FLAGS = {
    "http": "url",
    "shell": "command",
    "noop": None,
    "celery": "task",
    "rq": "func",
    "arq": "function",
    "nats": "subject",
    "amqp": "routing_key",
    "redis_stream": "stream",
    "python": "target",
}

# Every other executor flag: (its destination, the kinds it serves, the executor table key it fills).
_BROKERS = ("celery", "rq", "arq", "nats", "amqp", "redis_stream")
_EXECUTOR_FLAGS = {
    "--method": ("method", ("http",), "method"),
    "--header": ("header", ("http", "nats", "amqp"), "headers"),
    "--secret-header": ("secret_header", ("http",), "secret_headers"),
    "--body": ("body", ("http", "nats", "amqp"), "body"),
    "--body-file": ("body_file", ("http", "nats", "amqp"), "body"),
    "--broker": ("broker", _BROKERS, "url"),
    "--args": ("args", ("celery", "rq", "arq", "python"), "args"),
    "--kwargs": ("kwargs", ("celery", "rq", "arq", "python"), "kwargs"),
    "--queue": ("queue", ("celery", "rq", "arq"), "queue"),
    "--routing-key": ("routing_key", ("celery",), "routing_key"),
    "--exchange": ("exchange", ("amqp",), "exchange"),
    "--priority": ("priority", ("celery",), "priority"),
    "--expires": ("expires", ("celery",), "expires"),
    "--no-jetstream": ("no_jetstream", ("nats",), "jetstream"),
    "--transient": ("transient", ("amqp",), "persistent"),
    "--content-type": ("content_type", ("amqp",), "content_type"),
    "--field": ("field", ("redis_stream",), "fields"),
    "--maxlen": ("maxlen", ("redis_stream",), "maxlen"),
    "--dedupe-ttl": ("dedupe_ttl", ("redis_stream",), "dedupe_ttl"),
    "--tick-kwarg": ("tick_kwarg", ("arq",), "tick_kwarg"),
    "--session": ("session", ("python",), "session"),
}


def _kind_of(a: argparse.Namespace) -> str:
    return next(kind for kind in KIND_FLAGS if getattr(a, kind) not in (None, False))


def _flag_of(kind: str) -> str:
    return "--" + kind.replace("_", "-")


def _refuse_foreign_flags(a: argparse.Namespace, kind: str) -> None:
    """A flag another kind takes would be silently dropped: refuse it, naming the kinds it is for."""
    foreign: dict[tuple[str, ...], list[str]] = {}  # the kinds a flag serves -> the given flags that serve them
    for flag, (dest, kinds, _) in _EXECUTOR_FLAGS.items():
        if getattr(a, dest) not in (None, False) and kind not in kinds:
            foreign.setdefault(kinds, []).append(flag)
    if foreign:
        said = "; ".join(
            f"{', '.join(flags)}: only for {' or '.join(_flag_of(k) for k in kinds)} jobs"
            for kinds, flags in foreign.items()
        )
        raise ConfigError(f"{said}; not for {_flag_of(kind)}")


def _json_flag(raw: str, flag: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"{flag}: not valid JSON ({e}); quote it for the shell, e.g. {flag} '[1, \"a\"]'") from None


def _dispatch_executor(a: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The executor table of a broker or python job; jobspec validates it, naming the field."""
    field = KIND_FLAGS[kind]
    assert field is not None, kind  # only noop has no field, and noop is not dispatched
    ex: dict[str, Any] = {"kind": kind.replace("_", "-"), field: getattr(a, kind)}
    if kind in _BROKERS:
        broker = a.broker or os.environ.get("SHARDCRON_BROKER")
        if not broker:
            raise ConfigError(f"{_flag_of(kind)}: give the broker's URL with --broker URL (or SHARDCRON_BROKER)")
        ex["url"] = broker
    for flag, (dest, kinds, key) in _EXECUTOR_FLAGS.items():
        value = getattr(a, dest)
        if value in (None, False) or kind not in kinds or key == "url":
            continue
        if dest in ("args", "kwargs"):
            value = _json_flag(value, flag)
        elif dest in ("no_jetstream", "transient"):
            value = False
        elif dest == "header":
            value = pairs(value, ":", flag)
        elif dest == "field":
            value = dict(pairs(value, "=", flag))
        elif dest == "body_file":
            value = _read_body_file(value)
        ex[key] = value
    return ex


def _read_body_file(path: str) -> str:
    """The request body from ``path`` (``-``: standard input), as UTF-8 text, read no further than the body
    limit plus one byte."""
    where = "standard input" if path == "-" else path
    try:
        raw = read_bounded(path, MAX_PAYLOAD_BYTES)
    except OSError as e:
        raise ConfigError(f"--body-file: cannot read {where}: {e.strerror or e}") from None
    except TooLarge:
        raise ConfigError(
            f"--body-file: {where} is larger than the body limit of {MAX_PAYLOAD_BYTES} bytes (1 MiB)"
        ) from None
    try:
        return raw.decode("utf-8")  # sent as it is: a byte-order mark, if any, is the body's
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"--body-file: {where} is not UTF-8 text (byte {e.start}); the body is sent as text"
        ) from None


def _http_executor(a: argparse.Namespace) -> dict[str, Any]:
    headers = pairs(a.header, ":", "--header")
    secret: list[str] = []
    for value in a.secret_header or []:
        # NAME marks a --header secret; NAME:VALUE gives the header and marks it secret at once.
        name, colon, rest = value.partition(":")
        if not name.strip():
            raise InvalidJob("secret-header", f"expected NAME or NAME:VALUE, got {value!r}")
        if colon:
            headers.append((name.strip(), rest.strip()))
        secret.append(name.strip())
    body = _read_body_file(a.body_file) if a.body_file is not None else (a.body or "")
    ex = {"kind": "http", "url": a.http, "method": a.method or "POST", "body": body, "headers": headers}
    if secret:
        ex["secret_headers"] = secret
    return ex


def job_from_flags(a: argparse.Namespace) -> Job:
    """The job ``jobs put`` describes, validated by jobspec like any other."""
    d: dict[str, Any] = {"id": a.id}
    sched: dict[str, Any] = {}
    if a.cron is not None:
        sched["cron"] = a.cron
    elif a.every is not None:
        sched["every"] = a.every
    else:
        sched["at"] = a.at
    if a.tz:
        sched["timezone"] = a.tz
    d["schedule"] = sched
    kind = _kind_of(a)
    _refuse_foreign_flags(a, kind)
    if kind == "http":
        d["executor"] = _http_executor(a)
    elif kind == "shell":
        d["executor"] = {"kind": "shell", "command": a.shell}
    elif kind == "noop":
        d["executor"] = {"kind": "noop"}
    else:
        d["executor"] = _dispatch_executor(a, kind)
    for key, value in (
        ("catchup", a.catchup),
        ("catchup_window", a.catchup_window),
        ("overlap", a.overlap),
        ("timeout", a.timeout_job),
        ("jitter", a.jitter),
        ("calendars", a.calendar),
        ("history_limit", a.history_limit),
        ("start_deadline", a.start_deadline),
        ("deadline", a.deadline),
        ("heartbeat", a.heartbeat),
    ):
        if value is not None:
            d[key] = value
    if a.retry_backoff is not None and a.retries is None:
        raise ConfigError("--retry-backoff: only with --retries N (without retries there is nothing to delay)")
    if a.retries is not None:
        d["retry"] = {"max_attempts": a.retries + 1}
        if a.retry_backoff is not None:
            d["retry"]["backoff"] = a.retry_backoff
    d["paused"] = bool(a.paused)
    d["labels"] = dict(pairs(a.label, "=", "--label"))
    _notifications_from_flags(a, d)
    return job_from_dict(d, require_executor=True)


def _notifications_from_flags(a: argparse.Namespace, d: dict[str, Any]) -> None:
    """``--on-failure SPEC`` / ``--on-recovery SPEC`` / ``--on-deadline SPEC``: a webhook URL or an executor
    table as JSON."""
    for flag, key in (
        ("--on-failure", "on_failure"),
        ("--on-recovery", "on_recovery"),
        ("--on-deadline", "on_deadline"),
    ):
        raw = getattr(a, key)
        if raw is not None:
            d[key] = to_table(parse_cli(raw, flag))


__all__ = ["KIND_FLAGS", "add_put_flags", "job_from_flags", "pairs"]
