"""Triggers: interval alignment, once, cron fields, timezones and the DST rules.

Every expected instant is written as UTC text, worked out by hand from the
zone's rules, so a row reads as the rule it checks.
"""

import itertools
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.model import Schedule, ScheduleKind
from shardcron.rules.triggers import IntervalTrigger, OnceTrigger, slots_between, trigger_for
from shardcron.spec.cron import CronTrigger
from tests.support.instants import ms


def utc(slot: int) -> str:
    return datetime.fromtimestamp(slot / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def between(trigger, after: str, until: str, limit=None) -> list[str]:
    return [utc(s) for s in slots_between(trigger, ms(after), ms(until), limit)]


# --- interval -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "interval_ms, anchor_ms, after, expected",
    [
        # every 5s is aligned to the wall clock, whatever the start
        (5_000, 0, "2026-01-01T00:00:03.217Z", "2026-01-01T00:00:05.000Z"),
        (5_000, 0, "2026-01-01T00:00:05.000Z", "2026-01-01T00:00:10.000Z"),  # strictly after
        (5_000, 0, "2026-01-01T00:00:04.999Z", "2026-01-01T00:00:05.000Z"),
        (5_000, 0, "2026-01-01T00:00:05.001Z", "2026-01-01T00:00:10.000Z"),
        (5_000, 0, "2026-01-01T23:59:59.999Z", "2026-01-02T00:00:00.000Z"),
        (60_000, 0, "2026-01-01T10:17:42.123Z", "2026-01-01T10:18:00.000Z"),
        (60_000, 0, "2026-01-01T10:18:00.000Z", "2026-01-01T10:19:00.000Z"),
        (3_600_000, 0, "2026-03-08T06:59:00.000Z", "2026-03-08T07:00:00.000Z"),  # UTC: no DST
        # an anchor shifts the phase: every minute at :30
        (60_000, 30_000, "2026-01-01T10:17:42.000Z", "2026-01-01T10:18:30.000Z"),
        (60_000, 30_000, "2026-01-01T10:17:30.000Z", "2026-01-01T10:18:30.000Z"),
        (60_000, 30_000, "2026-01-01T10:17:29.999Z", "2026-01-01T10:17:30.000Z"),
        # an anchor in the future of `after` still yields the lattice before it
        (7_000, ms("2030-01-01T00:00:00Z"), "2030-01-01T00:00:00.000Z", "2030-01-01T00:00:07.000Z"),
        (7_000, ms("2030-01-01T00:00:00Z"), "2029-12-31T23:59:59.000Z", "2030-01-01T00:00:00.000Z"),
    ],
)
def test_interval_next_after(interval_ms, anchor_ms, after, expected):
    assert utc(IntervalTrigger(interval_ms, anchor_ms).next_after(ms(after))) == expected


@pytest.mark.parametrize(
    "interval_ms, anchor_ms, after, expected",
    [
        (1, 0, -1, 0),
        (10, 3, -100, -97),
        (10, 3, 2, 3),
        (10, 3, 3, 13),
        (10, -3, 0, 7),
    ],
)
def test_interval_integer_edges(interval_ms, anchor_ms, after, expected):
    assert IntervalTrigger(interval_ms, anchor_ms).next_after(after) == expected


@pytest.mark.parametrize("interval_ms", [0, -1, -5_000])
def test_interval_must_be_positive(interval_ms):
    with pytest.raises(ValueError):
        IntervalTrigger(interval_ms)


def test_interval_slots_from_an_odd_start():
    trig = IntervalTrigger(5_000)
    assert between(trig, "2026-01-01T00:00:03.217Z", "2026-01-01T00:00:20.000Z") == [
        "2026-01-01T00:00:05.000Z",
        "2026-01-01T00:00:10.000Z",
        "2026-01-01T00:00:15.000Z",
        "2026-01-01T00:00:20.000Z",  # until is inclusive
    ]


# --- once -----------------------------------------------------------------------------

AT = ms("2026-06-01T12:00:00Z")


