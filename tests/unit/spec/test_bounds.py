"""The spec is the gate: every bound of bounds.py is checked where a job is parsed, and what passes it
computes its slots and renders; a job stored before a bound existed still loads, lists and renders."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.api.status import status_for
from shardcron.clock import rfc3339_ms
from shardcron.dashboard import present
from shardcron.errors import InvalidJob
from shardcron.leader.heap import ClaimDue, TimerHeap
from shardcron.model import Schedule, ScheduleKind
from shardcron.rules.runs import job_runs
from shardcron.rules.triggers import slots_between, trigger_for
from shardcron.spec.bounds import DAY_MS, INT64_MAX, MAX_DURATION_MS, MAX_TIME_MS, YEAR_MS, cut, shown
from shardcron.spec.job import job_from_dict, job_from_json, job_to_json
from shardcron.spec.schedule import shortest_gap_ms
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import job_from_proto, job_to_proto, stored_job_from_proto
from shardcron.wire.tick_convert import job_runs_to_proto

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
NOOP = {"kind": "noop"}


def refused(d: dict, field: str, says: str = "") -> InvalidJob:
    with pytest.raises(InvalidJob) as err:
        job_from_dict(d, require_executor=True)
    assert err.value.field == field, str(err.value)
    assert says in err.value.reason, str(err.value)
    assert status_for(err.value)[0] is grpc.StatusCode.INVALID_ARGUMENT
    return err.value


def renders(job) -> None:
    """What `jobs list` and the dashboard ask of a job: its runs, its message, its times as text."""
    runs = job_runs(job, NOW_MS)
    job_runs_to_proto(runs)
    job_to_proto(job, redact=True)
    for ms in (runs.next_slot_ms, runs.next_start_ms):
        if ms is not None:
            assert "out of range" not in rfc3339_ms(ms)


# -- finding 2: a single run in 2400 (or 9999) is a slot like any other ---------------------------


@pytest.mark.parametrize(
    "at, iso",
    [
        ("2400-01-01T00:00:00Z", "2400-01-01T00:00:00.000Z"),
        ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
        ("9999-12-31T00:00:00", "9999-12-31T00:00:00.000Z"),
    ],
)
def test_a_single_run_up_to_the_end_of_9999_computes_its_slot_and_renders(at, iso):
    job = job_from_dict({"id": "far", "at": at, "executor": NOOP}, require_executor=True)
    assert rfc3339_ms(job.schedule.at_ms) == iso
    trigger = trigger_for(job.schedule)
    assert slots_between(trigger, NOW_MS, MAX_TIME_MS) == [job.schedule.at_ms]
    runs = job_runs(job, NOW_MS)
    assert runs.next_slot_ms == job.schedule.at_ms
    renders(job)
    assert job_from_json(job_to_json(job)) == job


@pytest.mark.parametrize(
    "schedule",
    [
        {"every": "10d"},
        {"interval_ms": MAX_DURATION_MS},
        {"cron": "59 23 31 12 *"},
        {"cron": "* * * * * *", "timezone": "Pacific/Kiritimati"},
    ],
)
def test_every_trigger_ends_at_the_end_of_9999_without_an_error(schedule):
    job = job_from_dict({"id": "j", **schedule, "executor": NOOP}, require_executor=True)
    trigger = trigger_for(job.schedule)
    for after in (MAX_TIME_MS - 3 * DAY_MS, MAX_TIME_MS - 1500, MAX_TIME_MS, MAX_TIME_MS + YEAR_MS):
        slot = trigger.next_after(after)
        assert slot is None or after < slot <= MAX_TIME_MS


def test_the_claim_heap_waits_for_a_slot_in_2400_without_overflowing():
    """The claimer's wait until its top entry (a slot in 2400) overflowed threading's TIMEOUT_MAX
    and killed the thread; it is now capped, so the waiter just waits until woken."""
    at = job_from_dict({"id": "far", "at": "2400-01-01T00:00:00Z"}).schedule.at_ms
    heap = TimerHeap()
    heap.push_many([ClaimDue(at, 0, 1, "far", 0, at)])
    stop, errors, taken = threading.Event(), [], []

    def claimer():
        try:
            taken.append(heap.wait_due(lambda: NOW_MS, 200, stop.is_set))
        except Exception as e:  # noqa: BLE001 - what the claimer thread died of
            errors.append(e)

    t = threading.Thread(target=claimer, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while t.is_alive() and time.monotonic() < deadline:
        stop.set()
        heap.wake()
        t.join(0.05)
    assert not t.is_alive()
    assert errors == [] and taken == [[]]


@pytest.mark.parametrize("at", ["1969-12-31T23:59:59Z", 10**23, -1, MAX_TIME_MS + 1, 2**63])
def test_a_single_run_outside_1970_to_9999_is_refused(at):
    key = "at" if isinstance(at, str) else "at_ms"
    refused({"id": "j", key: at, "executor": NOOP}, "schedule.at", "outside 1970")


# -- finding 3: an interval past ten years ------------------------------------------------------


@pytest.mark.parametrize(
    "schedule, field",
    [
        ({"interval_ms": INT64_MAX}, "schedule.interval_ms"),
        ({"interval_ms": 10**23}, "schedule.interval_ms"),
        ({"interval_ms": MAX_DURATION_MS + 1}, "schedule.interval_ms"),
        ({"every": "3651d"}, "schedule.every"),
    ],
)
def test_an_interval_longer_than_ten_years_is_refused(schedule, field):
    refused({"id": "j", **schedule, "executor": NOOP}, field, "longer than the limit of ten years")


def test_an_interval_of_ten_years_is_accepted_and_renders():
    job = job_from_dict({"id": "j", "interval_ms": MAX_DURATION_MS, "executor": NOOP})
    renders(job)


# -- a job stored before the bounds: still loads, lists and renders ------------------------------


STORED_OUT_OF_RANGE = [
    {"interval_ms": INT64_MAX},
    {"at_ms": INT64_MAX},
    {"at_ms": -(2**62)},
    {"cron": "0 0 30 2 *"},
]


@pytest.mark.parametrize("schedule", STORED_OUT_OF_RANGE)
def test_a_stored_job_past_the_bounds_still_loads_lists_and_renders(schedule):
    spec = (
        '{"id":"old\\u202eid","schedule":' + job_to_json_schedule(schedule) + ',"executor":{"kind":"noop"},'
        '"jitter":"2d","history_limit":100000000,"labels":{"k":"v\\u200b"}}'
    )
    job = job_from_json(spec)
    runs = job_runs(job, NOW_MS)
    assert runs.next_slot_ms is None  # no slot after year 9999, none before 1970 is owed
    message = job_to_proto(job, redact=True)  # what GetJob and ListJobs answer
    job_runs_to_proto(runs)
    assert stored_job_from_proto(message).schedule == job.schedule  # what the CLI and the dashboard read back
    with pytest.raises(InvalidJob):  # while a new job like it is refused
        job_from_proto(message)


def job_to_json_schedule(schedule: dict) -> str:
    import json

    return json.dumps({"timezone": "UTC", **schedule})


@pytest.mark.parametrize(
    "ms, text",
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (MAX_TIME_MS, "9999-12-31T23:59:59.999Z"),
        (MAX_TIME_MS + 1, f"(out of range: {MAX_TIME_MS + 1} ms)"),
        (INT64_MAX, f"(out of range: {INT64_MAX} ms)"),
        (-(10**30), f"(out of range: {-(10**30)} ms)"),
    ],
)
def test_rfc3339_ms_is_total(ms, text):
    assert rfc3339_ms(ms) == text


# -- findings 9, 11, 12: a cron that never fires -----------------------------------------------


@pytest.mark.parametrize("extra", [{}, {"jitter": "2d"}, {"jitter": "1h"}])
@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 2 *", "0 0 31 4 *", "0 0 0 31 11 *"])
def test_a_cron_that_never_fires_is_refused_with_that_reason(cron, extra):
    refused({"id": "j", "cron": cron, **extra, "executor": NOOP}, "schedule.cron", "never fires in the next ten years")


def test_a_cron_that_fires_every_four_years_is_accepted():
    job = job_from_dict({"id": "leap", "cron": "0 0 29 2 *", "jitter": "1d", "executor": NOOP})
    renders(job)


def test_the_gap_of_a_never_firing_cron_is_answered_not_raised():
    """A stored one reaches shortest_gap_ms (croniter's CroniterBadDateError escaped from it as INTERNAL); its
    answer is the fields' own bound (at most one slot a day), so a rate from it is never understated."""
    assert shortest_gap_ms(Schedule(ScheduleKind.CRON, cron="0 0 31 2 *"), below_ms=2 * DAY_MS + 1) == DAY_MS


def test_cron_plus_a_huge_jitter_is_refused_naming_the_jitter():
    refused({"id": "j", "cron": "0 0 1 1 *", "jitter": "2d", "executor": NOOP}, "jitter", "longer than the limit of 1d")


# -- the other integers and durations -------------------------------------------------------


@pytest.mark.parametrize(
    "extra, field, says",
    [
        ({"jitter": "1d1ms", "at": "2030-01-01T00:00:00Z"}, "jitter", "longer than the limit"),
        ({"history_limit": 10**23}, "history_limit", "at most 1000000"),
        ({"history_limit": 1_000_001}, "history_limit", "at most 1000000"),
        ({"version": 2**31}, "version", "version column"),
        ({"version": 10**23}, "version", "at most"),
        ({"retry": {"max_attempts": 10**23}}, "retry.max_attempts", "at most 100"),
        ({"retry": {"max_attempts": -(10**23)}}, "retry.max_attempts", "at least 1"),
        ({"timeout": 10**23}, "timeout", "longer than the limit"),
        ({"catchup_window": "3651d"}, "catchup_window", "longer than the limit"),
        ({"retry": {"backoff_max": 10**12}}, "retry.backoff_max", "longer than the limit"),
    ],
)
def test_each_integer_and_duration_has_its_bound(extra, field, says):
    d = {"id": "j", "every": "1h", "executor": NOOP, **extra}
    if "at" in extra:
        del d["every"]
    refused(d, field, says)


@pytest.mark.parametrize(
    "executor, field, says",
    [
        ({"kind": "celery", "url": "redis://h", "task": "t", "args": [2**64]}, "executor.args", "64-bit"),
        (
            {"kind": "celery", "url": "redis://h", "task": "t", "kwargs": {"n": -(2**63) - 1}},
            "executor.kwargs",
            "64-bit",
        ),
        ({"kind": "celery", "url": "redis://h", "task": "t", "priority": 10**23}, "executor.priority", "at most 255"),
        ({"kind": "celery", "url": "redis://h", "task": "t", "expires": 10**23}, "executor.expires", "longer"),
        ({"kind": "redis-stream", "url": "redis://h", "stream": "s", "maxlen": 2**63}, "executor.maxlen", "64-bit"),
        (
            {"kind": "redis-stream", "url": "redis://h", "stream": "s", "dedupe_ttl": 10**23},
            "executor.dedupe_ttl",
            "longer",
        ),
    ],
)
def test_executor_integers_have_their_bounds(executor, field, says):
    refused({"id": "j", "every": "1h", "executor": executor}, field, says)


# -- finding 9: deep JSON in the API's args_json / kwargs_json ----------------------------------


def _api_job(**executor) -> pb.Job:
    return pb.Job(id="deep", schedule=pb.Schedule(interval_ms=60_000), **executor)


@pytest.mark.parametrize(
    "message, field",
    [
        (_api_job(python=pb.PythonExecutor(target="myapp.jobs:run", args_json="[" * 100_000)), "executor.args"),
        (
            _api_job(celery=pb.CeleryExecutor(url="redis://h", task="t", kwargs_json='{"a":' * 50_000)),
            "executor.kwargs",
        ),
        (_api_job(celery=pb.CeleryExecutor(url="redis://h", task="t", args_json="[" * 33 + "]" * 33)), "executor.args"),
        (_api_job(rq=pb.RqExecutor(url="redis://h", func="a.b", args_json='["[[[[' + "[" * 40 + '"]')), None),
    ],
)
def test_deep_json_from_the_api_is_refused_naming_the_field(message, field):
    if field is None:  # brackets inside a string are no nesting
        assert job_from_proto(message).executor.rq.args == ("[[[[" + "[" * 40,)
        return
    with pytest.raises(InvalidJob) as err:
        job_from_proto(message)
    assert err.value.field == field and "nested deeper than the limit of 32" in err.value.reason


def test_deep_values_from_a_table_are_refused_without_recursing():
    deep: list = []
    for _ in range(100_000):  # built without recursion, as YAML or the API would hand it over
        deep = [deep]
    refused(
        {"id": "j", "every": "1h", "executor": {"kind": "celery", "url": "redis://h", "task": "t", "args": deep}},
        "executor.args",
        "nested deeper",
    )


def test_json_nested_to_the_limit_is_accepted():
    args = "[" * 32 + "]" * 32
    job = job_from_proto(_api_job(celery=pb.CeleryExecutor(url="redis://h", task="t", args_json=args)))
    renders(job)


# -- finding 14: ids and names are printable --------------------------------------------------


INVISIBLE = [
    "\u202e",
    "\u202a",
    "\u2066",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\x00",
    "\x1b",
    "\x7f",
    "\x85",
    "\u00a0",
    "\u2028",
    "\ue000",
    "\U000e0001",
    "\u0378",
]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_ids_labels_and_names_refuse_invisible_characters(char):
    refused({"id": f"pay{char}roll", "every": "1h", "executor": NOOP}, "id", f"U+{ord(char):04X}")
    refused({"id": "j", "every": "1h", "executor": NOOP, "labels": {"team": f"a{char}"}}, "labels", "printable")
    refused(
        {"id": "j", "every": "1h", "executor": {"kind": "celery", "url": "redis://h", "task": f"t{char}x"}},
        "executor.task",
        "control characters" if ord(char) < 32 or ord(char) == 127 else "printable",
    )


@pytest.mark.parametrize("job_id", ["payroll", "nightly report", "café-ünïcode", "报表", "emoji-🚀", "a:b/c.d"])
def test_printable_ids_are_accepted(job_id):
    assert job_from_dict({"id": job_id, "every": "1h"}).id == job_id


# -- finding 10: a value is echoed cut, never whole -----------------------------------------


@pytest.mark.parametrize(
    "d",
    [
        {"id": "x" * 10_000_000, "every": "1h"},
        {"id": "j", "every": "9" * 1_000_000 + "x"},
        {"id": "j", "cron": "* " * 500_000},
        {"id": "j", "every": "1h", "timezone": "Z" * 1_000_000},
        {"id": "j", "every": "1h", "catchup": "c" * 1_000_000},
    ],
)
def test_an_error_echoes_a_huge_value_cut(d):
    with pytest.raises(InvalidJob) as err:
        job_from_dict(d)
    assert len(str(err.value)) < 400, str(err.value)[:400]


@given(st.one_of(st.text(), st.binary(), st.integers(), st.lists(st.integers()), st.dictionaries(st.text(), st.text())))
def test_shown_stays_short(value):
    assert len(shown(value)) <= 120


def test_shown_marks_what_it_cut():
    assert shown("x" * 200) == repr("x" * 80) + "... (cut: 200 characters long)"
    assert shown(10**5000).endswith("-bit integer")
    assert cut("y" * 100, 10) == "y" * 10 + "... (cut: 100 characters long)"


# -- properties: refused by name, or accepted and then computing and rendering ----------------


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(["interval_ms", "at_ms"]),
    value=st.one_of(st.integers(), st.integers(-(2**64), 2**64), st.integers(0, MAX_TIME_MS + YEAR_MS)),
    jitter=st.one_of(st.none(), st.integers(0, 2 * DAY_MS).map(lambda ms: f"{ms}ms")),
)
def test_any_integer_schedule_is_refused_by_name_or_schedules_and_renders(key, value, jitter):
    d = {"id": "j", key: value, "executor": NOOP, **({"jitter": jitter} if jitter else {})}
    try:
        job = job_from_dict(d, require_executor=True)
    except InvalidJob as e:
        assert e.field in ("schedule.interval_ms", "schedule.at", "jitter"), str(e)
        return
    renders(job)
    slots_between(trigger_for(job.schedule), NOW_MS, NOW_MS + YEAR_MS, limit=3)
    assert job_from_proto(job_to_proto(job, redact=False)) == job


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_id_is_refused_by_name_or_is_printable(job_id):
    try:
        job = job_from_dict({"id": job_id, "every": "1h"})
    except InvalidJob as e:
        assert e.field == "id"
        return
    assert job.id.isprintable()


