"""Hypothesis strategies for fuzzing what users send: job specs as plain data, as protobuf messages
(any message of the API, built from its descriptor) and as job files in TOML, YAML and JSON.

Values lean towards the extremes that broke shardcron before: 64-bit edges and beyond, nan and inf,
years 1, 2400, 9999 and 10000, giant strings, bidi controls and zero-width characters, NUL and lone
surrogates, deeply nested JSON, cron expressions that never fire, wrong types and unknown keys,
YAML aliases and bytes that are not UTF-8. Most draws stay close to a valid job, so that the checks
after parsing are reached too, with one field at a time wandering off.

``fuzz_settings(n)``: ``n`` examples under the "ci" profile (``make test``), 30 times more under
"fuzz" (``make fuzz``, or ``HYPOTHESIS_PROFILE=fuzz``).
"""

from __future__ import annotations

import base64
import json
import math
from datetime import UTC, date, datetime, timedelta, timezone

import yaml
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Examples per fuzz test under the "ci" profile's 100: tests/conftest.py registers the profiles.
CI_MAX_EXAMPLES = 100


def fuzz_examples(n: int) -> int:
    """``n`` scaled by the loaded profile: ``n`` under "ci", ``30 n`` under "fuzz"."""
    return max(1, n * settings.default.max_examples // CI_MAX_EXAMPLES)


def fuzz_settings(n: int) -> settings:
    """A fuzz test's settings: ``fuzz_examples(n)`` examples, no per-example deadline (a noisy shared machine
    must not fail a slow example), and no health check that a large or slow input would trip."""
    return settings(
        max_examples=fuzz_examples(n),
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )


# -- scalars --------------------------------------------------------------------------------

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
INT_EDGES = (
    0,
    1,
    -1,
    2,
    59,
    60,
    1000,
    2**31 - 1,
    -(2**31),
    2**31,
    2**32,
    2**53 + 1,
    INT64_MAX - 1,
    INT64_MAX,
    INT64_MAX + 1,
    INT64_MIN,
    INT64_MIN - 1,
    2**64,
    10**23,
    -(10**23),
    10**100,
)
# Epoch milliseconds at the edges of what a datetime holds and of the years a job may name.
TIME_MS_EDGES = (
    -62135596800000,
    -62135596800001,
    0,
    -1,
    253402300799999,
    253402300800000,
    13569465600000,
    4102444800000,
    1_767_225_600_000,
)
FLOAT_EDGES = (
    math.nan,
    math.inf,
    -math.inf,
    1e23,
    -1e23,
    0.0,
    -0.0,
    1e-9,
    0.5,
    1.5,
    1e308,
    5e-324,
    9.223372036854776e18,
    3.15e11,
)

ints = st.one_of(st.sampled_from(INT_EDGES + TIME_MS_EDGES), st.integers(-(10**6), 10**6), st.integers(-(2**65), 2**65))
floats = st.one_of(st.sampled_from(FLOAT_EDGES), st.floats())

# Characters that have hidden text, reversed it, ended C strings or broken encoders.
NASTY_CHARS = (
    "\u202e",
    "\u202d",
    "\u2066",
    "\u2069",
    "\u200b",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\x00",
    "\x1b",
    "\x7f",
    "\x85",
    "\u2028",
    "\t",
    "\n",
    "\r",
    " ",
    "\ud800",
    "\udfff",
    "\uffff",
    "\U0010ffff",
    "é",
    "日本",
    "🙂",
    "'",
    '"',
    "\\",
    "<",
    "&",
    "%",
    ":",
    ".",
    "/",
    "..",
    "*",
    ">",
)
GIANT_TEXTS = ("a" * 257, "é" * 200, "x" * 70_000, "a" * (1024 * 1024 + 1), "\u202e" * 1000)

nasty_text = st.one_of(
    st.text(max_size=12),
    st.lists(st.one_of(st.sampled_from(NASTY_CHARS), st.text(max_size=4)), max_size=6).map("".join),
    st.sampled_from(("", " ", "-", "x ", " x", "job-1", "team-a", "default", "Default", "*")),
    st.sampled_from(GIANT_TEXTS),
)
short_nasty_text = st.one_of(
    st.text(max_size=8), st.lists(st.sampled_from(NASTY_CHARS), min_size=1, max_size=3).map("".join)
)


class Nested(list):
    """A list nested ``depth`` deep, with a short repr: printing a falsifying example must not recurse."""

    def __init__(self, depth: int, leaf=0):
        super().__init__()
        inner: list = [leaf]
        for _ in range(depth - 1):
            inner = [inner]
        self.extend(inner)
        self.depth = depth

    def __repr__(self) -> str:
        return f"Nested({self.depth})"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


class NestedDict(dict):
    """``{"a": {"a": ...}}`` ``depth`` deep, with a short repr."""

    def __init__(self, depth: int):
        super().__init__()
        inner: dict = {}
        for _ in range(depth - 1):
            inner = {"a": inner}
        self.update(inner)
        self.depth = depth

    def __repr__(self) -> str:
        return f"NestedDict({self.depth})"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


DEPTHS = (64, 500, 2000, 100_000)
deep_values = st.one_of(st.sampled_from(DEPTHS).map(Nested), st.sampled_from(DEPTHS).map(NestedDict))

json_leaves = st.one_of(st.none(), st.booleans(), ints, floats, short_nasty_text)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(short_nasty_text, inner, max_size=3)),
    max_leaves=8,
)