@pytest.mark.parametrize(
    "after, expected",
    [
        (AT - 60_000, AT),
        (AT - 1, AT),
        (AT, None),  # the slot itself is not after itself
        (AT + 1, None),
    ],
)
def test_once(after, expected):
    assert OnceTrigger(AT).next_after(after) == expected


def test_once_slots_between():
    assert slots_between(OnceTrigger(AT), AT - 1, AT + 10**9) == [AT]
    assert slots_between(OnceTrigger(AT), AT - 10, AT - 1) == []


# --- cron: fields, alignment, timezones --------------------------------------------------


@pytest.mark.parametrize(
    "expr, tz, after, expected",
    [
        # 5 fields, aligned to :00 and :05 whatever the start
        ("*/5 * * * *", "UTC", "2026-01-01T10:02:17.500Z", "2026-01-01T10:05:00.000Z"),
        ("*/5 * * * *", "UTC", "2026-01-01T10:05:00.000Z", "2026-01-01T10:10:00.000Z"),
        ("*/5 * * * *", "UTC", "2026-01-01T10:04:59.999Z", "2026-01-01T10:05:00.000Z"),
        ("*/5 * * * *", "UTC", "2026-01-01T23:58:00.000Z", "2026-01-02T00:00:00.000Z"),
        ("0 0 1 1 *", "UTC", "2026-01-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z"),
        ("0 0 29 2 *", "UTC", "2026-01-01T00:00:00.000Z", "2028-02-29T00:00:00.000Z"),
        ("0 9 * * 1-5", "UTC", "2026-01-02T09:00:00.000Z", "2026-01-05T09:00:00.000Z"),  # Fri -> Mon
        # 6 fields, SECONDS FIRST
        ("*/20 * * * * *", "UTC", "2026-01-01T10:00:00.000Z", "2026-01-01T10:00:20.000Z"),
        ("*/20 * * * * *", "UTC", "2026-01-01T10:00:19.999Z", "2026-01-01T10:00:20.000Z"),
        ("*/20 * * * * *", "UTC", "2026-01-01T10:00:40.000Z", "2026-01-01T10:01:00.000Z"),
        ("30 0 12 * * *", "UTC", "2026-01-01T00:00:00.000Z", "2026-01-01T12:00:30.000Z"),
        ("15 */5 * * * *", "UTC", "2026-01-01T10:00:16.000Z", "2026-01-01T10:05:15.000Z"),
        # a timezone moves the slot: Lisbon is UTC+0 in winter, UTC+1 in summer
        ("0 9 * * *", "Europe/Lisbon", "2026-01-15T00:00:00.000Z", "2026-01-15T09:00:00.000Z"),
        ("0 9 * * *", "Europe/Lisbon", "2026-07-15T00:00:00.000Z", "2026-07-15T08:00:00.000Z"),
        # Kolkata is UTC+5:30 all year, so 09:00 local is 03:30Z
        ("0 9 * * *", "Asia/Kolkata", "2026-01-15T00:00:00.000Z", "2026-01-15T03:30:00.000Z"),
        ("0 9 * * *", "Asia/Kolkata", "2026-07-15T03:30:00.000Z", "2026-07-16T03:30:00.000Z"),
        # the local date, not the UTC date, decides: 01:00 Tokyo is 16:00Z the day before
        ("0 1 1 * *", "Asia/Tokyo", "2026-01-01T00:00:00.000Z", "2026-01-31T16:00:00.000Z"),
        ("0 9 * * *", "America/New_York", "2026-01-15T00:00:00.000Z", "2026-01-15T14:00:00.000Z"),
        ("0 9 * * *", "America/New_York", "2026-07-15T00:00:00.000Z", "2026-07-15T13:00:00.000Z"),
    ],
)
def test_cron_next_after(expr, tz, after, expected):
    assert utc(CronTrigger(expr, tz).next_after(ms(after))) == expected


