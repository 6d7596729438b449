"""What a valid job is: tables of good jobs, of bad inputs (each naming its field), and round trips."""

import json
from datetime import UTC, datetime

import pytest

from shardcron.errors import InvalidJob
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
from shardcron.spec.bounds import MAX_PAYLOAD_BYTES
from shardcron.spec.durations import format_duration_ms, parse_duration_ms, parse_time_ms
from shardcron.spec.job import job_from_dict, job_from_json, job_to_dict, job_to_json, redacted
from shardcron.spec.schedule import shortest_gap_ms

NOOP = ExecutorSpec(ExecutorKind.NOOP)
EVERY_5S = Schedule(ScheduleKind.INTERVAL, interval_ms=5_000)


def utc_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()) * 1000


# --- valid jobs ----------------------------------------------------------------------------

HTTP_FULL = {
    "id": "h",
    "every": "1m",
    "executor": {
        "kind": "HTTP",
        "url": "https://example.com/hook?x=1",
        "method": "put",
        "headers": {"Authorization": "Bearer t", "X-Trace": "1"},
        "body": '{"a": 1}',
        "secret_headers": ["Authorization"],
    },
}

VALID = [
    pytest.param({"id": "a", "every": "5s"}, Job("a", EVERY_5S, NOOP), id="minimal-flat"),
    pytest.param({"id": "a", "schedule": {"every": "5s"}}, Job("a", EVERY_5S, NOOP), id="minimal-nested"),
    pytest.param({"id": "a", "schedule": {"interval_ms": 5000}}, Job("a", EVERY_5S, NOOP), id="interval-ms"),
    pytest.param({"id": "x" * 256, "every": "5s"}, Job("x" * 256, EVERY_5S, NOOP), id="id-exactly-256-bytes"),
    pytest.param(
        {"id": "café-ünïcode-ジョブ/with spaces", "every": "5s"},
        Job("café-ünïcode-ジョブ/with spaces", EVERY_5S, NOOP),
        id="unicode-id",
    ),
    pytest.param(
        {"id": "c", "schedule": {"cron": "*/5   *  * * *", "timezone": "Europe/Lisbon"}},
        Job("c", Schedule(ScheduleKind.CRON, cron="*/5 * * * *", timezone="Europe/Lisbon"), NOOP),
        id="cron-5-fields-whitespace-normalised",
    ),
    pytest.param(
        {"id": "c", "schedule": {"cron": "*/20 * * * * *", "tz": "Asia/Kolkata"}},
        Job("c", Schedule(ScheduleKind.CRON, cron="*/20 * * * * *", timezone="Asia/Kolkata"), NOOP),
        id="cron-6-fields-seconds-first-tz-alias",
    ),
    pytest.param(
        {"id": "o", "schedule": {"at": "2030-01-01T09:00:00+01:00"}},
        Job("o", Schedule(ScheduleKind.ONCE, at_ms=utc_ms("2030-01-01T08:00:00Z")), NOOP),
        id="once-iso-with-offset",
    ),
    pytest.param(
        {"id": "o", "schedule": {"at": "2030-07-01T09:00:00", "timezone": "Europe/Lisbon"}},
        Job(
            "o",
            Schedule(ScheduleKind.ONCE, at_ms=utc_ms("2030-07-01T08:00:00Z"), timezone="Europe/Lisbon"),
            NOOP,
        ),
        id="once-naive-read-in-timezone",
    ),
    pytest.param(
        {"id": "o", "schedule": {"at_ms": 1_900_000_000_000}},
        Job("o", Schedule(ScheduleKind.ONCE, at_ms=1_900_000_000_000), NOOP),
        id="once-at-ms",
    ),
    pytest.param(
        HTTP_FULL,
        Job(
            "h",
            Schedule(ScheduleKind.INTERVAL, interval_ms=60_000),
            ExecutorSpec(
                ExecutorKind.HTTP,
                http=HttpSpec(
                    "https://example.com/hook?x=1",
                    "PUT",
                    (("Authorization", "Bearer t"), ("X-Trace", "1")),
                    '{"a": 1}',
                    ("Authorization",),
                ),
            ),
        ),
        id="http-full",
    ),
    pytest.param(
        {
            "id": "h",
            "every": "1m",
            "executor": {"kind": "http", "url": "http://svc:8080", "headers": [["X-A", "1"], ["X-A", "2"]]},
        },
        Job(
            "h",
            Schedule(ScheduleKind.INTERVAL, interval_ms=60_000),
            ExecutorSpec(ExecutorKind.HTTP, http=HttpSpec("http://svc:8080", headers=(("X-A", "1"), ("X-A", "2")))),
        ),
        id="http-headers-as-pairs",
    ),
    pytest.param(
        {"id": "s", "every": "1h", "executor": {"kind": "shell", "command": "echo hi"}},
        Job(
            "s",
            Schedule(ScheduleKind.INTERVAL, interval_ms=3_600_000),
            ExecutorSpec(ExecutorKind.SHELL, shell=ShellSpec("echo hi")),
        ),
        id="shell",
    ),
    pytest.param(
        {
            "id": "p",
            "every": "5s",
            "catchup": "LATEST",
            "catchup_window": "10m",
            "overlap": "allow",
            "timeout": "1m30s",
            "retry": {"max_attempts": 3, "backoff": "500ms", "backoff_max": "30s"},
            "paused": True,
            "labels": {"team": "billing"},
            "version": 7,
        },
        Job(
            "p",
            EVERY_5S,
            NOOP,
            catchup=CatchUp.LATEST,
            catchup_window_ms=600_000,
            overlap=Overlap.ALLOW,
            timeout_ms=90_000,
            retry=RetryPolicy(3, 500, 30_000),
            paused=True,
            labels={"team": "billing"},
            version=7,
        ),
        id="all-policies",
    ),
    pytest.param(
        {"id": "w", "every": "5s", "catchup": "none", "catchup_window": 0},
        Job("w", EVERY_5S, NOOP, catchup=CatchUp.NONE, catchup_window_ms=0),
        id="catchup-none-window-zero",
    ),
    pytest.param(
        {"id": "n", "every": "5s", "retry": None, "labels": None, "timeout": None},
        Job("n", EVERY_5S, NOOP),
        id="nulls-mean-defaults",
    ),
]