EXTREME_DATETIMES = (
    datetime(1, 1, 1),
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2400, 1, 1),
    datetime(9999, 12, 31, 23, 59, 59, 999999),
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-12))),
    datetime(2026, 3, 8, 2, 30),
    datetime(2030, 1, 1, 9, 0, tzinfo=UTC),
)
EXTREME_DATES = (date(1, 1, 1), date(2400, 1, 1), date(9999, 12, 31))

# Anything at all, of any type: what a field gets when it wanders off.
wild = st.one_of(
    json_values,
    deep_values,
    nasty_text,
    st.sampled_from(EXTREME_DATETIMES + EXTREME_DATES),
    st.binary(max_size=8),
    st.tuples(ints, ints),
    st.sets(st.integers(0, 3), max_size=2),
)


def valid_or(valid: st.SearchStrategy, edgy: st.SearchStrategy) -> st.SearchStrategy:
    """A valid value two times in three, else an edgy one: most jobs must pass parsing to reach what follows."""
    return st.integers(0, 2).flatmap(lambda n: edgy if n == 2 else valid)


def sometimes_wild(plausible: st.SearchStrategy, odds: int = 4) -> st.SearchStrategy:
    """``plausible`` most of the time, ``wild`` one time in ``odds``."""
    return st.integers(0, odds - 1).flatmap(lambda n: wild if n == odds - 1 else plausible)


# -- the parts of a job ---------------------------------------------------------------------

job_ids = valid_or(
    st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
    st.one_of(
        nasty_text,
        st.sampled_from(
            (
                "ok\u202eexe.txt",
                "zero\u200bwidth",
                "a\u200d",
                "nul\x00",
                "tab\t",
                "x" * 256,
                "é" * 128,
                "x" * 10 * 1024 * 1024,
                "\u0085next",
            )
        ),
    ),
)
namespaces = valid_or(
    st.sampled_from(("team-a", "default")),
    st.one_of(
        st.sampled_from(("", "Default", "a" * 64, "a" * 65, "-x", "x-", "a.b", "\u202eteam", "team\x00")),
        short_nasty_text,
    ),
)

CRONS = (
    "* * * * *",
    "0 0 30 2 *",
    "0 0 31 2 *",
    "0 0 29 2 *",
    "0 0 29 2 1",
    "0 0 31 4,6,9,11 *",
    "0 0 31 2,4 *",
    "*/1 * * * * *",
    "* * * * * *",
    "0 0 1 1 *",
    "61 * * * *",
    "* 24 * * *",
    "* * 32 * *",
    "* * * 13 *",
    "* * * * 8",
    "0 0 * * 7",
    "* * * * * * *",
    "* * * *",
    "@yearly",
    "@reboot",
    "@every 5s",
    "0 0 1 1 * 2400",
    "0 0 L 2 *",
    "0 0 ? * *",
    "0 12 * * 1#5",
    "0 12 * * 5L",
    "0 0 15W * *",
    "H * * * *",
    "0 0 1-31/0 * *",
    "*/0 * * * *",
    "*/9999999999 * * * *",
    "1-59/60 * * * *",
    "0-59 0-23 1-31 1-12 0-6",
    "59-0 * * * *",
    "  0  0 1 1 *  ",
    "0\t0\t1\t1\t*",
    "0 0 1 1 *\x00",
    "0 0 1 1 \u202e*",
    "0 0 30 2 * 0",
    "0 0 30 2 mon",
    "0 0 1 jan-dec sun-sat",
    "0 0 1 JAN *",
    "99999999999999999999 * * * *",
    "-1 * * * *",
    "0 0 1 1 1#6",
    "0 0 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31 * *",
    "0 59 23 31 12 *",
)
CRON_TOKENS = (
    "*",
    "*/2",
    "*/7",
    "0",
    "1",
    "5",
    "29",
    "30",
    "31",
    "59",
    "60",
    "0-5",
    "1-31/15",
    "L",
    "W",
    "?",
    "1#5",
    "mon-fri",
    "2",
    "12",
)
crons = valid_or(
    st.sampled_from(
        ("*/5 * * * *", "0 9 * * mon-fri", "0 0 * * *", "30 2 * * *", "*/10 * * * * *", "0 0 1 * *", "15 3 29 2 *")
    ),
    st.one_of(st.sampled_from(CRONS), st.lists(st.sampled_from(CRON_TOKENS), min_size=5, max_size=6).map(" ".join)),
)

