"""``shardcron jobs ...`` and ``shardcron ticks ...``: the API from the command line.

Every command takes ``--server host:port`` (repeatable; default
``$SHARDCRON_SERVER`` or 127.0.0.1:7070) and ``--json``. Human output is a
plain table; ``--json`` is for scripts. Failures are ``ShardcronError``s,
which ``cli.main`` prints as one line before exiting with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

from tabulate import tabulate

from shardcron.api.security import add_client_flags, channel_security_from_args
from shardcron.spec.bounds import INT64_MAX, MAX_ATTEMPTS, MAX_HISTORY_LIMIT, MAX_VERSION
from shardcron.cli import backfill
from shardcron.cli.args import MAX_SHARD, seconds, whole
from shardcron.cli.common import fmt_ms
from shardcron.spec.executors import MAX_PRIORITY
from shardcron.errors import ConfigError, InvalidJob, ShardcronError, job_named
from shardcron.spec.job import MAX_PAYLOAD_BYTES, format_duration_ms
from shardcron.model import Job, JobRuns, ScheduleKind, Tick
from shardcron.jobkey import split_key
from shardcron.spec.namespaces import NAMESPACE_ENV, namespace_from_cli
from shardcron.rules.scopes import ALL_NAMESPACES

DEFAULT_SERVER = "127.0.0.1:7070"
# ``ticks --limit``: more than a job keeps at most (bounds.MAX_HISTORY_LIMIT) would never be listed.
MAX_LISTED_TICKS = MAX_HISTORY_LIMIT


class ApplyFailed(ShardcronError):
    """Some jobs of a file were refused (each is listed above the error line)."""


class NoSuchJob(ShardcronError):
    """``ticks`` of an id that is neither a job nor the id of past ticks."""


# -- formatting ------------------------------------------------------------------------


def _schedule(job: Job) -> str:
    s = job.schedule
    tz = "" if s.timezone == "UTC" else f" ({s.timezone})"
    if s.kind is ScheduleKind.CRON:
        return f"cron {s.cron}{tz}"
    if s.kind is ScheduleKind.INTERVAL:
        return f"every {format_duration_ms(s.interval_ms)}"
    return f"at {fmt_ms(s.at_ms)}"


def _executor(job: Job) -> str:
    from shardcron.executors.describe import target

    ex = job.executor
    if ex.http:
        return f"http {ex.http.method} {ex.http.url}"
    if ex.shell:
        cmd = ex.shell.command
        return "shell " + (cmd if len(cmd) <= 40 else cmd[:37] + "...")
    if ex.settings is not None:
        return f"{ex.kind.value} {target(ex)}"
    return "noop"


def _labels(job: Job) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(job.labels.items())) or "-"


def job_json(job: Job, shard: int | None = None) -> dict:
    from shardcron.spec.job import job_to_dict

    d = job_to_dict(job)
    d["namespace"] = job.key.namespace
    d["active_since_ms"] = job.active_since_ms
    if shard is not None:
        d["shard"] = shard
    return d


def runs_json(runs: JobRuns) -> dict:
    return {"as_of_ms": runs.as_of_ms, "next_slot_ms": runs.next_slot_ms, "next_start_ms": runs.next_start_ms,
            "last_scheduled_at_ms": runs.last_scheduled_at_ms,
            "last_status": runs.last_status.value if runs.last_status else None,
            "failures_in_a_row": runs.failures_in_a_row, "next_reason": runs.next_reason}


def _runs_cells(runs: JobRuns) -> list:
    """NEXT (the next owed slot's start, with the slot when jitter moves it), LAST (the newest
    tick's slot and status) and FAILS (failed or abandoned ticks since the last success)."""
    nxt = fmt_ms(runs.next_start_ms)
    if runs.next_start_ms is not None and runs.next_start_ms != runs.next_slot_ms:
        nxt += f" (slot {fmt_ms(runs.next_slot_ms)} + jitter)"
    last = "-" if runs.last_scheduled_at_ms is None else \
        f"{fmt_ms(runs.last_scheduled_at_ms)} {runs.last_status.value if runs.last_status else '?'}"
    return [nxt, last, runs.failures_in_a_row]


def tick_json(t: Tick) -> dict:
    key = split_key(t.job_id)
    return {
        "job_id": key.id, "namespace": key.namespace, "scheduled_at_ms": t.scheduled_at_ms, "shard": t.shard, "fence": t.fence,
        "node_id": t.node_id, "status": t.status.value, "attempt": t.attempt, "manual": t.manual,
        "claimed_at_ms": t.claimed_at_ms, "started_at_ms": t.started_at_ms, "finished_at_ms": t.finished_at_ms,
        "exit_code": t.exit_code, "http_status": t.http_status, "output": t.output, "error": t.error,
    }


JOB_HEADERS = ["ID", "SHARD", "SCHEDULE", "EXECUTOR", "STATE", "VERSION", "LABELS", "NEXT", "LAST", "FAILS"]
TICK_HEADERS = ["SCHEDULED", "STATUS", "ATTEMPT", "NODE", "FENCE", "DURATION", "RESULT"]


def _job_row(job: Job, shard: int | None) -> list:
    return [job.key.id, "-" if shard is None else shard, _schedule(job), _executor(job),
            "paused" if job.paused else "active", job.version, _labels(job)]


def _tick_row(t: Tick) -> list:
    took = t.finished_at_ms - t.started_at_ms if t.finished_at_ms and t.started_at_ms else None
    if t.error:
        result = t.error.splitlines()[0][:60]
    elif t.http_status is not None:
        result = f"http {t.http_status}"
    elif t.exit_code is not None:
        result = f"exit {t.exit_code}"
    else:
        result = "-"
    return [fmt_ms(t.scheduled_at_ms) + (" (manual)" if t.manual else ""), t.status.value, t.attempt, t.node_id,
            t.fence, format_duration_ms(took), result]


def _table(rows: list[list], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="plain", disable_numparse=True)


def jobs_table(listed: list[tuple[Job, JobRuns]], shards: dict[str, int | None], *, namespaced: bool = False) -> str:
    """The table ``jobs list`` and ``jobs get`` print: a row per job and its runs, its shard from ``shards``
    (by job key); ``namespaced``: a first column says whose each job is (a listing of every namespace)."""
    rows = [_job_row(j, shards.get(j.id)) + _runs_cells(r) for j, r in listed]
    if namespaced:
        return _table([[j.key.namespace] + row for (j, _), row in zip(listed, rows)], ["NAMESPACE"] + JOB_HEADERS)
    return _table(rows, JOB_HEADERS)


def _print_json(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


# -- the client and shard numbers -------------------------------------------------------


def _client(a: argparse.Namespace):
    from shardcron.client.client import Client, bearer_secret

    servers = a.server or [os.environ.get("SHARDCRON_SERVER") or DEFAULT_SERVER]
    security = channel_security_from_args(a)
    if security.token:  # checked here to name where it came from; Client checks any token again
        source = "--token" if getattr(a, "token", None) else "SHARDCRON_TOKEN"
        security = replace(security, token=bearer_secret(security.token, source))
    return Client(servers, timeout_s=a.request_timeout, security=security,
                  namespace=namespace_from_cli(getattr(a, "namespace", None), os.environ))


def _listed_namespace(a: argparse.Namespace) -> str | None:
    """``*`` with --all-namespaces (-A), else None: the client's namespace (-n)."""
    if getattr(a, "all_namespaces", False):
        if getattr(a, "namespace", None):
            raise ConfigError("--all-namespaces and --namespace: give one of them")
        return ALL_NAMESPACES
    return None


def _shard_of(client, job_ids: list[str]):
    """job id -> shard, from the cluster's shard count (one GetShards call)."""
    from shardcron.sharding import shard_for

    n = client.shards().get("shard_count")
    return {j: shard_for(j, n) for j in job_ids} if n else {}


# -- building a job from flags ------------------------------------------------------------


def _pairs(values: list[str] | None, sep: str, flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values or []:
        k, found, rest = v.partition(sep)
        if not found or not k.strip():
            raise InvalidJob(flag.lstrip("-"), f"expected KEY{sep}VALUE, got {v!r}")
        out.append((k.strip(), rest.strip() if sep == ":" else rest))
    return out


# The kind flags of ``jobs put`` (one of them is required) and the executor table key each one's value fills.
KIND_FLAGS = {"http": "url", "shell": "command", "noop": None, "celery": "task", "rq": "func", "arq": "function",
              "nats": "subject", "amqp": "routing_key", "redis_stream": "stream", "python": "target"}

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
        said = "; ".join(f"{', '.join(flags)}: only for {' or '.join(_flag_of(k) for k in kinds)} jobs"
                         for kinds, flags in foreign.items())
        raise ConfigError(f"{said}; not for {_flag_of(kind)}")


def _json_flag(raw: str, flag: str):
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"{flag}: not valid JSON ({e}); quote it for the shell, e.g. {flag} '[1, \"a\"]'") \
            from None


def _dispatch_executor(a: argparse.Namespace, kind: str) -> dict:
    """The executor table of a broker or python job; jobspec validates it, naming the field."""
    ex: dict = {"kind": kind.replace("_", "-"), KIND_FLAGS[kind]: getattr(a, kind)}
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
            value = _pairs(value, ":", flag)
        elif dest == "field":
            value = dict(_pairs(value, "=", flag))
        elif dest == "body_file":
            value = _read_body_file(value)
        ex[key] = value
    return ex


def _read_body_file(path: str) -> str:
    """The request body from ``path`` (``-``: standard input), as UTF-8 text.

    Read no further than the body limit plus one byte: ``/dev/urandom`` or a runaway
    pipe is refused at once instead of read until memory runs out."""
    where = "standard input" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        else:
            with open(path, "rb") as f:
                raw = f.read(MAX_PAYLOAD_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"--body-file: cannot read {where}: {e.strerror or e}") from None
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise ConfigError(f"--body-file: {where} is larger than the body limit of {MAX_PAYLOAD_BYTES} bytes (1 MiB)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"--body-file: {where} is not UTF-8 text (byte {e.start}); the body is sent as text") \
            from None


def _http_executor(a: argparse.Namespace) -> dict:
    headers = _pairs(a.header, ":", "--header")
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
    from shardcron.spec.job import job_from_dict

    d: dict = {"id": a.id}
    sched: dict = {}
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
    for key, value in (("catchup", a.catchup), ("catchup_window", a.catchup_window), ("overlap", a.overlap),
                       ("timeout", a.timeout_job), ("jitter", a.jitter), ("calendars", a.calendar),
                       ("history_limit", a.history_limit)):
        if value is not None:
            d[key] = value
    if a.retry_backoff is not None and a.retries is None:
        raise ConfigError("--retry-backoff: only with --retries N (without retries there is nothing to delay)")
    if a.retries is not None:
        d["retry"] = {"max_attempts": a.retries + 1}
        if a.retry_backoff is not None:
            d["retry"]["backoff"] = a.retry_backoff
    d["paused"] = bool(a.paused)
    d["labels"] = dict(_pairs(a.label, "=", "--label"))
    _notifications_from_flags(a, d)
    return job_from_dict(d, require_executor=True)


def _notifications_from_flags(a: argparse.Namespace, d: dict) -> None:
    """``--on-failure SPEC`` / ``--on-recovery SPEC``: a webhook URL or an executor table as JSON."""
    from shardcron.spec.notifications import parse_cli, to_table

    for flag, key in (("--on-failure", "on_failure"), ("--on-recovery", "on_recovery")):
        raw = getattr(a, key)
        if raw is not None:
            d[key] = to_table(parse_cli(raw, flag))


# -- commands ---------------------------------------------------------------------------


def cmd_put(a: argparse.Namespace) -> int:
    job = job_from_flags(a)
    with _client(a) as c:
        stored = c.put_job(job, expected_version=a.expected_version)
        shard = _shard_of(c, [stored.id]).get(stored.id)
    if a.json:
        _print_json(job_json(stored, shard))
    else:
        verb = "created" if stored.version == 1 else "updated"
        print(f"{job_named(stored.id)} {verb} (version {stored.version}, shard {shard})")
    return 0


def cmd_get(a: argparse.Namespace) -> int:
    with _client(a) as c:
        job, runs = c.get_job_runs(a.id)
        shard = _shard_of(c, [job.id]).get(job.id)
    if a.json:
        _print_json({**job_json(job, shard), "runs": runs_json(runs)})
    else:
        print(jobs_table([(job, runs)], {job.id: shard}))
        if job.calendars:
            print(f"calendars: {', '.join(job.calendars)}")
        if runs.next_reason:
            print(f"next: {runs.next_reason}")
    return 0


def cmd_delete(a: argparse.Namespace) -> int:
    with _client(a) as c:
        c.delete_job(a.id)
    if a.json:
        _print_json({"id": a.id, "deleted": True})
    else:
        print(f"job {a.id} deleted")
    return 0


def _cmd_pause(a: argparse.Namespace, paused: bool) -> int:
    with _client(a) as c:
        job = c.pause_job(a.id) if paused else c.resume_job(a.id)
    if a.json:
        _print_json(job_json(job))
    else:
        print(f"{job_named(job.id)} {'paused' if paused else 'resumed'} (version {job.version})")
    return 0


def cmd_pause(a: argparse.Namespace) -> int:
    return _cmd_pause(a, True)


def cmd_resume(a: argparse.Namespace) -> int:
    return _cmd_pause(a, False)


def cmd_trigger(a: argparse.Namespace) -> int:
    with _client(a) as c:
        slot = c.trigger_job(a.id)
    key = split_key(slot.job_id)
    if a.json:
        _print_json({"id": key.id, "namespace": key.namespace, "scheduled_at_ms": slot.scheduled_at_ms})
    else:
        print(f"{job_named(slot.job_id)} triggered: tick {fmt_ms(slot.scheduled_at_ms)}")
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    labels = dict(_pairs(a.label, "=", "--label"))
    namespace = _listed_namespace(a)
    with _client(a) as c:
        listed = list(c.list_jobs_runs(labels=labels, shard=a.shard, namespace=namespace))
        jobs = [j for j, _ in listed]
        shards = _shard_of(c, [j.id for j in jobs]) if jobs else {}
    if a.json:
        _print_json([{**job_json(j, shards.get(j.id)), "runs": runs_json(r)} for j, r in listed])
    elif jobs and namespace:  # every namespace: each row says whose
        print(jobs_table(listed, shards, namespaced=True))
    elif jobs:
        print(jobs_table(listed, shards))
    else:
        print("no jobs", file=sys.stderr)
    return 0


def cmd_apply(a: argparse.Namespace) -> int:
    from shardcron.spec.jobfile import load_job_file

    from shardcron.spec.jobfile import load_file_calendars

    jobs = load_job_file(a.file)
    calendars = load_file_calendars(a.file)
    with _client(a) as c:
        # The file's calendars first: its jobs may name them.
        for calendar in calendars:
            stored = c.put_calendar(calendar)
            if not a.json:
                print(f"calendar {calendar.name} version {stored.version}")
        results = c.put_jobs(jobs)
    failed = [r for r in results if not r.ok]
    if a.json:
        _print_json([
            {"id": r.id, "ok": r.ok, "code": r.code, "message": r.message,
             "version": r.job.version if r.job else None, "unchanged": r.unchanged}
            for r in results
        ])
    else:
        rows = []
        for r in results:
            if r.ok:
                state = "unchanged" if r.unchanged else "created" if r.job.version == 1 else "updated"
                rows.append([r.id, "ok", r.job.version, state])
            else:
                rows.append([r.id, r.code, "-", r.message])
        print(_table(rows, ["ID", "RESULT", "VERSION", "DETAIL"]))
    if failed:
        raise ApplyFailed(f"{len(failed)} of {len(results)} jobs in {a.file} were not applied")
    return 0


def cmd_ticks(a: argparse.Namespace) -> int:
    with _client(a) as c:
        ticks = c.list_ticks(a.id, limit=a.limit)
        if not ticks:
            _require_job(c, a.id)  # no ticks of a job that does not exist is a typo, not an empty history
        if not a.follow:
            if a.json:
                _print_json([tick_json(t) for t in ticks])
            elif ticks:
                print(_table([_tick_row(t) for t in ticks], TICK_HEADERS))
            else:
                print(f"no ticks recorded for {a.id} yet", file=sys.stderr)
            return 0
        return _follow(c, a, ticks)


def _require_job(client, job_id: str) -> None:
    from shardcron.client.client import NotFound

    try:
        client.get_job(job_id)
    except NotFound:
        raise NoSuchJob(f"no job named {job_id!r} (and no ticks recorded under that id); "
                        "`shardcron jobs list` shows the jobs") from None


def _follow(c, a: argparse.Namespace, ticks: list[Tick]) -> int:
    """Oldest first, then each result as it is written; one line each (JSON lines with --json)."""
    watch = c.watch_ticks(a.id)
    seen = set()
    widths = [26, 10, 7, 14, 6, 9]

    def emit(t: Tick) -> None:
        if a.json:
            print(json.dumps(tick_json(t), sort_keys=True), flush=True)
        else:
            cells = [str(x) for x in _tick_row(t)]
            print("  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=False)) + "  " + cells[-1],
                  flush=True)

    if not a.json:
        print("  ".join(h.ljust(w) for h, w in zip(TICK_HEADERS, widths, strict=False)) + "  " + TICK_HEADERS[-1],
              flush=True)
    for t in reversed(ticks):
        seen.add((t.scheduled_at_ms, t.attempt, t.status))
        emit(t)
    try:
        for t in watch:
            key = (t.scheduled_at_ms, t.attempt, t.status)
            if key not in seen:
                emit(t)
    finally:
        watch.cancel()
    return 0


# -- the parser ---------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", action="append", metavar="HOST:PORT",
                   help=f"a node's API address; repeat to give others to try [SHARDCRON_SERVER] "
                        f"(default {DEFAULT_SERVER})")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--request-timeout", type=seconds(), default=30.0, metavar="SECONDS",
                   help="give up on the call after this long; more than 0 (default %(default)s)")
    p.add_argument("-n", "--namespace", metavar="NAME",
                   help=f"the namespace of the jobs named [{NAMESPACE_ENV}] (default: default)")
    add_client_flags(p)


def _add(sub, name: str, func, help_: str, *, with_id: bool = True) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_, description=help_)
    if with_id:
        p.add_argument("id", metavar="ID", help="the job's id")
    _common(p)
    p.set_defaults(func=func)
    return p