@pytest.mark.parametrize("data, expected", VALID)
def test_valid_jobs(data, expected):
    assert job_from_dict(data) == expected


@pytest.mark.parametrize("data, expected", VALID)
def test_round_trip(data, expected):
    job = job_from_dict(data)
    assert job_from_json(job_to_json(job)) == job
    assert job_from_dict(job_to_dict(job)) == job
    assert job_to_json(job_from_json(job_to_json(job))) == job_to_json(job)  # stable text too


def test_id_argument_overrides_the_table():
    assert job_from_dict({"id": "ignored", "every": "5s"}, job_id="given").id == "given"
    assert job_from_dict({"every": "5s"}, job_id="given").id == "given"


def test_redacted_masks_secret_headers_only():
    job = job_from_dict(HTTP_FULL)
    headers = dict(redacted(job)["executor"]["headers"])
    assert headers == {"Authorization": "***", "X-Trace": "1"}
    assert dict(job_to_dict(job)["executor"]["headers"])["Authorization"] == "Bearer t"


# --- bad jobs ------------------------------------------------------------------------------


def job(**over):
    """A valid job table with some keys replaced. ``every=None`` drops the interval: a null
    schedule key counts as not given."""
    base = {"id": "j", "every": "5s"}
    base.update(over)
    return base


def http(**over):
    return job(executor={"kind": "http", "url": "https://example.com", **over})


