"""Job definitions as plain data: parsing, validation and serialisation.

One place decides what a valid job is, whichever way it arrives (a TOML or
YAML file, the gRPC API, the CLI). Every rejection is an ``InvalidJob`` that
names the field and says why.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from decimal import Decimal
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from croniter import CroniterBadDateError, croniter

from shardcron.spec.bounds import (
    CRON_HORIZON_MS,
    DAY_MS,
    MAX_ATTEMPTS,
    MAX_DURATION_MS,
    MAX_HISTORY_LIMIT,
    MAX_JITTER_MS,
    MAX_VERSION,
    check_int,
    check_time_ms,
    cut,
    shown,
    unprintable,
)
from shardcron.clock import wall_ms
from shardcron.coordination.cluster_config import DEFAULT_MIN_INTERVAL_MS
from shardcron.errors import InvalidJob
from shardcron.spec.headers import mask_url, masked_headers
from shardcron.jobkey import DEFAULT_NAMESPACE, split_key
from shardcron.model import (
    CatchUp,
    ExecutorKind,
    ExecutorSpec,
    HttpSpec,
    Job,
    Overlap,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    ShellSpec,
)

MAX_JOB_ID_BYTES = 256
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_LABELS = 64
MAX_LABEL_CHARS = 256
HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"})

# The keys each level of a job takes. Anything else is refused, naming the key:
# a misspelled key that were ignored would silently change what the job does
# (``timzone`` would run it in UTC).
SCHEDULE_KEYS = frozenset({"cron", "every", "interval_ms", "at", "at_ms", "timezone", "tz"})
JOB_KEYS = frozenset({"id", "namespace", "schedule", "executor", "catchup", "catchup_window", "overlap", "timeout", "retry",
                      "paused", "labels", "version", "jitter", "calendars", "history_limit",
                      "on_failure", "on_recovery"})
RETRY_KEYS = frozenset({"max_attempts", "backoff", "backoff_max"})
EXECUTOR_KEYS = {
    ExecutorKind.NOOP: frozenset({"kind"}),
    ExecutorKind.SHELL: frozenset({"kind", "command"}),
    ExecutorKind.HTTP: frozenset({"kind", "url", "method", "headers", "body", "secret_headers"}),
}

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _utf8_size(text: str, field: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidJob(field, "is not valid Unicode text (it holds a lone surrogate)") from None


def parse_duration_ms(text: str | int | float, field: str = "duration") -> int:
    """``"90s"``, ``"1m30s"``, ``"250ms"``, ``"2h"`` or a number of seconds; at most ten years.

    Decimal arithmetic, so a value near the limit is judged exactly, not after float rounding.
    """
    # Checked before the cache: a list or a dict cannot be a cache key, and a subclass of str or
    # int (a YAML scalar type) becomes the plain value so it hashes like one.
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise InvalidJob(field, f"expected a duration such as 30s, 5m or 1h30m, got {shown(text)}")
    plain = str(text) if isinstance(text, str) else int(text) if isinstance(text, int) else float(text)
    return _parse_duration_ms(plain, field)


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True must not hit the entry of 1
def _parse_duration_ms(text: str | int | float, field: str) -> int:
    bad = InvalidJob(field, f"expected a duration such as 30s, 5m or 1h30m, got {shown(text)}")
    if isinstance(text, float) and not math.isfinite(text):
        raise bad
    if isinstance(text, int | float):
        total = Decimal(str(text)) * 1000
    else:
        s = str(text).strip().lower()
        if len(s) > 64:  # no duration is this long; the part regex below backtracks quadratically on digits
            raise bad
        if re.fullmatch(r"\d+(\.\d+)?", s):
            total = Decimal(s) * 1000
        else:
            pos, total = 0, Decimal(0)
            for m in _DURATION_PART.finditer(s):
                if m.start() != pos:
                    break
                total += Decimal(m.group(1)) * _UNIT_MS[m.group(2)]
                pos = m.end()
            if pos != len(s) or not s:
                raise bad
    if abs(total) > MAX_DURATION_MS:
        raise InvalidJob(field, f"{shown(text)} is longer than the limit of ten years")
    return int(total.to_integral_value())


def format_duration_ms(ms: int | None) -> str:
    """The inverse of ``parse_duration_ms``: 1500 -> 1.5s, 90000 -> 1m30s, 86400000 -> 1d."""
    if ms is None:
        return "-"
    if ms < 1000 or ms % 1000 and ms < 60_000:
        return f"{ms}ms" if ms < 1000 else f"{ms / 1000:g}s"
    out, rest = "", ms // 1000
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out


def parse_time_ms(text: str | int | float | datetime, timezone: str = "UTC", field: str = "at") -> int:
    """An ISO-8601 time (naive times are read in ``timezone``) or epoch milliseconds."""
    if isinstance(text, bool):
        raise InvalidJob(field, f"expected an ISO-8601 time, got {shown(text)}")
    if isinstance(text, float) and not math.isfinite(text):
        raise InvalidJob(field, f"expected an ISO-8601 time, got {shown(text)}")
    if isinstance(text, int | float):
        return int(text)
    if isinstance(text, datetime):
        dt = text
    else:
        try:
            dt = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidJob(field, "expected an ISO-8601 time such as 2030-01-01T09:00:00+01:00, "
                                    f"got {shown(text)}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=load_timezone(timezone))
    return (dt - _EPOCH_UTC) // _ONE_MS  # whole milliseconds, exact: no float rounding near year 9999


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def load_timezone(name: str, field: str = "timezone") -> zoneinfo.ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidJob(field, "must be an IANA zone name such as UTC or Europe/Lisbon")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidJob(field, f"unknown timezone {shown(name)}; use an IANA name such as Europe/Lisbon") from None


def validate_cron(expr: str, field: str = "schedule.cron") -> str:
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidJob(field, "must be a cron expression of 5 fields, or 6 with seconds first")
    expr = " ".join(expr.split())
    n = len(expr.split(" "))
    if n not in (5, 6):
        raise InvalidJob(field, f"{shown(expr)} has {n} fields; expected 5, or 6 with seconds first")
    if not _valid_cron(expr):
        raise InvalidJob(field, f"{shown(expr)} is not a valid cron expression")
    return expr


@functools.lru_cache(maxsize=4096)
def _valid_cron(expr: str) -> bool:
    # A fleet's jobs share a few hundred expressions; parsing each again costs
    # most of a job's validation (100,000 jobs in one PutJobs burst).
    return croniter.is_valid(expr, second_at_beginning=True)


def validate_job_id(job_id: Any, field: str = "id", *, printable: bool = True) -> str:
    """``job_id`` if it is a valid id: 1-256 bytes of UTF-8, printable (``check_printable``) unless not
    ``printable`` (an id read back from the store, where only control characters were ever refused)."""
    if not isinstance(job_id, str) or not job_id:
        raise InvalidJob(field, "must be a non-empty string")
    if len(job_id) > MAX_JOB_ID_BYTES:  # each character is at least a byte: no need to encode a huge one
        raise InvalidJob(field, f"is {len(job_id)} characters long; the limit is {MAX_JOB_ID_BYTES} bytes")
    try:
        size = len(job_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidJob(field, "must be valid Unicode (no lone surrogates)") from None
    if size > MAX_JOB_ID_BYTES:
        raise InvalidJob(field, f"is {size} bytes long; the limit is {MAX_JOB_ID_BYTES}")
    if printable:
        check_printable(job_id, field)
    elif _CONTROL_CHAR.search(job_id):
        raise InvalidJob(field, "must not contain control characters")
    return job_id


# C0 controls and DEL: refused in every id and label, even one read back from the store.
_CONTROL_CHAR = re.compile("[\x00-\x1f\x7f]")


def check_printable(text: str, field: str, what: str = "") -> None:
    """Refuse ``text`` holding a character a listing would not show as it is (``bounds.unprintable``):
    a control character, a bidi override or a zero-width space would make one id look like another."""
    bad = unprintable(text)
    if bad is not None:
        raise InvalidJob(field, f"{what}must hold printable characters only, and {bad} is not (no control characters, "
                                "bidi or zero-width format characters, private-use, unassigned or non-ASCII spaces)")


def _check_keys(d: Mapping, allowed: frozenset[str], where: str = "", what: str = "") -> None:
    """Refuse the first key of ``d`` not in ``allowed``, naming it, with a "did you mean" when one is close."""
    for key in d:
        if key in allowed:
            continue
        # The key is the caller's text: cut, so a megabyte key is not echoed whole.
        name = cut(key) if isinstance(key, str) else shown(key)
        field = f"{where}.{name}" if where else name
        close = isinstance(key, str) and len(key) <= 64  # difflib is quadratic: a huge key is no typo
        hint = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6) if close else []
        said = f"unknown key{what}"
        if hint:
            raise InvalidJob(field, f"{said}; did you mean {hint[0]!r}?")
        raise InvalidJob(field, f"{said}; expected one of: {', '.join(sorted(allowed))}")


def _enum(cls, value, field):
    try:
        if isinstance(value, str):
            return cls(value.lower())
    except ValueError:
        pass
    raise InvalidJob(field, f"{shown(value)} is not one of: {', '.join(m.value for m in cls)}")


def _int(value, field, minimum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(field, f"must be a whole number, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise InvalidJob(field, f"must be at least {minimum}, got {shown(value)}")
    return value


def _duration(d: Mapping, key: str, field: str, default: int, minimum: int = 1) -> int:
    if key not in d or d[key] is None:
        return default
    ms = parse_duration_ms(d[key], field)
    if ms < minimum:
        raise InvalidJob(field, f"must be at least {minimum} ms, got {shown(d[key])}")
    return ms


def _parse_schedule(d: Mapping, *, bounded: bool = True) -> Schedule:
    """The schedule table; ``bounded``: also check its bounds (``check_schedule_bounds``)."""
    schedule = _parse_schedule_fields(d)
    if bounded:
        check_schedule_bounds(schedule)
    return schedule


def check_schedule_bounds(schedule: Schedule, now_ms: int | None = None) -> None:
    """Refuse a schedule outside its bounds (``bounds.py``): an interval longer than ten years, a single run
    outside years 1970-9999, a cron expression with no slot in the ten years from ``now_ms`` (the clock)."""
    if schedule.kind is ScheduleKind.INTERVAL and schedule.interval_ms > MAX_DURATION_MS:
        raise InvalidJob("schedule.interval_ms", f"{shown(schedule.interval_ms)} ms is longer than the limit of ten "
                                                 f"years ({MAX_DURATION_MS} ms)")
    if schedule.kind is ScheduleKind.ONCE:
        check_time_ms(schedule.at_ms, "schedule.at")
    if schedule.kind is ScheduleKind.CRON:
        day = (wall_ms() if now_ms is None else now_ms) // DAY_MS
        if not _cron_fires_within(schedule.cron, schedule.timezone, day):
            raise InvalidJob("schedule.cron", f"{shown(schedule.cron)} never fires in the next ten years (a date "
                                              "that does not exist, such as February 30?); it would never run")


@functools.lru_cache(maxsize=4096)
def _cron_fires_within(expr: str, timezone: str, day: int) -> bool:
    """Whether ``expr`` has a slot in the ten years from the start of ``day`` (days since the epoch).
    Cached per day: a fleet shares a few hundred expressions, and the answer moves only over years."""
    from shardcron.rules.triggers import CronTrigger  # it imports the model this module builds

    start = day * DAY_MS
    slot = CronTrigger(expr, timezone).next_after(start)
    return slot is not None and slot <= start + CRON_HORIZON_MS


def _parse_schedule_fields(d: Mapping) -> Schedule:
    _check_keys(d, SCHEDULE_KEYS, "schedule")
    tz = d.get("timezone", d.get("tz", "UTC")) or "UTC"
    load_timezone(tz)
    given = [k for k in ("cron", "every", "interval_ms", "at", "at_ms") if d.get(k) not in (None, "")]
    if len(given) != 1:
        raise InvalidJob("schedule", "give exactly one of cron, every (interval) or at (single run)")
    key = given[0]
    if key == "cron":
        return Schedule(ScheduleKind.CRON, cron=validate_cron(d["cron"]), timezone=tz)
    if key in ("every", "interval_ms"):
        raw = d[key]
        ms = _int(raw, "schedule.interval_ms") if key == "interval_ms" else parse_duration_ms(raw, "schedule.every")
        if ms <= 0:
            raise InvalidJob(f"schedule.{key}", f"the interval must be positive, got {shown(raw)}")
        return Schedule(ScheduleKind.INTERVAL, interval_ms=ms, timezone=tz)
    at = d["at_ms"] if key == "at_ms" else d["at"]
    return Schedule(ScheduleKind.ONCE, at_ms=parse_time_ms(at, tz, "schedule.at"), timezone=tz)


def _parse_headers(raw, field) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    items = raw.items() if isinstance(raw, Mapping) else raw
    out = []
    try:
        for k, v in items:
            if not isinstance(k, str) or not k or any(c in k for c in ":\r\n \t") or not k.isascii():
                raise InvalidJob(field, f"bad header name {shown(k)}")
            if not isinstance(v, str) or any(c in v for c in "\r\n") or _utf8_size(v, field) > 8192:
                raise InvalidJob(field, f"header {shown(k)} has a bad value")
            out.append((k, v))
    except (TypeError, ValueError):
        raise InvalidJob(field, "must be a table of name = value") from None
    return tuple(out)


_KINDS = ", ".join(k.value for k in ExecutorKind)


def parse_executor(d: Mapping | None, *, bounded: bool = True) -> ExecutorSpec:
    """An executor table; ``bounded``: check its values' bounds too (see ``job_from_dict``'s ``stored``)."""
    if d is None:
        raise InvalidJob("executor", f"missing: every job needs one, of kind {_KINDS}")
    if not isinstance(d, Mapping):
        raise InvalidJob("executor", f"must be a table with a kind ({_KINDS})")
    if not d.get("kind"):
        raise InvalidJob("executor.kind", f"missing: give one of {_KINDS}")
    kind = _enum(ExecutorKind, d.get("kind", ""), "executor.kind")
    if kind in EXECUTOR_KEYS:
        _check_keys(d, EXECUTOR_KEYS[kind], "executor", f" of the {kind.value} executor")
    if kind is ExecutorKind.NOOP:
        return ExecutorSpec(kind)
    if kind not in EXECUTOR_KEYS:
        from shardcron.spec import executors as dispatch_spec  # it builds on this module's helpers

        return dispatch_spec.parse(kind, d, bounded=bounded)
    if kind is ExecutorKind.SHELL:
        cmd = d.get("command")
        if not isinstance(cmd, str) or not cmd.strip():
            raise InvalidJob("executor.command", "a shell job needs a non-empty command")
        if _utf8_size(cmd, "executor.command") > MAX_PAYLOAD_BYTES:
            raise InvalidJob("executor.command", f"is larger than {MAX_PAYLOAD_BYTES} bytes")
        return ExecutorSpec(kind, shell=ShellSpec(cmd))
    url = d.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidJob("executor.url", "an http job needs a url")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidJob("executor.url", f"{shown(url)} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidJob("executor.url", f"{shown(url)} is not an http:// or https:// URL")
    method = str(d.get("method", "POST")).upper()
    if method not in HTTP_METHODS:
        raise InvalidJob("executor.method", f"{shown(method)} is not one of {', '.join(sorted(HTTP_METHODS))}")
    body = d.get("body", "") or ""
    if not isinstance(body, str):
        raise InvalidJob("executor.body", "must be a string")
    if (size := _utf8_size(body, "executor.body")) > MAX_PAYLOAD_BYTES:
        raise InvalidJob("executor.body", f"is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    headers = _parse_headers(d.get("headers"), "executor.headers")
    secret = d.get("secret_headers", ()) or ()
    if not isinstance(secret, list | tuple) or not all(isinstance(h, str) for h in secret):
        raise InvalidJob("executor.secret_headers", "must be a list of header names")
    return ExecutorSpec(kind, http=HttpSpec(url, method, headers, body, tuple(secret)))


def job_from_dict(d: Mapping, job_id: str | None = None, *, require_executor: bool = False,
                  stored: bool = False) -> Job:
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
        _check_keys(d, JOB_KEYS | SCHEDULE_KEYS)
        sched = {k: v for k, v in d.items() if k in SCHEDULE_KEYS}
    else:
        sched = d["schedule"]
        if not isinstance(sched, Mapping):
            raise InvalidJob("schedule", "must be a table")
        for key in sorted(SCHEDULE_KEYS.intersection(d)):
            raise InvalidJob(key, "belongs in the schedule table, which is given too: give the schedule in one place")
        _check_keys(d, JOB_KEYS)
    jid = validate_job_id(job_id if job_id is not None else d.get("id"), printable=bounded)
    if d.get("namespace") is not None:  # the job's key holds it (tenancy.keys); absent or empty: default
        from shardcron.spec.namespaces import store_key  # it validates with this module's rules

        jid = store_key(d["namespace"], jid)
    schedule = _parse_schedule(sched, bounded=bounded)
    if "executor" in d or require_executor:
        executor = parse_executor(d.get("executor"), bounded=bounded)
    else:
        executor = ExecutorSpec(ExecutorKind.NOOP)
    retry_d = d.get("retry", {}) or {}
    if not isinstance(retry_d, Mapping):
        raise InvalidJob("retry", "must be a table with max_attempts, backoff and backoff_max")
    _check_keys(retry_d, RETRY_KEYS, "retry")
    retry = RetryPolicy(
        max_attempts=_int(retry_d.get("max_attempts", 1), "retry.max_attempts", 1),
        backoff_initial_ms=_duration(retry_d, "backoff", "retry.backoff", 1000),
        backoff_max_ms=_duration(retry_d, "backoff_max", "retry.backoff_max", 60_000),
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
        elif _CONTROL_CHAR.search(k + v):  # the store's rule when the job was written, kept for reading it back
            raise InvalidJob("labels", f"label {shown(k, 40)}: keys and values must not contain control characters")
        if not k or len(k) > MAX_LABEL_CHARS or len(v) > MAX_LABEL_CHARS:
            raise InvalidJob("labels", f"label {shown(k, 40)}: keys must be 1-{MAX_LABEL_CHARS} and values at most "
                                       f"{MAX_LABEL_CHARS} characters")
        _utf8_size(k + v, "labels")
    paused = d.get("paused", False)
    if not isinstance(paused, bool):
        raise InvalidJob("paused", f"must be true or false, got {shown(paused)}")
    jitter_ms = _jitter(d.get("jitter"), schedule, bounded=bounded)
    calendars = _calendar_names(d.get("calendars"))
    from shardcron.spec.notifications import parse_table  # it builds on parse_executor

    return Job(
        id=jid,
        schedule=schedule,
        executor=executor,
        catchup=_enum(CatchUp, d.get("catchup", "all"), "catchup"),
        catchup_window_ms=_duration(d, "catchup_window", "catchup_window", 3_600_000, minimum=0),
        overlap=_enum(Overlap, d.get("overlap", "skip"), "overlap"),
        timeout_ms=_duration(d, "timeout", "timeout", 60_000),
        retry=retry,
        paused=paused,
        labels=dict(labels),
        version=check_int(d.get("version", 0), "version", 0, MAX_VERSION, " (the store's version column)"),
        jitter_ms=jitter_ms,
        calendars=calendars,
        history_limit=_history_limit(d.get("history_limit"), bounded=bounded),
        on_failure=parse_table(d.get("on_failure"), "on_failure", bounded=bounded),
        on_recovery=parse_table(d.get("on_recovery"), "on_recovery", bounded=bounded),
    )


def _calendar_names(raw) -> tuple[str, ...]:
    """A job's calendars: a list of calendar names (absent: none); whether each exists is the API's check."""
    if raw is None:
        return ()
    from shardcron.rules.calendars import check_calendar_name  # it imports this module's neighbours

    if isinstance(raw, str) or not isinstance(raw, list | tuple):
        raise InvalidJob("calendars", f"must be a list of calendar names such as [\"business\"], got {shown(raw)}")
    names: list[str] = []
    for i, name in enumerate(raw):
        reason = check_calendar_name(name)
        if reason:
            raise InvalidJob(f"calendars[{i}]", reason)
        if name not in names:
            names.append(name)
    return tuple(names)


def _history_limit(raw, *, bounded: bool) -> int | None:
    """The job's history limit (absent: keep every tick), a whole number of ticks, at least 1
    and, when ``bounded``, at most ``bounds.MAX_HISTORY_LIMIT``."""
    if raw is None:
        return None
    from shardcron.rules.retention import RetentionError, parse_history_limit  # it imports this module

    try:
        limit = parse_history_limit(raw, "history_limit")
    except RetentionError as e:
        raise InvalidJob("history_limit", e.reason) from None
    if bounded and limit > MAX_HISTORY_LIMIT:
        raise InvalidJob("history_limit", f"at most {MAX_HISTORY_LIMIT} ticks, got {shown(limit)}; to keep every "
                                          "tick, leave history_limit out")
    return limit


def _jitter(raw, schedule: Schedule, *, bounded: bool) -> int:
    """The job's jitter in ms (absent: 0); when ``bounded`` (not read back from the store), refused when
    longer than ``bounds.MAX_JITTER_MS`` or not shorter than the schedule's shortest gap."""
    if raw is None or raw == "":
        return 0  # the usual case: nothing parsed, no gap computed
    from shardcron.rules.jitter import check_jitter, parse_jitter  # it imports this module

    jitter_ms = parse_jitter(raw, "jitter")
    if bounded and jitter_ms > MAX_JITTER_MS:
        raise InvalidJob("jitter", f"{format_duration_ms(jitter_ms)} is longer than the limit of "
                                   f"{format_duration_ms(MAX_JITTER_MS)}")
    if jitter_ms and bounded:  # a stored job's jitter was checked against its gap when it was admitted
        # below_ms: only "is the gap at most the jitter?" matters, which spares walking a cron's calendar.
        check_jitter(jitter_ms, shortest_gap_ms(schedule, below_ms=jitter_ms + 1), "jitter")
    return jitter_ms


