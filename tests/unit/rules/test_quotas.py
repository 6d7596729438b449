"""Quotas: at, below and above each limit; growth-only refusals; the texts sent with RESOURCE_EXHAUSTED."""

from fractions import Fraction

import pytest

from shardcron.errors import InvalidJob
from shardcron.model import Schedule, ScheduleKind
from shardcron.rules.quotas import (
    InvalidQuota,
    PutChange,
    Quota,
    QuotaExceeded,
    Usage,
    admit_in_order,
    check_put,
    check_start,
    job_rate,
    parse_quota,
)

NEW_1_PER_S = PutChange(None, Fraction(1))


@pytest.mark.parametrize(
    "schedule, rate",
    [
        (Schedule(ScheduleKind.INTERVAL, interval_ms=250), Fraction(4)),
        (Schedule(ScheduleKind.INTERVAL, interval_ms=3_000), Fraction(1, 3)),
        (Schedule(ScheduleKind.CRON, cron="*/5 * * * * *"), Fraction(1, 5)),  # seconds first
        (Schedule(ScheduleKind.CRON, cron="*/10 9-17 * * 1-5"), Fraction(1, 600)),  # its peak, in office hours
        (Schedule(ScheduleKind.CRON, cron="30 2 * * *"), Fraction(1, 86_400)),
        (Schedule(ScheduleKind.ONCE, at_ms=1_767_225_600_000), Fraction(0)),
    ],
)
def test_a_jobs_rate_is_one_slot_per_shortest_gap(schedule, rate):
    assert job_rate(schedule) == rate


@pytest.mark.parametrize(
    "jobs, limit, refused",
    [(8, 10, False), (9, 10, False), (10, 10, True), (0, 0, True), (5, None, False)],
    ids=["below", "reaching", "above", "zero", "no-limit"],
)
def test_max_jobs(jobs, limit, refused):
    result = check_put("team-a", Quota(max_jobs=limit), Usage(jobs=jobs), NEW_1_PER_S)
    assert (result is not None) is refused
    if refused:
        assert result == QuotaExceeded("max_jobs", "team-a", limit, jobs + 1)


@pytest.mark.parametrize(
    "current, new_rate, limit, refused",
    [
        (Fraction(9), Fraction(1), Fraction(10), False),  # exactly at the limit
        (Fraction(9), Fraction(11, 10), Fraction(10), True),
        (Fraction(0), Fraction(1, 3), Fraction(1), False),
        (Fraction(2, 3), Fraction(1, 3), Fraction(1), False),  # thirds sum to exactly 1, no float rounding above
        (Fraction(2, 3), Fraction(1, 3) + Fraction(1, 10**9), Fraction(1), True),
        (Fraction(500), Fraction(1), None, False),
    ],
)
def test_max_slots_per_second(current, new_rate, limit, refused):
    result = check_put(
        "team-a", Quota(max_slots_per_second=limit), Usage(jobs=1, slots_per_second=current), PutChange(None, new_rate)
    )
    assert (result is not None) is refused
    if refused:
        assert result.quota == "max_slots_per_second" and result.would_be == current + new_rate


@pytest.mark.parametrize(
    "usage, change, refused",
    [
        (Usage(jobs=10, slots_per_second=Fraction(10)), PutChange(Fraction(1), Fraction(1)), False),  # same job again
        (Usage(jobs=10, slots_per_second=Fraction(10)), PutChange(Fraction(1), Fraction(2)), True),  # made faster
        (Usage(jobs=12, slots_per_second=Fraction(30)), PutChange(Fraction(5), Fraction(1)), False),  # over, shrinking
        (Usage(jobs=12, slots_per_second=Fraction(30)), PutChange(Fraction(5), Fraction(5)), False),  # over, unchanged
        (Usage(jobs=12, slots_per_second=Fraction(3)), PutChange(None, Fraction(0)), True),  # over on jobs, one more
    ],
    ids=["replace-same", "replace-faster", "lowered-quota-shrink", "lowered-quota-same", "lowered-quota-grow"],
)
def test_replacing_is_refused_only_when_it_grows_past_a_limit(usage, change, refused):
    quota = Quota(max_jobs=10, max_slots_per_second=Fraction(10))
    assert (check_put("team-a", quota, usage, change) is not None) is refused