BAD = [
    # the job itself
    ("not a table", "job"),
    (["id", "j"], "job"),
    # id
    (job(id=""), "id"),
    (job(id=None), "id"),
    (job(id=42), "id"),
    (job(id="x" * 257), "id"),
    (job(id="é" * 129), "id"),  # 129 characters, 258 bytes: the limit is in bytes
    (job(id="a\nb"), "id"),
    (job(id="a\tb"), "id"),
    (job(id="nul\x00"), "id"),
    (job(id="del\x7f"), "id"),
    (job(id="\ud800"), "id"),  # a lone surrogate, as JSON's "\ud800" gives
    # schedule
    ({"id": "j"}, "schedule"),  # none given
    (job(cron="* * * * *"), "schedule"),  # two given
    (job(at="2030-01-01T00:00:00Z"), "schedule"),
    (job(every=None, schedule="5s"), "schedule"),
    (job(every=None, cron="61 * * * *"), "schedule.cron"),
    (job(every=None, cron="not a cron"), "schedule.cron"),
    (job(every=None, cron="* * * *"), "schedule.cron"),  # 4 fields
    (job(every=None, cron="0 0 1 1 * * 2030"), "schedule.cron"),  # 7 fields
    (job(every=None, cron="* * * * * *x"), "schedule.cron"),
    (job(every=None, cron=5), "schedule.cron"),
    (job(timezone="Mars/Olympus_Mons"), "timezone"),
    (job(timezone="../../etc/passwd"), "timezone"),
    (job(timezone="America"), "timezone"),  # a folder of zones, not a zone
    (job(timezone=3), "timezone"),
    (job(every="0s"), "schedule.every"),
    (job(every=0), "schedule.every"),
    (job(every="-5s"), "schedule.every"),
    (job(every="0.0001s"), "schedule.every"),  # rounds to 0 ms
    (job(every="soon"), "schedule.every"),
    (job(every=None, interval_ms=0), "schedule.interval_ms"),
    (job(every=None, interval_ms=-5000), "schedule.interval_ms"),
    (job(every=None, interval_ms="5000"), "schedule.interval_ms"),
    (job(every=None, at="tomorrow"), "schedule.at"),
    (job(every=None, at=True), "schedule.at"),
    (job(every=None, at_ms=float("nan")), "schedule.at"),
    # executor
    (job(executor="noop"), "executor"),
    (job(executor={"kind": "ftp"}), "executor.kind"),
    (job(executor={}), "executor.kind"),
    (job(executor={"kind": None}), "executor.kind"),
    (job(executor={"kind": "shell"}), "executor.command"),
    (job(executor={"kind": "shell", "command": "   "}), "executor.command"),
    (job(executor={"kind": "shell", "command": "x" * (MAX_PAYLOAD_BYTES + 1)}), "executor.command"),
    (job(executor={"kind": "http"}), "executor.url"),
    (http(url="ftp://example.com/file"), "executor.url"),
    (http(url="file:///etc/passwd"), "executor.url"),
    (http(url="example.com/hook"), "executor.url"),
    (http(url="https://"), "executor.url"),
    (http(url="http://[::1"), "executor.url"),  # urlsplit itself refuses it
    (http(url=["https://example.com"]), "executor.url"),
    (http(method="FETCH"), "executor.method"),
    (http(body="x" * (MAX_PAYLOAD_BYTES + 1)), "executor.body"),
    (http(body="é" * (MAX_PAYLOAD_BYTES // 2 + 1)), "executor.body"),  # the limit is in bytes
    (http(body={"a": 1}), "executor.body"),
    (http(headers={"Bad Name": "v"}), "executor.headers"),
    (http(headers={"X:Y": "v"}), "executor.headers"),
    (http(headers={"": "v"}), "executor.headers"),
    (http(headers={"X-Inject": "a\r\nEvil: 1"}), "executor.headers"),
    (http(headers={"X-Num": 5}), "executor.headers"),
    (http(headers=[["X-A"]]), "executor.headers"),
    (http(headers=[["X-A", "1", "2"]]), "executor.headers"),
    (http(headers="X-A: 1"), "executor.headers"),
    (http(headers=5), "executor.headers"),
    (http(secret_headers="Authorization"), "executor.secret_headers"),
    (http(secret_headers=[1]), "executor.secret_headers"),
    (http(secret_headers=5), "executor.secret_headers"),
    # policies
    (job(catchup="sometimes"), "catchup"),
    (job(catchup=None), "catchup"),  # not CatchUp.NONE by way of str(None)
    (job(catchup=1), "catchup"),
    (job(overlap="queue"), "overlap"),
    (job(overlap=True), "overlap"),
    (job(catchup_window="-1s"), "catchup_window"),
    (job(catchup_window="forever"), "catchup_window"),
    (job(catchup_window=float("inf")), "catchup_window"),
    (job(timeout="0s"), "timeout"),
    (job(timeout=True), "timeout"),
    (job(retry="3 times"), "retry"),
    (job(retry={"max_attempts": 0}), "retry.max_attempts"),
    (job(retry={"max_attempts": 101}), "retry.max_attempts"),
    (job(retry={"max_attempts": "3"}), "retry.max_attempts"),
    (job(retry={"max_attempts": True}), "retry.max_attempts"),
    (job(retry={"backoff": "fast"}), "retry.backoff"),
    (job(retry={"backoff": "0s"}), "retry.backoff"),
    (job(retry={"backoff_max": "-1m"}), "retry.backoff_max"),
    # the rest
    (job(labels=["team"]), "labels"),
    (job(labels={"n": 1}), "labels"),
    (job(labels={f"k{i}": "v" for i in range(65)}), "labels"),
    (job(labels={"k" * 257: "v"}), "labels"),
    (job(labels={"k": "v" * 257}), "labels"),
    (job(labels={"": "v"}), "labels"),
    (job(labels={"k": "nul\x00"}), "labels"),
    (job(timeout="9999999999999999s"), "timeout"),
    (job(timeout=9.3e15), "timeout"),
    (http(body="\ud800"), "executor.body"),
    (http(headers={"X\tY": "v"}), "executor.headers"),
    (http(headers={"X-Big": "v" * 8193}), "executor.headers"),
    (job(executor={"kind": "shell", "command": "echo \udcff"}), "executor.command"),
    (job(paused="yes"), "paused"),
    (job(version=-1), "version"),
    (job(version="1"), "version"),
]


def _bad_id(case):
    data, field = case
    return field + ":" + (json.dumps(data, ensure_ascii=True, default=str)[:60] if not isinstance(data, str) else data)


@pytest.mark.parametrize("data, field", BAD, ids=[_bad_id(c) for c in BAD])
def test_bad_jobs_name_their_field(data, field):
    with pytest.raises(InvalidJob) as err:
        job_from_dict(data)
    assert err.value.field == field, str(err.value)


@pytest.mark.parametrize(
    "text, field",
    [
        ('{"id": "\\ud800", "every": "5s"}', "id"),
        ('{"id": "j", "every": "5s", "catchup": null}', "catchup"),
        ('{"id": "j", "every": "5s", "catchup_window": Infinity}', "catchup_window"),
        ('{"id": "j", "every": NaN}', "schedule.every"),
        ('{"id": "j", "at_ms": -Infinity}', "schedule.at"),
    ],
)
def test_bad_json_names_its_field(text, field):
    # JSON (and TOML) can carry lone surrogates, null, NaN and Infinity: each must
    # still be an InvalidJob, never a stray ValueError or OverflowError.
    with pytest.raises(InvalidJob) as err:
        job_from_json(text)
    assert err.value.field == field


# --- unknown keys and a missing executor ----------------------------------------------------------

UNKNOWN_KEYS = [
    # (the job, the field named, the hint given: None when no key is close)
    (job(timzone="Asia/Tokyo"), "timzone", "timezone"),
    (job(retyr={"max_attempts": 3}), "retyr", "retry"),
    (job(bogus_field=1), "bogus_field", None),
    (job(labes={"a": "b"}), "labes", "labels"),
    ({"id": "j", "schedule": {"every": "5s", "timzone": "Asia/Tokyo"}}, "schedule.timzone", "timezone"),
    ({"id": "j", "schedule": {"evry": "5s", "every": "5s"}}, "schedule.evry", "every"),
    (job(retry={"max_atempts": 3}), "retry.max_atempts", "max_attempts"),
    (job(retry={"backof": "1s"}), "retry.backof", "backoff"),
    (http(hedaers={"X-A": "1"}), "executor.hedaers", "headers"),
    (http(secret_header=["X-A"]), "executor.secret_header", "secret_headers"),
    (job(executor={"kind": "shell", "comand": "true"}), "executor.comand", "command"),
    (job(executor={"kind": "shell", "command": "true", "url": "http://x"}), "executor.url", None),
    (job(executor={"kind": "noop", "url": "http://x"}), "executor.url", None),
]


@pytest.mark.parametrize("data, field, hint", UNKNOWN_KEYS, ids=[c[1] for c in UNKNOWN_KEYS])
def test_unknown_keys_are_named_with_a_hint(data, field, hint):
    with pytest.raises(InvalidJob) as err:
        job_from_dict(data)
    assert err.value.field == field
    assert "unknown key" in err.value.reason
    if hint:
        assert f"did you mean {hint!r}?" in err.value.reason
    else:
        assert "did you mean" not in err.value.reason and "expected one of" in err.value.reason


def test_schedule_keys_at_the_top_level_beside_a_schedule_table_are_refused():
    with pytest.raises(InvalidJob) as err:
        job_from_dict({"id": "j", "schedule": {"every": "5s"}, "timezone": "Asia/Tokyo"})
    assert err.value.field == "timezone" and "schedule table" in err.value.reason


@pytest.mark.parametrize(
    "data",
    [
        {"id": "j", "every": "5s"},
        {"id": "j", "every": "5s", "executor": None},
        {"id": "j", "every": "5s", "executor": {}},
    ],
)
def test_a_missing_executor_is_refused_where_required(data):
    with pytest.raises(InvalidJob) as err:
        job_from_dict(data, require_executor=True)
    assert err.value.field in ("executor", "executor.kind") and "missing" in err.value.reason


def test_the_stored_form_passes_the_key_check():
    # job_to_dict writes only keys job_from_dict takes: stored jobs always load.
    for case in VALID:
        data, _ = case.values
        job_from_dict(job_to_dict(job_from_dict(data)), require_executor=True)


# --- the shortest gap between slots --------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule, gap_ms",
    [
        ({"every": "1ms"}, 1),
        ({"every": "1m"}, 60_000),
        ({"cron": "* * * * * *"}, 1_000),
        ({"cron": "*/15 * * * * *"}, 15_000),
        ({"cron": "0,1 0 0 * * *"}, 1_000),  # two slots a second apart once a day
        ({"cron": "0,30 0 9 * * *"}, 30_000),
        ({"cron": "59 59 23 * * *"}, 86_400_000),  # the last second of each day: a day apart
        ({"cron": "0 0,1 * * * *"}, 60_000),  # second 0 of minutes 0 and 1 of each hour
        ({"cron": "*/5 * * * *"}, 300_000),
        ({"cron": "0 * * * *"}, 3_600_000),
        ({"cron": "0 0,23 * * *"}, 3_600_000),  # 23:00 -> 00:00 the next day
        ({"cron": "0 0,23 * * 1"}, 23 * 3_600_000),  # Mondays only: 00:00 -> 23:00, then a week
        ({"cron": "0 9 * * 1-5"}, 86_400_000),
        ({"cron": "0 0 * * 1"}, 7 * 86_400_000),
        ({"at": "2030-01-01T00:00:00Z"}, None),
    ],
)
def test_shortest_gap(schedule, gap_ms):
    j = job_from_dict({"id": "g", **schedule})
    assert shortest_gap_ms(j.schedule) == gap_ms


@pytest.mark.parametrize("ms", [1, 250, 1000, 1500, 59_999, 60_000, 90_000, 3_600_000, 86_400_000, 90_061_000])
def test_format_duration_round_trips(ms):
    assert parse_duration_ms(format_duration_ms(ms)) == ms


# --- secret headers -------------------------------------------------------------------------------


def test_credential_headers_are_secret_without_being_named():
    j = job_from_dict(
        {
            "id": "h",
            "every": "1m",
            "executor": {
                "kind": "http",
                "url": "http://x",
                "headers": {
                    "authorization": "Bearer t",
                    "Proxy-Authorization": "p",
                    "Cookie": "c",
                    "X-Trace": "1",
                    "X-Mine": "m",
                },
                "secret_headers": ["x-mine"],
            },
        }
    )
    assert dict(redacted(j)["executor"]["headers"]) == {
        "authorization": "***",
        "Proxy-Authorization": "***",
        "Cookie": "***",
        "X-Trace": "1",
        "X-Mine": "***",
    }
    assert dict(job_to_dict(j)["executor"]["headers"])["authorization"] == "Bearer t"  # stored as given


# --- durations and times -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("90s", 90_000),
        ("1m30s", 90_000),
        ("1h30m", 5_400_000),
        ("250ms", 250),
        ("1m250ms", 60_250),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1.5s", 1_500),
        (" 5M ", 300_000),
        ("0s", 0),
        ("30", 30_000),  # a bare number is seconds
        ("0.25", 250),
        (30, 30_000),
        (0.25, 250),
    ],
)
def test_parse_duration_ms(text, expected):
    assert parse_duration_ms(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "5x", "s", "-1s", "1 s", "5s5", "1h-30m", "ms", True, False, float("nan"), float("inf")],
)
def test_parse_duration_ms_rejects(text):
    with pytest.raises(InvalidJob) as err:
        parse_duration_ms(text, "timeout")
    assert err.value.field == "timeout"