# -- fuzz findings F1, F12, F15, F16, F17 (docs: the fuzz findings table) ------------------------


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"every": []}, "schedule.every"),
        ({"every": {}}, "schedule.every"),
        ({"every": "1h", "timeout": {}}, "timeout"),
        ({"every": "1h", "catchup_window": [0, 1]}, "catchup_window"),
        ({"every": "1h", "retry": {"backoff": []}}, "retry.backoff"),
        ({"every": "1h", "retry": {"backoff_max": {1, 2}}}, "retry.backoff_max"),
        ({"every": "1h", "jitter": {}}, "jitter"),
        (
            {"every": "1h", "executor": {"kind": "celery", "url": "redis://h", "task": "t", "expires": []}},
            "executor.expires",
        ),
        (
            {"every": "1h", "executor": {"kind": "redis-stream", "url": "redis://h", "stream": "s", "dedupe_ttl": [1]}},
            "executor.dedupe_ttl",
        ),
    ],
)
def test_a_container_where_a_duration_goes_is_refused_naming_the_field(extra, field):
    refused({"id": "j", "executor": NOOP, **extra}, field, "expected a duration")


def test_a_huge_unknown_key_is_named_cut():
    err = refused({"id": "j", "every": "1h", "executor": NOOP, "k" * 1_000_000: 1}, cut("k" * 1_000_000), "unknown key")
    # The key cut to 80 characters, then the keys a job takes: the message stays one short line's worth.
    assert len(str(err)) < 500, str(err)[:500]