DURATIONS = (
    "1s",
    "0",
    "0s",
    "-1s",
    "-1",
    "1ms",
    "0.5ms",
    "0.0001ms",
    "1.5",
    "1e23",
    "1e23s",
    "1m30s",
    "1h30m",
    "99999999999999999999999d",
    "3650d",
    "3651d",
    "87600h",
    "87601h",
    "9223372036854775807ms",
    "9223372036854775808ms",
    "315360000s",
    "315360000.0001s",
    "1d1d",
    "",
    " 5m ",
    "5M",
    "inf",
    "nan",
    "5 m",
    "1y",
    "PT5M",
    "2d",
    "48h",
    "1000000000000ms",
)
durations = valid_or(
    st.one_of(st.sampled_from(("1s", "5m", "1h", "250ms", "1h30m", "2d")), st.integers(1, 86_400)),
    st.one_of(st.sampled_from(DURATIONS), ints, floats),
)

TIMEZONES = (
    "UTC",
    "Europe/Lisbon",
    "America/New_York",
    "Pacific/Kiritimati",
    "Etc/GMT+12",
    "Etc/GMT-14",
    "Australia/Lord_Howe",
    "",
    "Mars/Olympus",
    "../../etc/passwd",
    "/etc/localtime",
    "posixrules",
    "Factory",
    "EST5EDT",
    "utc",
    "UTC\x00",
    "UTC\u202e",
    "Europe/" + "x" * 300,
)
timezones = valid_or(st.sampled_from(TIMEZONES[:7]), st.sampled_from(TIMEZONES))

TIMES = (
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01",
    "1969-12-31T23:59:59.999Z",
    "1970-01-01T00:00:00Z",
    "2400-01-01T00:00:00Z",
    "2400-01-01",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-12:00",
    "9999-12-31T23:59:59.999999",
    "10000-01-01T00:00:00Z",
    "2030-01-01T09:00:00",
    "2026-03-08T02:30:00",
    "2030-02-30T00:00:00Z",
    "2030-01-01T25:00:00Z",
    "now",
    "",
    "2030-01-01T00:00:00Z ",
)
times = valid_or(
    st.one_of(
        st.sampled_from(("2030-01-01T00:00:00Z", "2027-06-01T12:00:00+02:00")),
        st.integers(1_796_428_800_000, 1_896_428_800_000),
    ),
    st.one_of(st.sampled_from(TIMES), st.sampled_from(EXTREME_DATETIMES + EXTREME_DATES), ints, floats),
)


@st.composite
def schedules(draw) -> dict:
    """A schedule table: usually exactly one of its kinds, sometimes none or two."""
    kinds = {
        "cron": crons,
        "every": durations,
        "interval_ms": valid_or(st.integers(1000, 10**9), ints),
        "at": times,
        "at_ms": valid_or(st.integers(1_796_428_800_000, 1_896_428_800_000), ints),
    }
    count = draw(st.sampled_from((1,) * 18 + (0, 2)))
    chosen = draw(st.lists(st.sampled_from(sorted(kinds)), min_size=count, max_size=count, unique=True))
    table = {k: draw(sometimes_wild(kinds[k], odds=8)) for k in chosen}
    if draw(st.booleans()):
        table[draw(st.sampled_from(("timezone", "tz")))] = draw(sometimes_wild(timezones, odds=8))
    return table


URLS = (
    "http://127.0.0.1:1/x",
    "https://example.com/hook",
    "ftp://example.com",
    "http://",
    "http://[::1",
    "http://a:99999/",
    "http://a:-1/",
    "http://exa mple.com",
    "javascript:alert(1)",
    "http://\u202eexample.com",
    "redis://127.0.0.1:6379/0",
    "rediss://:secret@h/1",
    "redis://",
    "redis://h:notaport",
    "unix:///tmp/r.sock",
    "amqp://guest:guest@127.0.0.1:5672//",
    "amqps://h",
    "pyamqp://h",
    "nats://127.0.0.1:4222",
    "tls://h",
    "nats://",
    "http://x/" + "a" * 70_000,
    "http://h/\x00",
    "http://h/\r\nX: y",
)
urls = st.one_of(st.sampled_from(URLS), short_nasty_text)
VALID_URLS = {
    "http": "http://127.0.0.1:1/hook",
    "celery": "redis://127.0.0.1:6379/0",
    "rq": "redis://127.0.0.1:6379/0",
    "arq": "redis://127.0.0.1:6379/0",
    "redis-stream": "redis://127.0.0.1:6379/0",
    "nats": "nats://127.0.0.1:4222",
    "amqp": "amqp://guest:guest@127.0.0.1:5672//",
}