@pytest.mark.parametrize(
    "text, tz, expected",
    [
        ("2026-03-08T07:00:00Z", "UTC", utc_ms("2026-03-08T07:00:00Z")),
        ("2026-03-08T02:00:00-05:00", "Asia/Kolkata", utc_ms("2026-03-08T07:00:00Z")),  # an offset beats tz
        ("2026-01-15T09:00:00", "Europe/Lisbon", utc_ms("2026-01-15T09:00:00Z")),
        ("2026-07-15T09:00:00", "Europe/Lisbon", utc_ms("2026-07-15T08:00:00Z")),
        ("2026-01-15T09:00:00", "Asia/Kolkata", utc_ms("2026-01-15T03:30:00Z")),
        ("2026-01-15T09:00:00.250Z", "UTC", utc_ms("2026-01-15T09:00:00Z") + 250),
        ("2026-01-15", "UTC", utc_ms("2026-01-15T00:00:00Z")),
        (1_900_000_000_123, "UTC", 1_900_000_000_123),  # a number is already epoch ms
        (datetime(2026, 1, 15, 9, tzinfo=UTC), "Asia/Kolkata", utc_ms("2026-01-15T09:00:00Z")),
        (datetime(2026, 1, 15, 9), "Asia/Kolkata", utc_ms("2026-01-15T03:30:00Z")),
    ],
)
def test_parse_time_ms(text, tz, expected):
    assert parse_time_ms(text, tz) == expected


@pytest.mark.parametrize(
    "text, tz, field",
    [
        ("tomorrow", "UTC", "schedule.at"),
        ("2026-13-01T00:00:00", "UTC", "schedule.at"),
        (True, "UTC", "schedule.at"),
        (float("nan"), "UTC", "schedule.at"),
        (float("inf"), "UTC", "schedule.at"),
        ("2026-01-15T09:00:00", "Nowhere/Special", "timezone"),  # a naive time needs a real zone
    ],
)
def test_parse_time_ms_rejects(text, tz, field):
    with pytest.raises(InvalidJob) as err:
        parse_time_ms(text, tz, "schedule.at")
    assert err.value.field == field