@pytest.mark.parametrize(
    "expr, tz",
    [
        ("* * * *", "UTC"),  # 4 fields
        ("* * * * * * *", "UTC"),  # 7 fields (a year field) is not ours
        ("61 * * * *", "UTC"),
        ("not a cron", "UTC"),
        ("* * * * *", "Mars/Olympus_Mons"),
        ("* * * * *", ""),
    ],
)
def test_cron_rejects_bad_input(expr, tz):
    with pytest.raises(ValueError):
        CronTrigger(expr, tz)


def test_cron_that_never_fires_has_no_next_slot():
    trig = CronTrigger("0 0 30 2 *", "UTC")  # the 30th of February
    assert trig.next_after(ms("2026-01-01T00:00Z")) is None
    assert trig.next_after(ms("2027-01-01T00:00Z")) is None
    assert slots_between(trig, 0, ms("2030-01-01T00:00Z")) == []


def test_cron_every_five_minutes_slots():
    assert between(CronTrigger("*/5 * * * *", "UTC"), "2026-01-01T10:02Z", "2026-01-01T10:20Z") == [
        "2026-01-01T10:05:00.000Z",
        "2026-01-01T10:10:00.000Z",
        "2026-01-01T10:15:00.000Z",
        "2026-01-01T10:20:00.000Z",
    ]


# --- DST vectors ------------------------------------------------------------------------
# America/New_York 2026: spring forward Sun 8 March 02:00 EST -> 03:00 EDT (07:00Z);
#                        fall back     Sun 1 November 02:00 EDT -> 01:00 EST (06:00Z).
# Europe/Lisbon 2026:    spring forward Sun 29 March 01:00 WET -> 02:00 WEST (01:00Z);
#                        fall back     Sun 25 October 02:00 WEST -> 01:00 WET (01:00Z).

DST_VECTORS = [
    pytest.param(
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T00:00Z",
        "2026-03-10T00:00Z",
        ["2026-03-07T07:30:00.000Z", "2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"],
        id="ny-spring-0230-runs-once-at-0300-edt",
    ),
    pytest.param(
        "*/15 * * * *",
        "America/New_York",
        "2026-03-08T06:30Z",
        "2026-03-08T07:30Z",
        [
            "2026-03-08T06:45:00.000Z",  # 01:45 EST
            "2026-03-08T07:00:00.000Z",  # 02:00, 02:15, 02:30, 02:45 do not exist: one run at 03:00 EDT
            "2026-03-08T07:15:00.000Z",  # 03:15 EDT
            "2026-03-08T07:30:00.000Z",
        ],
        id="ny-spring-gap-slots-collapse",
    ),
    pytest.param(
        "0 * * * *",
        "America/New_York",
        "2026-03-08T05:30Z",
        "2026-03-08T08:30Z",
        ["2026-03-08T06:00:00.000Z", "2026-03-08T07:00:00.000Z", "2026-03-08T08:00:00.000Z"],
        id="ny-spring-hourly-02-and-03-are-one-run",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T00:00Z",
        "2026-11-03T00:00Z",
        ["2026-10-31T05:30:00.000Z", "2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"],
        id="ny-fall-0130-runs-once-at-first-occurrence",
    ),
    pytest.param(
        "*/30 * * * *",
        "America/New_York",
        "2026-11-01T04:45Z",
        "2026-11-01T07:30Z",
        [
            "2026-11-01T05:00:00.000Z",  # 01:00 EDT
            "2026-11-01T05:30:00.000Z",  # 01:30 EDT
            # 01:00 and 01:30 EST (06:00Z, 06:30Z) were already run in the first pass
            "2026-11-01T07:00:00.000Z",  # 02:00 EST
            "2026-11-01T07:30:00.000Z",
        ],
        id="ny-fall-repeated-hour-runs-once",
    ),
    pytest.param(
        "30 1 * * *",
        "Europe/Lisbon",
        "2026-03-28T00:00Z",
        "2026-03-31T00:00Z",
        ["2026-03-28T01:30:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"],
        id="lisbon-spring-0130-runs-at-0200-west",
    ),
    pytest.param(
        "30 1 * * *",
        "Europe/Lisbon",
        "2026-10-24T00:00Z",
        "2026-10-27T00:00Z",
        ["2026-10-24T00:30:00.000Z", "2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"],
        id="lisbon-fall-0130-first-occurrence-only",
    ),
    pytest.param(
        "0 9 * * *",
        "Europe/Lisbon",
        "2026-03-28T00:00Z",
        "2026-03-31T00:00Z",
        ["2026-03-28T09:00:00.000Z", "2026-03-29T08:00:00.000Z", "2026-03-30T08:00:00.000Z"],
        id="lisbon-spring-0900-follows-the-offset",
    ),
    pytest.param(
        "0,30 * * * *",
        "Europe/Lisbon",
        "2026-10-24T23:45Z",
        "2026-10-25T02:00Z",
        [
            "2026-10-25T00:00:00.000Z",  # 01:00 WEST
            "2026-10-25T00:30:00.000Z",  # 01:30 WEST; 01:00 and 01:30 WET are not run again
            "2026-10-25T02:00:00.000Z",  # 02:00 WET
        ],
        id="lisbon-fall-repeated-hour-runs-once",
    ),
    pytest.param(
        "*/20 * * * * *",
        "America/New_York",
        "2026-03-08T06:59:20Z",
        "2026-03-08T07:00:20Z",
        ["2026-03-08T06:59:40.000Z", "2026-03-08T07:00:00.000Z", "2026-03-08T07:00:20.000Z"],
        id="ny-spring-six-fields-a-whole-hour-of-seconds-collapses",
    ),
]