_DAY_S = 86_400


def shortest_gap_ms(schedule: Schedule, *, below_ms: int | None = None) -> int | None:
    """The shortest time between two consecutive slots of ``schedule``; None for a single run.

    For cron, on a day without a DST change (a change only ever merges slots).
    ``below_ms``: the caller only needs to know whether the gap is shorter than
    this; a cron gap that provably is not may be answered by a lower bound at
    least this long, which spares walking the calendar of a cron with day fields.
    """
    if schedule.kind is ScheduleKind.INTERVAL:
        return schedule.interval_ms
    if schedule.kind is ScheduleKind.CRON:
        within_day, overnight, exact = _cron_gaps_s(schedule.cron)
        if not exact and (below_ms is None or overnight * 1000 < below_ms):
            overnight = _cron_overnight_walked_s(schedule.cron)
        return min(g for g in (within_day, overnight) if g is not None) * 1000
    return None


@functools.lru_cache(maxsize=4096)
def _cron_gaps_s(expr: str) -> tuple[int | None, int, bool]:
    """(the shortest gap within a day or None, the overnight gap, whether that one is exact), from the fields.

    A day's slots are hours x minutes x seconds in lexicographic order, so the
    shortest gap is between neighbours in one field (the finer fields at their
    last and first values): no need to list the day's 86,400 slots. Overnight,
    from the day's last slot to the next day's first, is exact when every day
    runs, else a lower bound (the next running day may be later).
    """
    fields = croniter(expr, second_at_beginning=True).expanded
    minutes, hours = _values(fields[0], 60), _values(fields[1], 24)
    seconds = _values(fields[5], 60) if len(fields) > 5 else [0]
    gaps = [gap for gap in (
        _neighbour_gap(seconds, 1, 0),
        _neighbour_gap(minutes, 60, seconds[-1] - seconds[0]),
        _neighbour_gap(hours, 3600, minutes[-1] * 60 + seconds[-1] - minutes[0] * 60 - seconds[0]),
    ) if gap is not None]
    day_span = (hours[-1] - hours[0]) * 3600 + (minutes[-1] - minutes[0]) * 60 + seconds[-1] - seconds[0]
    every_day = fields[2] == ["*"] and fields[4] == ["*"]
    return (min(gaps) if gaps else None), _DAY_S - day_span, every_day