def register(subparsers) -> None:
    """Add ``jobs`` and ``ticks`` to the ``shardcron`` command (called by ``cli.build_parser``)."""
    jobs = subparsers.add_parser("jobs", help="create, inspect and change jobs through the API")
    sub = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND")
    sub.required = True

    put = _add(sub, "put", cmd_put, "create or replace a job")
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
    what.add_argument("--nats", metavar="SUBJECT", help="publish to this NATS subject (JetStream unless --no-jetstream)")
    what.add_argument("--amqp", metavar="ROUTING_KEY", help="publish to RabbitMQ with this routing key (the queue, "
                                                            "with the default exchange)")
    what.add_argument("--redis-stream", metavar="STREAM", help="XADD to this Redis stream at --broker")
    what.add_argument("--python", metavar="MODULE:FUNCTION", help="call this function on the leader (needs nodes "
                                                                  "with --allow-python covering the module)")
    dispatch = put.add_argument_group("brokers and python calls")
    dispatch.add_argument("--broker", metavar="URL", help="the broker's URL: redis://, amqp://, nats:// "
                                                          "[SHARDCRON_BROKER]")
    dispatch.add_argument("--args", metavar="JSON", help="positional arguments, a JSON array")
    dispatch.add_argument("--kwargs", metavar="JSON", help="keyword arguments, a JSON object")
    dispatch.add_argument("--queue", metavar="NAME", help="queue (celery, rq: default; arq: arq:queue)")
    dispatch.add_argument("--routing-key", metavar="KEY", help="celery: the routing key")
    dispatch.add_argument("--exchange", metavar="NAME", help="amqp: the exchange (default: the default exchange)")
    dispatch.add_argument("--priority", type=whole(0, MAX_PRIORITY), metavar="N", help="celery: the task's priority (0-255)")
    dispatch.add_argument("--expires", metavar="D", help="celery: workers drop the task this long after its slot")
    dispatch.add_argument("--no-jetstream", action="store_true", help="nats: a core publish (no ack, no dedupe)")
    dispatch.add_argument("--transient", action="store_true", help="amqp: not persistent (delivery mode 1)")
    dispatch.add_argument("--content-type", metavar="TYPE", help="amqp: the message's content type "
                                                                 "(default application/json)")
    dispatch.add_argument("--field", action="append", metavar="K=V", help="redis-stream: an entry field; repeatable")
    dispatch.add_argument("--maxlen", type=whole(1, INT64_MAX), metavar="N", help="redis-stream: trim the stream to about N entries")
    dispatch.add_argument("--dedupe-ttl", metavar="D", help="redis-stream: how long a slot's dedupe marker lives "
                                                            "(default: longer than the catch-up window)")
    dispatch.add_argument("--tick-kwarg", metavar="NAME", help="arq: pass the tick as this keyword argument")
    dispatch.add_argument("--session", action="store_true", help="python: pass a fenced database session "
                                                                 "(PostgreSQL, MariaDB)")
    put.add_argument("--method", default=None, help="HTTP method (default POST)")
    put.add_argument("--header", action="append", metavar="K:V",
                     help="HTTP, NATS or AMQP header; repeatable (Authorization, Proxy-Authorization, Cookie and X-Api-Key "
                          "are always secret)")
    put.add_argument("--secret-header", action="append", metavar="NAME[:VALUE]",
                     help="a header whose value is never logged nor shown: NAME marks a --header, NAME:VALUE "
                          "gives one; repeatable")
    body = put.add_mutually_exclusive_group()
    body.add_argument("--body", metavar="B", help="HTTP request body, or the NATS or AMQP message body")
    body.add_argument("--body-file", metavar="PATH", help="HTTP request body read from PATH (- for stdin), "
                                                          "for bodies too long for the command line (up to 1 MiB)")
    put.add_argument("--catchup", choices=["all", "latest", "none"], help="missed slots policy (default all)")
    put.add_argument("--catchup-window", metavar="D", help="how far back missed slots are owed (default 1h)")
    put.add_argument("--overlap", choices=["skip", "allow"], help="when the previous run is still going (default skip)")
    put.add_argument("--timeout", dest="timeout_job", metavar="D", help="the job's run timeout (default 60s)")
    put.add_argument("--history-limit", type=whole(1, MAX_HISTORY_LIMIT), metavar="N",
                     help="keep at most the job's N newest ticks; older finished ones are deleted (default: all)")
    put.add_argument("--jitter", metavar="D", help="start each slot a fixed offset in [0, D) after it, the same on "
                                                   "every leader; shorter than the gap between slots (default 0)")
    put.add_argument("--calendar", action="append", metavar="NAME",
                     help="a stored calendar the job follows: slots it excludes are not run; repeatable")
    put.add_argument("--on-failure", metavar="SPEC", help="run once per failed slot, after its retries: an "
                                                          "http(s):// webhook URL, or an executor table as JSON")
    put.add_argument("--on-recovery", metavar="SPEC", help="run once when a slot succeeds after failed ones "
                                                           "(same SPEC forms)")
    put.add_argument("--retries", type=whole(0, MAX_ATTEMPTS - 1), metavar="N",
                     help="retries after a failed attempt, so N+1 attempts at most (default 0)")
    put.add_argument("--retry-backoff", metavar="D", help="first retry delay (default 1s)")
    put.add_argument("--label", action="append", metavar="K=V", help="label; repeatable")
    put.add_argument("--paused", action="store_true", help="create it paused")
    put.add_argument("--expected-version", type=whole(0, MAX_VERSION), metavar="N",
                     help="only if the stored job is at version N (0: only create)")

    _add(sub, "get", cmd_get, "show a job")
    _add(sub, "delete", cmd_delete, "delete a job (its ticks stay, as history)")
    _add(sub, "pause", cmd_pause, "pause a job")
    _add(sub, "resume", cmd_resume, "resume a paused job (the paused time is not owed)")
    _add(sub, "trigger", cmd_trigger, "run a job now, as an extra tick")
    backfill.register(sub, _add)

    ls = _add(sub, "list", cmd_list, "list jobs", with_id=False)
    ls.add_argument("--label", action="append", metavar="K=V", help="only jobs with this label; repeatable")
    ls.add_argument("--shard", type=whole(0, MAX_SHARD - 1), metavar="K", help="only shard K's jobs")
    ls.add_argument("-A", "--all-namespaces", action="store_true",
                    help="jobs of every namespace the token may read")

    apply = _add(sub, "apply", cmd_apply, "create or replace every job of a TOML, YAML or JSON file", with_id=False)
    apply.add_argument("-f", "--file", required=True, metavar="FILE", help="the jobs file")

    ticks = _add(subparsers, "ticks", cmd_ticks, "a job's ticks, newest first")
    ticks.add_argument("--limit", type=whole(1, MAX_LISTED_TICKS), default=20, metavar="N",
                       help="how many (default %(default)s)")
    ticks.add_argument("--follow", "-f", action="store_true", help="then print each new result as it is written")