def test_jobs_are_checked_before_rate():
    refused = check_put(
        "a",
        Quota(max_jobs=1, max_slots_per_second=Fraction(1)),
        Usage(jobs=1, slots_per_second=Fraction(1)),
        NEW_1_PER_S,
    )
    assert refused.quota == "max_jobs"


def test_put_jobs_admits_in_order_while_they_fit():
    changes = [
        PutChange(None, Fraction(4)),
        PutChange(None, Fraction(4)),
        PutChange(None, Fraction(4)),
        PutChange(None, Fraction(2)),
        PutChange(Fraction(4), Fraction(1)),
    ]
    results = admit_in_order("team-a", Quota(max_slots_per_second=Fraction(10)), Usage(), changes)
    assert [r is None for r in results] == [True, True, False, True, True]
    assert results[2].would_be == 12  # 4 + 4 admitted, then 4 more


@pytest.mark.parametrize(
    "running, limit, refused",
    [(3, 5, False), (4, 5, False), (5, 5, True), (9, 5, True), (0, 0, True), (100, None, False)],
)
def test_max_running(running, limit, refused):
    result = check_start("team-a", Quota(max_running=limit), running)
    assert (result is not None) is refused
    if refused:
        assert result == QuotaExceeded("max_running", "team-a", limit, running + 1)


@pytest.mark.parametrize(
    "refusal, reason",
    [
        (
            QuotaExceeded("max_jobs", "team-a", 10, 11),
            "namespace 'team-a' would hold 11 jobs; its quota max_jobs is 10",
        ),
        (
            QuotaExceeded("max_slots_per_second", "b", Fraction(100), Fraction(301, 3)),
            "namespace 'b' would admit 100.333 slots per second; its quota max_slots_per_second is 100",
        ),
        (
            QuotaExceeded("max_running", "c", 4, 5),
            "namespace 'c' would run 5 executions at once; its quota max_running is 4",
        ),
    ],
)
def test_reasons_name_quota_namespace_limit_and_would_be(refusal, reason):
    assert refusal.reason == reason


@pytest.mark.parametrize(
    "raw, quota",
    [
        ({}, Quota()),
        ({"max_jobs": 100, "max_running": 0}, Quota(max_jobs=100, max_running=0)),
        ({"max_slots_per_second": 0.1}, Quota(max_slots_per_second=Fraction(1, 10))),
        ({"max_slots_per_second": "2.5"}, Quota(max_slots_per_second=Fraction(5, 2))),
        ({"max_slots_per_second": 50}, Quota(max_slots_per_second=Fraction(50))),
    ],
)
def test_parse_quota(raw, quota):
    assert parse_quota(raw) == quota


@pytest.mark.parametrize(
    "raw, field, says",
    [
        ({"max_job": 1}, "ns.max_job", "is not a quota; the quotas are max_jobs, max_slots_per_second, max_running"),
        ({"max_jobs": -1}, "ns.max_jobs", "whole number of at least 0, got -1"),
        ({"max_jobs": 1.5}, "ns.max_jobs", "whole number"),
        ({"max_jobs": True}, "ns.max_jobs", "whole number"),
        ({"max_running": "3"}, "ns.max_running", "whole number"),
        ({"max_slots_per_second": "fast"}, "ns.max_slots_per_second", "number of at least 0, got 'fast'"),
        ({"max_slots_per_second": -2}, "ns.max_slots_per_second", "at least 0"),
        ({"max_slots_per_second": float("inf")}, "ns.max_slots_per_second", "number"),
        ({"max_slots_per_second": [1]}, "ns.max_slots_per_second", "number"),
    ],
)
def test_parse_quota_errors_name_the_field(raw, field, says):
    with pytest.raises(InvalidQuota) as e:
        parse_quota(raw, "ns")
    assert e.value.field == field and says in e.value.reason
    assert isinstance(e.value, InvalidJob)