def url_for(kind: str) -> st.SearchStrategy:
    return valid_or(st.just(VALID_URLS[kind]), urls)


def name_like(valid: str) -> st.SearchStrategy:
    return valid_or(st.just(valid), names)


names = st.one_of(
    st.sampled_from(
        (
            "app.tasks.report",
            "report",
            "jobs.reports",
            "q",
            "",
            " q",
            "a" * 256,
            "a.b.c",
            "_x",
            "1x",
            "x-y",
            "a..b",
            "jobs.*",
            "jobs.>",
            "tests.support.pyjobs:echo",
            "os:system",
            "myapp:os.system",
            "myapp:__builtins__",
            "a:b:c",
            "a:",
        )
    ),
    short_nasty_text,
)
headers = st.one_of(
    st.dictionaries(short_nasty_text, short_nasty_text, max_size=3),
    st.lists(st.tuples(short_nasty_text, short_nasty_text), max_size=3),
    st.just({"X-Token": "secret"}),
    st.just({"Bad\r\nName": "v"}),
    st.just({"X": "a\r\nb"}),
    st.just([["X"]]),
    st.just([["X", "y", "z"]]),
)
task_args = valid_or(
    st.lists(json_leaves, max_size=3),
    st.one_of(
        st.lists(json_values, max_size=3),
        deep_values.map(lambda v: [v]),
        st.just([math.nan]),
        st.just(["\ud800"]),
        st.just([10**400]),
        st.just(["a" * (1024 * 1024)]),
    ),
)
task_kwargs = valid_or(
    st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True), json_leaves, max_size=2),
    st.one_of(
        st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True), json_values, max_size=3),
        st.dictionaries(short_nasty_text, json_values, max_size=2),
        st.sampled_from(DEPTHS).map(lambda d: {"a": NestedDict(d)}),
        st.just({"x": math.inf}),
    ),
)

EXECUTOR_FIELDS = {
    "noop": {},
    "shell": {"command": st.one_of(st.sampled_from(("echo hi", "", " ", "a" * (1024 * 1024 + 1))), nasty_text)},
    "http": {
        "url": url_for("http"),
        "method": st.sampled_from(("GET", "post", "TRACE", "", "G\x00ET")),
        "headers": headers,
        "body": nasty_text,
        "secret_headers": st.lists(short_nasty_text, max_size=2),
    },
    "celery": {
        "url": url_for("celery"),
        "task": name_like("app.tasks.report"),
        "args": task_args,
        "kwargs": task_kwargs,
        "queue": names,
        "routing_key": names,
        "priority": ints,
        "expires": durations,
    },
    "rq": {
        "url": url_for("rq"),
        "func": name_like("app.tasks.report"),
        "queue": names,
        "args": task_args,
        "kwargs": task_kwargs,
    },
    "arq": {
        "url": url_for("arq"),
        "function": name_like("report"),
        "queue": names,
        "args": task_args,
        "kwargs": task_kwargs,
        "tick_kwarg": names,
    },
    "nats": {
        "url": url_for("nats"),
        "subject": name_like("jobs.reports"),
        "jetstream": st.booleans(),
        "body": nasty_text,
        "headers": headers,
    },
    "amqp": {
        "url": url_for("amqp"),
        "exchange": names,
        "routing_key": name_like("reports"),
        "body": nasty_text,
        "headers": headers,
        "persistent": st.booleans(),
        "content_type": names,
    },
    "redis-stream": {
        "url": url_for("redis-stream"),
        "stream": name_like("events"),
        "fields": st.dictionaries(short_nasty_text, short_nasty_text, max_size=3),
        "maxlen": ints,
        "dedupe_ttl": durations,
    },
    "python": {
        "target": name_like("tests.support.pyjobs:echo"),
        "args": task_args,
        "kwargs": task_kwargs,
        "session": st.booleans(),
    },
}


REQUIRED_KEYS = {
    "shell": {"command"},
    "http": {"url"},
    "celery": {"url", "task"},
    "rq": {"url", "func"},
    "arq": {"url", "function"},
    "nats": {"url", "subject"},
    "amqp": {"url", "routing_key"},
    "redis-stream": {"url", "stream"},
    "python": {"target"},
}