def test_a_stored_job_with_args_nested_past_todays_limit_is_still_read_by_the_client():
    deep: list = [1]
    for _ in range(63):
        deep = [deep]
    job = job_from_json(
        '{"id": "old", "schedule": {"every": "1h"}, "executor": {"kind": "celery", "task": "t", '
        f'"url": "redis://h", "args": [{json.dumps(deep)}, {2**64}]}}}}'
    )
    message = job_to_proto(job, redact=True)
    assert stored_job_from_proto(message).executor == job.executor  # what `jobs list` reads
    with pytest.raises(InvalidJob, match="nested deeper than the limit of 32"):  # a new one like it is refused
        job_from_proto(message)


@pytest.mark.parametrize(
    "schedule, field, value",
    [
        ('{"at_ms": 100000000000000000000000}', "at_ms", INT64_MAX),
        ('{"at": 6.4e238}', "at_ms", INT64_MAX),
        ('{"at": -1e30}', "at_ms", -(2**63)),
        ('{"interval_ms": 18446744073709551616}', "interval_ms", INT64_MAX),
    ],
)
def test_a_stored_schedule_past_int64_is_answered_clamped(schedule, field, value):
    job = job_from_json(f'{{"id": "old", "schedule": {schedule}, "executor": {{"kind": "noop"}}}}')
    message = job_to_proto(job, redact=True)  # what GetJob and ListJobs answer
    assert getattr(message.schedule, field) == value
    stored_job_from_proto(message)


@pytest.mark.parametrize(
    "at, shown_as",
    [
        ('"0001-01-01T00:00:00+14:00"', "once at (out of range: -62135647200000 ms)"),
        ("-5.49e16", "once at (out of range: -54900000000000000 ms)"),
        ("1767225600000", "once at 2026-01-01 00:00:00.000Z"),
    ],
)
def test_the_dashboard_shows_a_stored_instant_outside_years_1_9999(at, shown_as):
    job = job_from_json(f'{{"id": "old", "schedule": {{"at": {at}}}, "executor": {{"kind": "noop"}}}}')
    assert present.schedule_text(job) == shown_as
    assert present.utc(-(10**30)) == f"(out of range: {-(10**30)} ms)"