@pytest.mark.parametrize("expr, tz, after, until, expected", DST_VECTORS)
def test_dst_vectors(expr, tz, after, until, expected):
    assert between(CronTrigger(expr, tz), after, until) == expected


@pytest.mark.parametrize(
    "expr, tz, after, expected",
    [
        # after inside the second pass of the repeated hour: the first pass already ran it all
        ("*/30 * * * *", "America/New_York", "2026-11-01T06:10:00.000Z", "2026-11-01T07:00:00.000Z"),
        ("*/30 * * * *", "America/New_York", "2026-11-01T06:00:00.000Z", "2026-11-01T07:00:00.000Z"),
        ("*/30 * * * *", "America/New_York", "2026-11-01T06:59:59.999Z", "2026-11-01T07:00:00.000Z"),
        ("* * * * * *", "America/New_York", "2026-11-01T06:10:00.000Z", "2026-11-01T07:00:00.000Z"),
        ("30 1 * * *", "America/New_York", "2026-11-01T06:29:00.000Z", "2026-11-02T06:30:00.000Z"),
        ("30 1 * * *", "America/New_York", "2026-11-01T05:29:59.999Z", "2026-11-01T05:30:00.000Z"),
        ("30 1 * * *", "America/New_York", "2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"),
        # after in the first pass, between slots
        ("*/30 * * * *", "America/New_York", "2026-11-01T05:10:00.000Z", "2026-11-01T05:30:00.000Z"),
        ("*/30 * * * *", "America/New_York", "2026-11-01T05:59:59.999Z", "2026-11-01T07:00:00.000Z"),
        # after just before, at and after the spring transition instant
        ("30 2 * * *", "America/New_York", "2026-03-08T06:59:59.999Z", "2026-03-08T07:00:00.000Z"),
        ("30 2 * * *", "America/New_York", "2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"),
        ("*/15 * * * *", "America/New_York", "2026-03-08T06:59:00.000Z", "2026-03-08T07:00:00.000Z"),
        ("*/15 * * * *", "America/New_York", "2026-03-08T07:00:00.000Z", "2026-03-08T07:15:00.000Z"),
        ("45 1 * * *", "Europe/Lisbon", "2026-10-25T00:50:00.000Z", "2026-10-26T01:45:00.000Z"),
        ("45 1 * * *", "Europe/Lisbon", "2026-10-25T01:50:00.000Z", "2026-10-26T01:45:00.000Z"),
    ],
)
def test_dst_next_after_from_awkward_points(expr, tz, after, expected):
    assert utc(CronTrigger(expr, tz).next_after(ms(after))) == expected