@st.composite
def executor_tables(draw) -> dict:
    """An executor table of any kind, its fields mostly plausible; sometimes an unknown key or kind."""
    kind = draw(st.sampled_from(sorted(EXECUTOR_FIELDS)))
    fields = EXECUTOR_FIELDS[kind]
    table = {"kind": draw(sometimes_wild(st.sampled_from((kind, kind.upper())), odds=12))}
    keys = set(draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=len(fields)))) if fields else set()
    if draw(st.integers(0, 7)) != 7:  # usually every key the kind requires
        keys |= REQUIRED_KEYS.get(kind, set())
    for key in sorted(keys):
        table[key] = draw(sometimes_wild(fields[key], odds=8))
    if draw(st.integers(0, 11)) == 11:
        table[draw(short_nasty_text)] = draw(wild)
    return table


JOB_FIELDS = {
    "executor": executor_tables(),
    "catchup": st.sampled_from(("all", "latest", "none", "ALL", "some")),
    "catchup_window": durations,
    "overlap": st.sampled_from(("skip", "allow", "queue")),
    "timeout": durations,
    "retry": st.fixed_dictionaries({}, optional={"max_attempts": ints, "backoff": durations, "backoff_max": durations}),
    "paused": st.booleans(),
    "version": ints,
    "jitter": durations,
    "labels": st.one_of(
        st.dictionaries(short_nasty_text, short_nasty_text, max_size=3),
        st.just({f"k{i}": "v" for i in range(65)}),
        st.just({"k": "v" * 257}),
    ),
    "calendars": st.one_of(
        st.lists(st.sampled_from(("business", "", "a" * 129, "-x", "b\u202e")), max_size=3), st.just("business")
    ),
    "history_limit": ints,
    "on_failure": executor_tables(),
    "on_recovery": executor_tables(),
    "namespace": namespaces,
}


@st.composite
def job_dicts(draw) -> dict:
    """A job as ``jobspec.job_from_dict`` takes it (a file's table, the API's dict): schedule nested or flat."""
    d: dict = {"id": draw(sometimes_wild(job_ids, odds=10))}
    schedule = draw(schedules())
    if draw(st.booleans()):
        d["schedule"] = schedule if draw(st.integers(0, 19)) != 19 else draw(wild)
    else:
        d.update(schedule)
    if draw(st.integers(0, 9)) != 9:
        d["executor"] = draw(executor_tables())
    for key in draw(st.lists(st.sampled_from(sorted(set(JOB_FIELDS) - {"executor"})), unique=True, max_size=5)):
        d[key] = draw(sometimes_wild(JOB_FIELDS[key], odds=8))
    if draw(st.integers(0, 14)) == 14:
        d[draw(short_nasty_text)] = draw(wild)
    return d


# -- protobuf messages from their descriptor ------------------------------------------------

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (INT64_MIN, INT64_MAX),
    FieldDescriptor.TYPE_SINT64: (INT64_MIN, INT64_MAX),
    FieldDescriptor.TYPE_SFIXED64: (INT64_MIN, INT64_MAX),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
JSON_TEXTS = (
    "[]",
    "{}",
    "[1, 2]",
    '{"a": 1}',
    "[" * 100_000,
    '{"a":' * 50_000,
    "[" * 1000 + "]" * 1000,
    "[1e999]",
    "[NaN]",
    "[Infinity]",
    '["\\ud800"]',
    "[1]x",
    "",
    "null",
    "5",
    '"s"',
    "{",
    "[" * 64 + "]" * 64,
    json.dumps([[[["deep"]]]]),
    '{"a": 1, "a": 2}',
    '{"1x": 1}',
    "[" + "1," * 10_000 + "1]",
)


def _string_pool(field_name: str) -> st.SearchStrategy:
    """Strings a field of this name is likely to be checked for, and then anything."""
    if field_name == "cron":
        pool = crons
    elif field_name == "timezone":
        pool = timezones
    elif field_name.endswith("_json"):
        pool = st.sampled_from(JSON_TEXTS)
    elif field_name == "url":
        pool = urls
    elif field_name in ("id", "job_id", "name", "namespace", "namespaces"):
        pool = st.one_of(job_ids, namespaces)
    elif field_name in ("task", "func", "function", "target", "subject", "queue", "stream", "exchange"):
        pool = names
    elif field_name.endswith("token"):
        pool = st.one_of(
            st.binary(max_size=24).map(lambda b: base64.urlsafe_b64encode(b).decode()),
            st.sampled_from(("!!!", "=", "gA==", "_-_-", "AAAA" * 10_000)),
        )
    elif field_name in ("role",):
        pool = st.sampled_from(("admin", "write", "read", "Admin", "root", ""))
    else:
        pool = nasty_text
    return sometimes_wild_text(pool)