@functools.lru_cache(maxsize=256)
def _cron_overnight_walked_s(expr: str) -> int:
    """From each running day's last slot to the next slot, the shortest, over a few hundred running days."""
    fields = croniter(expr, second_at_beginning=True).expanded
    minute, hour = _values(fields[0], 60)[-1], _values(fields[1], 24)[-1]
    second = _values(fields[5], 60)[-1] if len(fields) > 5 else 0
    day_fields = " ".join(expr.split(" ")[-3:])  # day of month, month, day of week
    last_of_day = croniter(f"{second} {minute} {hour} {day_fields}", datetime(2030, 1, 1), second_at_beginning=True)
    gaps = []
    try:
        for _ in range(400):
            t = last_of_day.get_next(datetime)
            gaps.append(int((croniter(expr, t, second_at_beginning=True).get_next(datetime) - t).total_seconds()))
    except (CroniterBadDateError, OverflowError, ValueError):
        pass  # no more slots (a date that never comes, or past year 9999): the gaps found so far are all there are
    # None found (an expression that never fires, read back from the store): the fields' own overnight bound,
    # a lower bound of any real gap, so a rate computed from it (a namespace's quota) is never understated.
    return min(gaps, default=_cron_gaps_s(expr)[1])


def _values(field: list, size: int) -> list[int]:
    return list(range(size)) if field == ["*"] else sorted(int(x) for x in field)