# --- trigger_for and slots_between --------------------------------------------------------


@pytest.mark.parametrize(
    "schedule, after, expected",
    [
        (Schedule(ScheduleKind.CRON, cron="*/5 * * * *"), "2026-01-01T10:02Z", "2026-01-01T10:05:00.000Z"),
        (
            Schedule(ScheduleKind.CRON, cron="0 9 * * *", timezone="Asia/Kolkata"),
            "2026-01-01T00:00Z",
            "2026-01-01T03:30:00.000Z",
        ),
        (Schedule(ScheduleKind.INTERVAL, interval_ms=5_000), "2026-01-01T10:00:03Z", "2026-01-01T10:00:05.000Z"),
        (Schedule(ScheduleKind.ONCE, at_ms=ms("2026-06-01T12:00Z")), "2026-01-01T00:00Z", "2026-06-01T12:00:00.000Z"),
    ],
)
def test_trigger_for(schedule, after, expected):
    assert utc(trigger_for(schedule).next_after(ms(after))) == expected


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule(ScheduleKind.CRON),
        Schedule(ScheduleKind.INTERVAL),
        Schedule(ScheduleKind.ONCE),
    ],
)
def test_trigger_for_incomplete_schedule(schedule):
    with pytest.raises(ValueError):
        trigger_for(schedule)


@pytest.mark.parametrize(
    "after, until, limit, expected_count",
    [
        (0, 60_000, None, 12),
        (0, 60_000, 3, 3),
        (0, 60_000, 0, 0),
        (0, 4_999, None, 0),
        (0, 5_000, None, 1),  # until is inclusive
        (5_000, 5_000, None, 0),  # after is exclusive
        (10_000, 0, None, 0),  # an empty range
    ],
)
def test_slots_between_bounds(after, until, limit, expected_count):
    slots = slots_between(IntervalTrigger(5_000), after, until, limit)
    assert len(slots) == expected_count
    assert all(after < s <= until for s in slots)


def test_slots_between_limit_keeps_the_earliest():
    assert slots_between(IntervalTrigger(5_000), 0, 60_000, 2) == [5_000, 10_000]


# --- properties -----------------------------------------------------------------------------

PROPERTY_TRIGGERS = [
    CronTrigger("*/15 * * * *", "America/New_York"),
    CronTrigger("30 1 * * *", "America/New_York"),
    CronTrigger("30 2 * * *", "America/New_York"),
    CronTrigger("0,30 * * * *", "Europe/Lisbon"),
    CronTrigger("*/20 * * * * *", "Europe/Lisbon"),
    CronTrigger("0 9 * * 1-5", "Asia/Kolkata"),
    CronTrigger("0 */2 * * *", "Australia/Lord_Howe"),  # a 30-minute DST shift
    IntervalTrigger(5_000),
    IntervalTrigger(60_000, 30_000),
]

# 2026 around both New York and Lisbon transitions, where the rules bite, and anywhere else.
_DST_WINDOWS = [ms("2026-03-08T05:00Z"), ms("2026-03-29T00:00Z"), ms("2026-10-25T00:00Z"), ms("2026-11-01T04:00Z")]
afters = st.one_of(
    st.builds(lambda base, d: base + d, st.sampled_from(_DST_WINDOWS), st.integers(0, 4 * 3_600_000)),
    st.integers(ms("2000-01-01T00:00Z"), ms("2060-01-01T00:00Z")),
)


@settings(max_examples=150, deadline=None)
@given(trigger=st.sampled_from(PROPERTY_TRIGGERS), after=afters)
def test_next_after_properties(trigger, after):
    slots = slots_between(trigger, after, after + 4 * 86_400_000, limit=12)
    assert slots, "each of these triggers fires at least once in any four days"
    assert slots[0] == trigger.next_after(after) and slots[0] > after
    assert all(a < b for a, b in itertools.pairwise(slots))
    for slot in slots:
        assert trigger.next_after(slot - 1) == slot