def sometimes_wild_text(pool: st.SearchStrategy) -> st.SearchStrategy:
    return st.integers(0, 3).flatmap(lambda n: nasty_text if n == 3 else pool)


# Durations in ms: a second, a minute, an hour, a day, two days, ten years and just past it.
DURATION_MS_EDGES = (1, 999, 1000, 60_000, 3_600_000, 86_400_000, 172_800_000, 315_360_000_000, 315_360_000_001)


def _int_values(field: FieldDescriptor) -> st.SearchStrategy:
    lo, hi = _INT_RANGES[field.type]
    edges = [v for v in INT_EDGES + TIME_MS_EDGES if lo <= v <= hi] + [lo, hi]
    plausible = st.integers(max(lo, -(10**4)), min(hi, 10**4))
    if field.name.endswith("_ms"):  # a duration or an instant: the values the spec bounds
        plausible = st.sampled_from([v for v in DURATION_MS_EDGES + TIME_MS_EDGES if lo <= v <= hi])
    return st.one_of(plausible, st.sampled_from(edges), st.integers(lo, hi))


def _scalar(field: FieldDescriptor, depth: int) -> st.SearchStrategy:
    t = field.type
    if t in _INT_RANGES:
        return _int_values(field)
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return floats if t == FieldDescriptor.TYPE_DOUBLE else st.sampled_from(FLOAT_EDGES[:8])
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_STRING:
        return _string_pool(field.name)
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=32)
    if t == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    return messages(field.message_type, depth + 1)


def _put(draw, m, field: FieldDescriptor, depth: int) -> None:
    """Set ``field`` of ``m`` to drawn values; a value the protobuf runtime refuses (a lone surrogate) is left out:
    such bytes are sent raw instead (``raw_payloads``)."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_f, value_f = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        target = getattr(m, field.name)
        for _ in range(draw(st.integers(0, 3))):
            key = draw(_scalar(key_f, depth))
            try:
                if value_f.message_type is not None:
                    target[key].CopyFrom(draw(messages(value_f.message_type, depth + 1)))
                else:
                    target[key] = draw(_scalar(value_f, depth))
            except (ValueError, TypeError):
                pass
        return
    if field.is_repeated:
        target = getattr(m, field.name)
        for _ in range(draw(st.integers(0, 3))):
            try:
                if field.message_type is not None:
                    target.add().CopyFrom(draw(messages(field.message_type, depth + 1)))
                else:
                    target.append(draw(_scalar(field, depth)))
            except (ValueError, TypeError):
                pass
        return
    try:
        if field.message_type is not None:
            getattr(m, field.name).CopyFrom(draw(messages(field.message_type, depth + 1)))
        else:
            setattr(m, field.name, draw(_scalar(field, depth)))
    except (ValueError, TypeError):
        pass


MAX_DEPTH = 4


@st.composite
def _messages(draw, descriptor, depth: int):
    from google.protobuf import message_factory

    m = message_factory.GetMessageClass(descriptor)()
    if depth > MAX_DEPTH:
        return m
    in_oneof = {f.name for o in descriptor.oneofs for f in o.fields}
    for oneof in descriptor.oneofs:
        members = [f for f in oneof.fields]
        if len(members) > 1 or not members[0].has_presence or draw(st.booleans()):
            if draw(st.integers(0, 4)) != 4:
                _put(draw, m, draw(st.sampled_from(members)), depth)
    for field in descriptor.fields:
        if field.name not in in_oneof and draw(st.integers(0, 2)) != 2:
            _put(draw, m, field, depth)
    return m


def messages(descriptor, depth: int = 0) -> st.SearchStrategy:
    """Any message of ``descriptor``'s type: each field set or not, to random values of its type (extremes,
    strings a field of its name is checked for), nested messages to ``MAX_DEPTH``."""
    return _messages(descriptor, depth)


def raw_payloads() -> st.SearchStrategy[bytes]:
    """Bytes that are no message, or almost one: truncated, invalid UTF-8 in a string, wrong wire types."""
    return st.one_of(
        st.binary(max_size=64),
        st.sampled_from(
            (
                b"\x0a\x02\xc3\x28",
                b"\x0a\x03\xed\xa0\x80",
                b"\xff" * 10,
                b"\x08",
                b"\x0a\xff\xff\xff\xff\x0f",
                b"\x12\x05\x0a\x03\xe2\x80",
                b"\x0a\x80\x80\x80\x80\x10",
                b"\x0b",
                b"\x0a\x00" * 1000,
                b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            )
        ),
    )


# -- job files ------------------------------------------------------------------------------

FILE_FORMATS = ("toml", "yaml", "yml", "json")


def _toml_key(key) -> str:
    return _toml_string(str(key))


def _toml_string(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _deep_text(v, fmt: str) -> str | None:
    """A ``Nested`` or ``NestedDict`` written out without recursing; None for any other value."""
    if isinstance(v, Nested):
        return "[" * v.depth + "0" + "]" * v.depth
    if isinstance(v, NestedDict):
        opener = "{a = " if fmt == "toml" else '{"a": '
        return opener * (v.depth - 1) + "{}" + "}" * (v.depth - 1)
    return None


def _toml_value(v) -> str | None:
    """A TOML value for ``v``; None for what TOML cannot hold (null), which the caller leaves out."""
    if (deep := _deep_text(v, "toml")) is not None:
        return deep
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, date):  # a datetime too: TOML has both
        return v.isoformat()
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, bytes):
        return _toml_string(v.decode("latin-1"))
    if isinstance(v, dict):
        parts = [f"{_toml_key(k)} = {t}" for k, x in v.items() if (t := _toml_value(x)) is not None]
        return "{" + ", ".join(parts) + "}"
    if isinstance(v, list | tuple | set):
        parts = [t for x in v if (t := _toml_value(x)) is not None]
        return "[" + ", ".join(parts) + "]"
    return _toml_string(repr(v))


def to_toml(data: dict) -> str:
    lines = []
    tables = isinstance(data.get("jobs"), list) and all(
        isinstance(j, dict) and not isinstance(j, NestedDict) for j in data["jobs"]
    )
    for key, value in data.items():
        if key == "jobs" and tables:
            continue
        if (t := _toml_value(value)) is not None:
            lines.append(f"{_toml_key(key)} = {t}")
    for job in data["jobs"] if tables else ():
        lines.append("[[jobs]]")
        lines += [f"{_toml_key(k)} = {t}" for k, v in job.items() if (t := _toml_value(v)) is not None]
    return "\n".join(lines) + "\n"


def _json_value(v) -> str:
    """JSON text for ``v`` (nan and inf as Python's json writes them; dates as strings), deep values unrecursed."""
    if (deep := _deep_text(v, "json")) is not None:
        return deep
    if isinstance(v, dict):
        return (
            "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {_json_value(x)}" for k, x in v.items()) + "}"
        )
    if isinstance(v, list | tuple | set):
        return "[" + ", ".join(_json_value(x) for x in v) + "]"
    if isinstance(v, bytes | date):
        return json.dumps(str(v))
    return json.dumps(v, ensure_ascii=False)