def _neighbour_gap(values: list[int], unit_s: int, finer_span_s: int) -> int | None:
    """The shortest step between neighbouring ``values``, less the span of the finer fields it skips."""
    if len(values) < 2:
        return None
    return min(b - a for a, b in zip(values, values[1:], strict=False)) * unit_s - finer_span_s


def check_admissible(job: Job, *, allow_shell: bool, now_ms: int, shell_allow=None,
                     min_interval_ms: int = DEFAULT_MIN_INTERVAL_MS, allow_python: tuple[str, ...] = (),
                     store_dialect: str | None = None) -> None:
    """The checks that depend on the cluster, the node and the clock, not on the job alone.

    ``shell_allow``: a compiled pattern every shell command must match in full (``--shell-allow``).
    ``min_interval_ms``: the shortest gap between slots the cluster accepts (``--min-interval``).
    ``allow_python``: the module prefixes Python jobs may call (``--allow-python``).
    ``store_dialect``: the store's SQLAlchemy dialect name, for Python jobs that take a fenced session.
    """
    from shardcron.executors.extras import require_extra

    require_extra(job.executor.kind)
    if job.executor.kind is ExecutorKind.PYTHON:
        _check_python(job.executor.python, allow_python, store_dialect)
    gap = shortest_gap_ms(job.schedule, below_ms=min_interval_ms)
    if gap is not None and gap < min_interval_ms:
        field, what = (("schedule.cron", f"{shown(job.schedule.cron)} has slots {format_duration_ms(gap)} apart")
                       if job.schedule.kind is ScheduleKind.CRON else
                       ("schedule.every", f"every {format_duration_ms(gap)}"))
        raise InvalidJob(field, f"{what}: shorter than this cluster's minimum interval of "
                                f"{format_duration_ms(min_interval_ms)}; to allow it, lower the cluster's minimum with "
                                "`shardcron config --min-interval DURATION`")
    _check_notifications_admissible(job, allow_shell=allow_shell, allow_python=allow_python)
    if job.executor.kind is ExecutorKind.SHELL and not allow_shell:
        raise InvalidJob(
            "executor.kind", "shell jobs are refused: the nodes run without --allow-shell (remote code execution guard)"
        )
    if job.executor.kind is ExecutorKind.SHELL and shell_allow is not None \
            and not shell_allow.fullmatch(job.executor.shell.command):
        raise InvalidJob("executor.command", "does not match this cluster's --shell-allow list")
    sched = job.schedule
    if sched.kind is ScheduleKind.ONCE and sched.at_ms is not None and sched.at_ms < now_ms - job.catchup_window_ms:
        raise InvalidJob("schedule.at", "is in the past, beyond the job's catch-up window; it would never run")


