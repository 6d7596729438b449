"""Every bound a job's values must respect, in one place, with the reason for each.

The spec is the gate: ``job.job_from_dict`` (and what it calls) checks each
bound once, where a job is parsed, so nothing downstream (the claimer's waits,
the store's columns, the protobuf messages, the renderers) meets a value it
cannot hold. A value outside a bound is an ``InvalidJob`` naming the field.

=====================  ==============================  ==========================================================
bound                  value                           why
=====================  ==============================  ==========================================================
``at``                 1970-01-01T00:00:00Z ..         every instant must convert to a ``datetime`` (years 1-9999)
                       9999-12-31T23:59:59.999Z        and to an epoch-ms BIGINT; before 1970 is never owed
durations              <= 10 years                     interval, catch-up window, timeout, backoff, backoff_max,
                                                       celery ``expires``, redis-stream ``dedupe_ttl``: any wait
                                                       built from one fits ``threading.TIMEOUT_MAX`` (292 years)
                                                       and a slot plus one stays inside year 9999 for centuries
jitter                 <= 1 day, and < the shortest    a jitter spreads starts; longer only delays them. Less
                       gap between two slots           than the gap keeps the starts in slot order
retry.max_attempts     1 .. 100                        each attempt is a row update and a run; ``attempt`` is an
                                                       INTEGER column
history_limit          1 .. 1,000,000 ticks            the pruner keeps that many rows per job; a bigger number
                                                       is "keep everything", which is the absent key
version                0 .. 2**31 - 1                  ``jobs.version`` is an INTEGER column
other integers         within signed 64 bits           BIGINT columns, protobuf int64 fields, msgpack and Redis
                                                       integers (JSON values in args and kwargs included)
cron                   fires within 10 years           an expression that never fires ("0 0 30 2 *") would be a
                                                       job that silently never runs
JSON nesting           <= 32 levels                    args and kwargs of a task; parsers recurse per level, so
                                                       deeper input could exhaust the stack
stored JSON nesting    <= 512 levels                   a stored job read back (the client reads an answer):
                                                       admitted under no depth limit, it must still list; the
                                                       cap stays well inside Python's 1000-frame recursion limit
job file size          <= 64 MiB                       read up to the limit plus one byte, never the whole of a
                                                       device or a runaway file
job file nesting       <= 64 levels                    the deepest legitimate path is jobs.<id>.executor.args
                                                       plus 32 levels of JSON
YAML aliases/anchors   refused                         an alias expands in place: 534 bytes can become gigabytes
job file encoding      UTF-8                           one encoding everywhere; a wrong guess would corrupt ids
ids and names          printable characters only       no control, format (bidi overrides, zero-width), private-
                                                       use, unassigned or non-ASCII space characters: what a
                                                       listing shows must be what is stored
echoed values          80 characters                   an error message quotes a value, never megabytes of it
=====================  ==============================  ==========================================================
"""

from __future__ import annotations

import reprlib
from datetime import UTC, datetime

from shardcron.errors import InvalidJob

# -- time ------------------------------------------------------------------------------
MIN_TIME_MS = 0  # 1970-01-01T00:00:00Z
MAX_TIME_MS = int(datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC).timestamp() * 1000)  # 253402300799999
DAY_MS = 86_400_000
YEAR_MS = 365 * DAY_MS
MAX_DURATION_MS = 10 * YEAR_MS
MAX_JITTER_MS = DAY_MS
CRON_HORIZON_MS = 10 * YEAR_MS
# The shortest gap a schedule may have unless the cluster's minimum is changed:
# one keystroke turns 1m into 1ms, and 1,000 ticks a second of one job would
# take a node down.
DEFAULT_MIN_INTERVAL_MS = 1000

# -- integers --------------------------------------------------------------------------
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_ATTEMPTS = 100
MAX_HISTORY_LIMIT = 1_000_000
MAX_VERSION = INT32_MAX

# -- text and structure ----------------------------------------------------------------
MAX_JSON_DEPTH = 32
MAX_STORED_JSON_DEPTH = 512
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_FILE_DEPTH = 64
MAX_PAYLOAD_BYTES = 1024 * 1024  # a shell command, an http body
SHOWN_CHARS = 80


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with a marker saying so.

    Every message that quotes a caller's value goes through this: a 10 MB id must not come back whole.
    """
    if isinstance(value, str | bytes | list | tuple | dict) and len(value) > limit:
        if isinstance(value, str | bytes):
            return f"{value[:limit]!r}... (cut: {len(value)} characters long)"
        return f"{_container_start(value, limit)}... (cut: {len(value)} items long)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit integer"  # repr refuses integers past 4300 digits
    try:
        text = repr(value)
    except RecursionError:  # a list nested thousands deep: its start says enough
        return f"{_container_start(value, limit)}... (cut: nested too deep)"
    return text if len(text) <= limit else f"{text[:limit]}... (cut)"


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` (a message, not a value: no quotes) cut to ``limit`` characters with a marker saying so."""
    return text if len(text) <= limit else f"{text[:limit]}... (cut: {len(text)} characters long)"


def _container_start(value: object, limit: int) -> str:
    """The start of a container's repr, without building the whole of it."""
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxstring, r.maxother = 2, 8, 8, 8, limit, limit
    try:
        return r.repr(value)[:limit]
    except ValueError:  # an integer past repr's 4300 digits inside it
        return type(value).__name__


def check_int(value: object, field: str, minimum: int = INT64_MIN, maximum: int = INT64_MAX, why: str = "") -> int:
    """``value`` if it is a whole number (not a bool) within ``[minimum, maximum]``, else ``InvalidJob``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(field, f"must be a whole number, got {shown(value)}")
    if value < minimum:
        raise InvalidJob(field, f"must be at least {minimum}, got {shown(value)}")
    if value > maximum:
        raise InvalidJob(field, f"must be at most {maximum}{why}, got {shown(value)}")
    return value


def check_time_ms(ms: int, field: str) -> int:
    """An instant within years 1970-9999, as epoch milliseconds."""
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise InvalidJob(field, f"{shown(ms)} ms is outside 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z")
    return ms


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that an id or a name must not hold, as U+XXXX; None when all are fine.

    ``str.isprintable`` is False for every "Other" (control, format, surrogate, private use,
    unassigned) and "Separator" character but the ASCII space: bidi overrides and
    isolates (U+202A-U+202E, U+2066-U+2069), marks (U+200E, U+200F, U+061C) and the
    zero-width ones (U+200B-U+200D, U+2060, U+FEFF) are all format characters.
    """
    if text.isprintable():
        return None
    bad = next(c for c in text if not c.isprintable())
    return f"U+{ord(bad):04X}"


__all__ = [
    "CRON_HORIZON_MS",
    "DAY_MS",
    "INT32_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ATTEMPTS",
    "MAX_DURATION_MS",
    "MAX_FILE_BYTES",
    "MAX_FILE_DEPTH",
    "MAX_HISTORY_LIMIT",
    "MAX_JITTER_MS",
    "MAX_JSON_DEPTH",
    "MAX_STORED_JSON_DEPTH",
    "MAX_TIME_MS",
    "MAX_VERSION",
    "MIN_TIME_MS",
    "SHOWN_CHARS",
    "YEAR_MS",
    "check_int",
    "check_time_ms",
    "cut",
    "shown",
    "unprintable",
]