def _has_deep(v) -> bool:
    if isinstance(v, Nested | NestedDict):
        return True
    if isinstance(v, dict):
        return any(_has_deep(x) for x in v.values())
    if isinstance(v, list | tuple | set):
        return any(_has_deep(x) for x in v)
    return False


def _plain(v):
    """Lists and dicts of the exact built-in types, which the YAML writer takes."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set):
        return [_plain(x) for x in v]
    return v


def render_file(data: dict, fmt: str) -> bytes:
    """``data`` as a job file's bytes; text that is not valid Unicode (lone surrogates) is written as it is.
    YAML with a deeply nested value is written in its flow (JSON) form, which no YAML writer recurses through."""
    if fmt == "toml":
        text = to_toml(data)
    elif fmt in ("yaml", "yml") and not _has_deep(data):
        text = yaml.safe_dump(_plain(data), allow_unicode=True, sort_keys=False)
    else:
        text = _json_value(data)
    return text.encode("utf-8", errors="surrogatepass")


def _billion_laughs(levels: int, fan: int) -> bytes:
    lines = ["a0: &a0 [x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]")
    lines.append(
        "jobs:\n  bomb:\n    every: 1h\n    executor: {kind: celery, url: 'redis://h', task: t, "
        f"args: [*a{levels - 1}]}}"
    )
    return "\n".join(lines).encode()


# Files no serializer writes: the parser's own limits.
RAW_FILES = (
    ("yaml", "jobs:\n  café:\n    every: 1s\n    executor: {kind: noop}\n".encode("latin-1")),
    ("toml", '[[jobs]]\nid = "café"\nevery = "1s"\nexecutor = {kind = "noop"}\n'.encode("latin-1")),
    ("json", '{"jobs": [{"id": "café", "every": "1s", "executor": {"kind": "noop"}}]}'.encode("latin-1")),
    ("toml", b"\xef\xbb\xbf" + b'[[jobs]]\nid = "bom"\nevery = "1s"\nexecutor = {kind = "noop"}\n'),
    ("yaml", '{"jobs": {"u16": {"every": "1s", "executor": {"kind": "noop"}}}}'.encode("utf-16")),
    ("json", b'{"jobs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("yaml", b"jobs: " + b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    ("toml", b"jobs = " + b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    ("toml", b"x = " + b"{a = " * 10_000 + b"1" + b"}" * 10_000 + b"\n"),
    ("yaml", b"jobs:\n  big:\n    at_ms: 100000000000000000000000\n    executor: {kind: noop}\n"),
    ("yaml", b"jobs:\n  big:\n    every: 100000000000000000000000\n    executor: {kind: noop}\n"),
    ("yaml", b"jobs:\n  big:\n    interval_ms: 100000000000000000000000\n    executor: {kind: noop}\n"),
    ("yaml", b"jobs:\n  big:\n    every: 1.0e+23\n    executor: {kind: noop}\n"),
    ("yaml", b"jobs:\n  big:\n    every: 1h\n    timeout: 1.0e+23\n    executor: {kind: noop}\n"),
    ("yaml", b"jobs:\n  far:\n    at: 2400-01-01T00:00:00Z\n    executor: {kind: noop}\n"),
    ("yaml", b"jobs:\n  far:\n    at: 2400-01-01\n    executor: {kind: noop}\n"),
    (
        "yaml",
        b"jobs:\n  far:\n    at: 0001-01-01 00:00:00\n    timezone: Pacific/Kiritimati\n    executor: {kind: noop}\n",
    ),
    ("toml", b'[[jobs]]\nid = "far"\nat = 2400-01-01T00:00:00Z\nexecutor = {kind = "noop"}\n'),
    ("toml", b'[[jobs]]\nid = "far"\nat = 9999-12-31T23:59:59-12:00\nexecutor = {kind = "noop"}\n'),
    ("toml", b'[[jobs]]\nid = "t"\nat = 12:00:00\nexecutor = {kind = "noop"}\n'),
    ("toml", b'[[jobs]]\nid = "big"\ninterval_ms = 9223372036854775807\nexecutor = {kind = "noop"}\n'),
    ("yaml", b"jobs:\n  merge:\n    <<: {every: 1s}\n    executor: &e {kind: noop}\n    on_failure: *e\n"),
    ("yaml", b"jobs:\n  dup:\n    every: 1s\n    every: 2s\n    executor: {kind: noop}\n"),
    ("yaml", b"jobs: !!python/object:os.system {}\n"),
    ("yaml", b"jobs:\n  x: &a\n    every: 1s\n    executor: {kind: noop}\n    on_failure: *a\n"),
    ("yaml", b"jobs: &j\n  - *j\n"),
    ("yaml", _billion_laughs(4, 8)),
    ("yaml", b""),
    ("toml", b""),
    ("json", b""),
    ("yaml", b"\x00"),
    ("json", b"null"),
    ("yaml", b"- a\n- b\n"),
    ("yaml", b"jobs: 5\n"),
    ("toml", b"jobs = 5\n"),
    ("json", b'{"jobs": {"": {}}}'),
    ("json", b'{"jobs": [{"id": "x", "every": "1s", "executor": {"kind": "noop"}}], "jobs ": 1}'),
    ("json", b'{"jobs": [{"id": "x", "every": NaN, "executor": {"kind": "noop"}}]}'),
    ("json", b'{"jobs": [{"id": "x", "every": 1e400, "executor": {"kind": "noop"}}]}'),
    ("json", b'{"jobs": [{"id": "\\ud800", "every": "1s", "executor": {"kind": "noop"}}]}'),
    ("json", b'{"jobs": [{"id": "' + b"x" * (10 * 1024 * 1024) + b'", "every": "1s", "executor": {"kind": "noop"}}]}'),
    (
        "yaml",
        b"jobs:\n  big:\n    every: 1h\n    executor: {kind: celery, url: 'redis://h', task: t, args: "
        + b"[" * 5000
        + b"]" * 5000
        + b"}\n",
    ),
)


@st.composite
def job_files(draw) -> tuple[str, bytes]:
    """(a suffix, the file's bytes): jobs from ``job_dicts`` written in one format, or one of ``RAW_FILES``."""
    if draw(st.integers(0, 5)) == 5:
        return draw(st.sampled_from(RAW_FILES))
    fmt = draw(st.sampled_from(FILE_FORMATS))
    jobs = draw(st.lists(job_dicts(), min_size=1, max_size=3))
    data: dict = {}
    if draw(st.integers(0, 5)) == 5:
        data["namespace"] = draw(namespaces)
    if draw(st.booleans()):
        data["jobs"] = jobs
    else:
        data["jobs"] = {str(j.pop("id", "")) if not isinstance(j.get("id"), list | dict) else "x": j for j in jobs}
    if draw(st.integers(0, 9)) == 9:
        data[draw(short_nasty_text)] = draw(json_values)
    return fmt, render_file(data, fmt)