def _check_notifications_admissible(job: Job, *, allow_shell: bool, allow_python: tuple[str, ...]) -> None:
    """A notification runs on the leader like the job's executor: the same node guards apply to it."""
    from shardcron.executors.extras import require_extra
    from shardcron.executors.python_target import check_target

    for field, spec in (("on_failure", job.on_failure), ("on_recovery", job.on_recovery)):
        if spec is None:
            continue
        require_extra(spec.kind)
        if spec.kind is ExecutorKind.SHELL and not allow_shell:
            raise InvalidJob(f"{field}.kind", "shell notifications are refused: the nodes run without --allow-shell")
        if spec.kind is ExecutorKind.PYTHON:
            refused = check_target(spec.python.target, allow_python)
            if refused is not None:
                raise InvalidJob(f"{field}.target", refused)


def _check_python(spec, allow_python: tuple[str, ...], store_dialect: str | None) -> None:
    from shardcron.executors.python_target import check_target

    if not allow_python:
        raise InvalidJob("executor.kind", "python jobs are refused: the nodes run without --allow-python MODULE_PREFIX "
                                          "(remote code execution guard)")
    if spec.session and store_dialect == "sqlite":
        raise InvalidJob("executor.session", "a fenced session needs a PostgreSQL or MariaDB store: on SQLite its "
                                             "open transaction would hold the whole file's write lock while the job runs")
    refused = check_target(spec.target, allow_python)  # imports the module: the checks without it come first
    if refused is not None:
        raise InvalidJob("executor.target", refused)


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
    }


def executor_to_dict(spec: ExecutorSpec) -> dict[str, Any]:
    """An executor's table as a job file gives it; ``parse_executor(executor_to_dict(s)) == s``."""
    ex: dict[str, Any] = {"kind": spec.kind.value}
    if spec.http:
        h = spec.http
        ex.update(url=h.url, method=h.method, headers=[list(p) for p in h.headers], body=h.body,
                  secret_headers=list(h.secret_headers))
    if spec.shell:
        ex["command"] = spec.shell.command
    if spec.kind not in EXECUTOR_KEYS:
        from shardcron.spec import executors as dispatch_spec

        ex.update(dispatch_spec.to_dict(spec))
    return ex


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
    "check_admissible",
    "job_from_dict",
    "job_from_json",
    "job_to_dict",
    "job_to_json",
    "load_timezone",
    "parse_duration_ms",
    "parse_time_ms",
    "redacted",
    "validate_cron",
    "validate_job_id",
    "with_version",
]
