"""Calendars: holidays, business windows (across DST in two zones), ranges, .ics, the search, parsing.

Every instant is written as UTC text, worked out by hand from the zone's rules.
America/New_York 2026: spring forward Sun 8 March 02:00 EST -> 03:00 EDT (07:00Z);
                       fall back     Sun 1 November 02:00 EDT -> 01:00 EST (06:00Z).
Europe/Lisbon 2026:    spring forward Sun 29 March 01:00 WET -> 02:00 WEST (01:00Z);
                       fall back     Sun 25 October 02:00 WEST -> 01:00 WET (01:00Z).
"""

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.rules.calendars import allowed_by_all, first_exclusion, next_allowed, next_instant_all_allow
from shardcron.rules.triggers import IntervalTrigger, OnceTrigger
from shardcron.spec.bounds import DAY_MS
from shardcron.spec.calendar import Calendar, CalendarError, Window
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.cron import CronTrigger
from tests.support.instants import CountingTrigger, ms


def utc(slot: int | None) -> str | None:
    if slot is None:
        return None
    return datetime.fromtimestamp(slot / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


CALENDARS = {
    "office": parse_calendar(
        "office",
        {
            "timezone": "Europe/Lisbon",
            "windows": {"mon-fri": "09:00-18:00", "sat": "10:00-12:00"},
            "exclude_dates": ["2026-12-25"],
            "exclude_ranges": [{"from": "2026-11-24T10:00:00+00:00", "to": "2026-11-24T12:00:00Z"}],
        },
    ),
    "ny-holidays": parse_calendar(
        "ny-holidays", {"timezone": "America/New_York", "exclude_dates": ["2026-07-04", "2026-03-08"]}
    ),
    "pt-holidays": parse_calendar("pt-holidays", {"timezone": "Europe/Lisbon", "exclude_dates": ["2026-10-25"]}),
    "night": parse_calendar("night", {"windows": {"fri": "22:00-02:00"}}),
    # Windows on DST days (the module docstring's rules)
    "ny-sun-01-03": parse_calendar("ny-sun-01-03", {"timezone": "America/New_York", "windows": {"sun": "01:00-03:00"}}),
    "ny-sun-0200-0230": parse_calendar(
        "ny-sun-0200-0230", {"timezone": "America/New_York", "windows": {"sun": "02:00-02:30"}}
    ),
    "ny-sun-01-02": parse_calendar("ny-sun-01-02", {"timezone": "America/New_York", "windows": {"sun": "01:00-02:00"}}),
    "ny-sun-0130-03": parse_calendar(
        "ny-sun-0130-03", {"timezone": "America/New_York", "windows": {"sun": "01:30-03:00"}}
    ),
    "lis-sun-01-03": parse_calendar("lis-sun-01-03", {"timezone": "Europe/Lisbon", "windows": {"sun": "01:00-03:00"}}),
    "lis-sun-01-02": parse_calendar("lis-sun-01-02", {"timezone": "Europe/Lisbon", "windows": {"sun": "01:00-02:00"}}),
    "lis-sun-0130-0230": parse_calendar(
        "lis-sun-0130-0230", {"timezone": "Europe/Lisbon", "windows": {"sun": "01:30-02:30"}}
    ),
}

OFFICE_MON = "outside business hours Mon 09:00-18:00 Europe/Lisbon (calendar 'office')"


# --- allows / why_excluded ------------------------------------------------------------------


@pytest.mark.parametrize(
    "calendar, at, reason",
    [
        # business hours, Lisbon: UTC+0 in winter, UTC+1 in summer
        pytest.param("office", "2026-01-05T09:00Z", None, id="mon-opens-0900-wet"),
        pytest.param("office", "2026-01-05T08:59:59.999Z", OFFICE_MON, id="mon-before-opening"),
        pytest.param("office", "2026-01-05T17:59:59.999Z", None, id="mon-last-ms"),
        pytest.param("office", "2026-01-05T18:00Z", OFFICE_MON, id="mon-end-exclusive"),
        pytest.param("office", "2026-07-06T08:00Z", None, id="summer-0900-west-is-0800z"),
        pytest.param("office", "2026-07-06T07:59:59.999Z", OFFICE_MON, id="summer-before-opening"),
        pytest.param("office", "2026-07-06T17:00Z", OFFICE_MON, id="summer-1800-west-is-1700z"),
        pytest.param("office", "2026-01-10T10:30Z", None, id="sat-window"),
        pytest.param(
            "office",
            "2026-01-10T12:00Z",
            "outside business hours Sat 10:00-12:00 Europe/Lisbon (calendar 'office')",
            id="sat-after",
        ),
        pytest.param(
            "office",
            "2026-01-11T10:30Z",
            "outside business hours Sun (no window) Europe/Lisbon (calendar 'office')",
            id="sun-closed",
        ),
        # holidays beat hours; ranges beat holidays
        pytest.param("office", "2026-12-25T10:00Z", "holiday 2026-12-25 (calendar 'office')", id="holiday-in-hours"),
        pytest.param("office", "2026-12-25T20:00Z", "holiday 2026-12-25 (calendar 'office')", id="holiday-after-hours"),
        pytest.param(
            "office",
            "2026-11-24T10:00Z",
            "excluded range 2026-11-24T10:00:00Z..2026-11-24T12:00:00Z (calendar 'office')",
            id="range-start",
        ),
        pytest.param(
            "office",
            "2026-11-24T11:59:59.999Z",
            "excluded range 2026-11-24T10:00:00Z..2026-11-24T12:00:00Z (calendar 'office')",
            id="range-last-ms",
        ),
        pytest.param("office", "2026-11-24T12:00Z", None, id="range-end-exclusive"),
        pytest.param("office", "2026-11-24T09:59:59.999Z", None, id="range-before"),
        # a holiday is a LOCAL day: 4 July in New York is 04:00Z to 04:00Z
        pytest.param("ny-holidays", "2026-07-04T03:59:59.999Z", None, id="ny-eve-local"),
        pytest.param(
            "ny-holidays",
            "2026-07-04T04:00Z",
            "holiday 2026-07-04 (calendar 'ny-holidays')",
            id="ny-holiday-starts-at-local-midnight",
        ),
        pytest.param(
            "ny-holidays",
            "2026-07-05T03:59:59.999Z",
            "holiday 2026-07-04 (calendar 'ny-holidays')",
            id="ny-holiday-last-ms",
        ),
        pytest.param("ny-holidays", "2026-07-05T04:00Z", None, id="ny-holiday-over"),
        # a holiday on a DST day lasts 23 (New York, spring) or 25 (Lisbon, autumn) real hours
        pytest.param("ny-holidays", "2026-03-08T04:59:59.999Z", None, id="ny-spring-holiday-before"),
        pytest.param(
            "ny-holidays",
            "2026-03-08T05:00Z",
            "holiday 2026-03-08 (calendar 'ny-holidays')",
            id="ny-spring-holiday-0000-est",
        ),
        pytest.param(
            "ny-holidays",
            "2026-03-09T03:59:59.999Z",
            "holiday 2026-03-08 (calendar 'ny-holidays')",
            id="ny-spring-holiday-2359-edt",
        ),
        pytest.param("ny-holidays", "2026-03-09T04:00Z", None, id="ny-spring-holiday-23h-later"),
        pytest.param("pt-holidays", "2026-10-24T22:59:59.999Z", None, id="lis-fall-holiday-before"),
        pytest.param(
            "pt-holidays",
            "2026-10-24T23:00Z",
            "holiday 2026-10-25 (calendar 'pt-holidays')",
            id="lis-fall-holiday-0000-west",
        ),
        pytest.param(
            "pt-holidays",
            "2026-10-25T23:59:59.999Z",
            "holiday 2026-10-25 (calendar 'pt-holidays')",
            id="lis-fall-holiday-2359-wet",
        ),
        pytest.param("pt-holidays", "2026-10-26T00:00Z", None, id="lis-fall-holiday-25h-later"),
        # a window crossing midnight belongs to the day it starts on
        pytest.param("night", "2026-01-09T22:00Z", None, id="night-fri-2200"),
        pytest.param("night", "2026-01-10T01:59:59.999Z", None, id="night-sat-0159"),
        pytest.param(
            "night",
            "2026-01-10T02:00Z",
            "outside business hours Sat 00:00-02:00 UTC (calendar 'night')",
            id="night-sat-0200",
        ),
        pytest.param(
            "night",
            "2026-01-09T21:59:59.999Z",
            "outside business hours Fri 22:00-24:00 UTC (calendar 'night')",
            id="night-fri-before",
        ),
        pytest.param(
            "night",
            "2026-01-08T23:00Z",
            "outside business hours Thu (no window) UTC (calendar 'night')",
            id="night-thu",
        ),
    ],
)
def test_why_excluded(calendar, at, reason):
    cal = CALENDARS[calendar]
    assert cal.why_excluded(ms(at)) == reason
    assert cal.allows(ms(at)) is (reason is None)


# Windows on DST days, in two zones: (calendar, instant, allowed)
DST_WINDOW_VECTORS = [
    # New York spring, window 01:00-03:00: 02:00-03:00 does not exist, so one real hour
    ("ny-sun-01-03", "2026-03-08T05:59:59.999Z", False),  # 00:59:59 EST
    ("ny-sun-01-03", "2026-03-08T06:00Z", True),  # 01:00 EST
    ("ny-sun-01-03", "2026-03-08T06:59:59.999Z", True),  # 01:59:59.999 EST
    ("ny-sun-01-03", "2026-03-08T07:00Z", False),  # 03:00 EDT: the window's end
    ("ny-sun-01-03", "2026-03-15T05:00Z", True),  # a week later, 01:00 EDT
    ("ny-sun-01-03", "2026-03-15T06:59:59.999Z", True),  # 02:59 EDT: two hours again
    ("ny-sun-01-03", "2026-03-15T07:00Z", False),
    # New York spring, a window wholly inside the gap is empty that day
    ("ny-sun-0200-0230", "2026-03-08T06:59:59.999Z", False),
    ("ny-sun-0200-0230", "2026-03-08T07:00Z", False),
    ("ny-sun-0200-0230", "2026-03-15T06:00Z", True),  # 02:00 EDT a week later
    # Lisbon spring, window 01:00-03:00: 01:00-02:00 does not exist; it opens at the transition
    ("lis-sun-01-03", "2026-03-29T00:59:59.999Z", False),  # 00:59 WET
    ("lis-sun-01-03", "2026-03-29T01:00Z", True),  # 02:00 WEST
    ("lis-sun-01-03", "2026-03-29T01:59:59.999Z", True),
    ("lis-sun-01-03", "2026-03-29T02:00Z", False),  # 03:00 WEST
    ("lis-sun-01-03", "2026-03-22T01:00Z", True),  # the week before, WET = UTC
    ("lis-sun-01-03", "2026-03-22T02:59:59.999Z", True),
    ("lis-sun-01-03", "2026-03-22T03:00Z", False),
    # New York fall, window 01:00-02:00: both passes of the repeated hour, two real hours
    ("ny-sun-01-02", "2026-11-01T04:59:59.999Z", False),  # 00:59 EDT
    ("ny-sun-01-02", "2026-11-01T05:00Z", True),  # 01:00 EDT
    ("ny-sun-01-02", "2026-11-01T05:59:59.999Z", True),
    ("ny-sun-01-02", "2026-11-01T06:00Z", True),  # 01:00 EST, the second pass
    ("ny-sun-01-02", "2026-11-01T06:59:59.999Z", True),
    ("ny-sun-01-02", "2026-11-01T07:00Z", False),  # 02:00 EST
    # New York fall, window 01:30-03:00: closes while the clock reads 01:00-01:30 EST again
    ("ny-sun-0130-03", "2026-11-01T05:29:59.999Z", False),
    ("ny-sun-0130-03", "2026-11-01T05:30Z", True),  # 01:30 EDT
    ("ny-sun-0130-03", "2026-11-01T05:59:59.999Z", True),
    ("ny-sun-0130-03", "2026-11-01T06:00Z", False),  # 01:00 EST
    ("ny-sun-0130-03", "2026-11-01T06:29:59.999Z", False),
    ("ny-sun-0130-03", "2026-11-01T06:30Z", True),  # 01:30 EST
    ("ny-sun-0130-03", "2026-11-01T07:59:59.999Z", True),  # 02:59 EST
    ("ny-sun-0130-03", "2026-11-01T08:00Z", False),  # 03:00 EST
    # Lisbon fall, window 01:00-02:00: 01:00 WEST (00:00Z) to 02:00 WET (02:00Z)
    ("lis-sun-01-02", "2026-10-24T23:59:59.999Z", False),
    ("lis-sun-01-02", "2026-10-25T00:00Z", True),
    ("lis-sun-01-02", "2026-10-25T00:59:59.999Z", True),
    ("lis-sun-01-02", "2026-10-25T01:00Z", True),  # 01:00 WET, the second pass
    ("lis-sun-01-02", "2026-10-25T01:59:59.999Z", True),
    ("lis-sun-01-02", "2026-10-25T02:00Z", False),
    # Lisbon fall, window 01:30-02:30
    ("lis-sun-0130-0230", "2026-10-25T00:29:59.999Z", False),
    ("lis-sun-0130-0230", "2026-10-25T00:30Z", True),  # 01:30 WEST
    ("lis-sun-0130-0230", "2026-10-25T01:00Z", False),  # 01:00 WET
    ("lis-sun-0130-0230", "2026-10-25T01:29:59.999Z", False),
    ("lis-sun-0130-0230", "2026-10-25T01:30Z", True),  # 01:30 WET
    ("lis-sun-0130-0230", "2026-10-25T02:29:59.999Z", True),
    ("lis-sun-0130-0230", "2026-10-25T02:30Z", False),  # 02:30 WET
]


@pytest.mark.parametrize("calendar, at, allowed", [pytest.param(*v, id=f"{v[0]}@{v[1]}") for v in DST_WINDOW_VECTORS])
def test_dst_windows(calendar, at, allowed):
    assert CALENDARS[calendar].allows(ms(at)) is allowed


# --- next_allowed_instant -----------------------------------------------------------------


@pytest.mark.parametrize(
    "calendar, start, expected",
    [
        pytest.param("ny-sun-01-03", "2026-03-08T00:00Z", "2026-03-08T06:00:00.000Z", id="ny-spring-opens-0100-est"),
        pytest.param("ny-sun-01-03", "2026-03-08T06:30Z", "2026-03-08T06:30:00.000Z", id="inside-is-itself"),
        pytest.param("ny-sun-01-03", "2026-03-08T07:00Z", "2026-03-15T05:00:00.000Z", id="ny-spring-next-week-edt"),
        pytest.param("ny-sun-0200-0230", "2026-03-08T00:00Z", "2026-03-15T06:00:00.000Z", id="ny-gap-window-empty"),
        pytest.param(
            "lis-sun-01-03", "2026-03-28T23:00Z", "2026-03-29T01:00:00.000Z", id="lis-spring-opens-at-transition"
        ),
        pytest.param("lis-sun-01-03", "2026-03-29T00:59:59.999Z", "2026-03-29T01:00:00.000Z", id="lis-spring-last-ms"),
        pytest.param("ny-sun-0130-03", "2026-11-01T04:00Z", "2026-11-01T05:30:00.000Z", id="ny-fall-first-pass"),
        pytest.param("ny-sun-0130-03", "2026-11-01T06:00Z", "2026-11-01T06:30:00.000Z", id="ny-fall-second-pass"),
        pytest.param("ny-sun-0130-03", "2026-11-01T08:00Z", "2026-11-08T06:30:00.000Z", id="ny-fall-next-week-est"),
        pytest.param("lis-sun-0130-0230", "2026-10-24T12:00Z", "2026-10-25T00:30:00.000Z", id="lis-fall-first-pass"),
        pytest.param("lis-sun-0130-0230", "2026-10-25T01:00Z", "2026-10-25T01:30:00.000Z", id="lis-fall-second-pass"),
        pytest.param("office", "2026-01-09T18:00Z", "2026-01-10T10:00:00.000Z", id="fri-evening-to-sat"),
        pytest.param("office", "2026-01-10T12:00Z", "2026-01-12T09:00:00.000Z", id="sat-noon-to-mon"),
        pytest.param("office", "2026-11-24T10:00Z", "2026-11-24T12:00:00.000Z", id="range-to-its-end"),
        pytest.param("office", "2026-12-24T18:00Z", "2026-12-26T10:00:00.000Z", id="over-christmas-to-sat"),
        pytest.param("office", "2026-07-03T17:00Z", "2026-07-04T09:00:00.000Z", id="summer-fri-to-sat-west"),
        pytest.param("ny-holidays", "2026-03-08T05:00Z", "2026-03-09T04:00:00.000Z", id="ny-23h-holiday"),
        pytest.param("pt-holidays", "2026-10-25T12:00Z", "2026-10-26T00:00:00.000Z", id="lis-25h-holiday"),
        pytest.param("night", "2026-01-10T02:00Z", "2026-01-16T22:00:00.000Z", id="night-next-fri"),
    ],
)
def test_next_allowed_instant(calendar, start, expected):
    assert utc(CALENDARS[calendar].next_allowed_instant(ms(start))) == expected


def test_range_ending_on_a_holiday_moves_on_to_the_next_day():
    cal = parse_calendar(
        "c",
        {"exclude_dates": ["2026-05-02"], "exclude_ranges": [{"from": "2026-05-01T00:00Z", "to": "2026-05-02T06:00Z"}]},
    )
    assert utc(cal.next_allowed_instant(ms("2026-05-01T10:00Z"))) == "2026-05-03T00:00:00.000Z"


@pytest.mark.parametrize(
    "mapping",
    [
        pytest.param(
            {"exclude_ranges": [{"from": "2026-01-01T00:00Z", "to": "2036-01-01T00:00Z"}]}, id="ten-year-range"
        ),
        pytest.param(
            {
                "windows": {"mon": "09:00-10:00"},
                "exclude_dates": [str(date(2026, 1, 1) + timedelta(days=k)) for k in range(6 * 366)],
            },
            id="every-day-a-holiday",
        ),
    ],
)
def test_nothing_allowed_within_the_horizon_is_none(mapping):
    assert parse_calendar("never", mapping).next_allowed_instant(ms("2026-01-01T00:00Z")) is None


def test_until_bounds_the_search():
    cal = CALENDARS["office"]
    assert cal.next_allowed_instant(ms("2026-01-10T12:00Z"), until_ms=ms("2026-01-12T08:59:59.999Z")) is None
    assert cal.next_allowed_instant(ms("2026-01-10T12:00Z"), until_ms=ms("2026-01-12T09:00Z")) == ms(
        "2026-01-12T09:00Z"
    )


# Property: the answer is allowed, and no minute boundary before it is (every opening of
# these calendars falls on a whole minute: window starts, transitions, range ends).
PROPERTY_CALENDARS = sorted(CALENDARS)
_AROUND = [
    ms("2026-03-07T12:00Z"),
    ms("2026-03-28T12:00Z"),
    ms("2026-10-24T12:00Z"),
    ms("2026-10-31T12:00Z"),
    ms("2026-12-23T00:00Z"),
    ms("2026-11-23T00:00Z"),
]
starts = st.one_of(
    st.builds(lambda base, d: base + d, st.sampled_from(_AROUND), st.integers(0, 2 * DAY_MS)),
    st.integers(ms("2020-01-01T00:00Z"), ms("2040-01-01T00:00Z")),
)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(PROPERTY_CALENDARS), start=starts)
def test_next_allowed_instant_is_the_first(name, start):
    cal = CALENDARS[name]
    found = cal.next_allowed_instant(start)
    assert found is not None and found >= start and cal.allows(found)
    if found > start:
        assert not cal.allows(found - 1)
        assert not cal.allows(start)
        minute = -(-start // 60_000) * 60_000
        for t in range(minute, found, 60_000):
            assert not cal.allows(t), utc(t)


# --- several calendars, and next_allowed with a trigger --------------------------------------


def test_allowed_by_all_and_first_exclusion_in_order():
    cals = [CALENDARS["pt-holidays"], CALENDARS["office"]]
    at = ms("2026-10-25T10:00Z")  # a Sunday and a holiday: the first calendar names it
    assert not allowed_by_all(cals, at)
    assert first_exclusion(cals, at) == "holiday 2026-10-25 (calendar 'pt-holidays')"
    assert first_exclusion(cals[::-1], at) == "outside business hours Sun (no window) Europe/Lisbon (calendar 'office')"
    assert allowed_by_all(cals, ms("2026-10-26T10:00Z")) and first_exclusion(cals, ms("2026-10-26T10:00Z")) is None
    assert allowed_by_all([], 0)


@pytest.mark.parametrize(
    "trigger, calendars, after, slot, skipped, reason, max_calls",
    [
        pytest.param(
            IntervalTrigger(1_000),
            ["office"],
            "2026-01-05T17:59:59.999Z",
            "2026-01-06T09:00:00.000Z",
            "2026-01-05T18:00:00.000Z",
            OFFICE_MON,
            2,
            id="every-second-jumps-15-hours",
        ),
        pytest.param(
            IntervalTrigger(1_000),
            ["office"],
            "2026-01-05T12:00Z",
            "2026-01-05T12:00:01.000Z",
            None,
            None,
            1,
            id="allowed-at-once",
        ),
        pytest.param(
            IntervalTrigger(1_000),
            ["office"],
            "2026-12-24T17:59:59.999Z",
            "2026-12-26T10:00:00.000Z",
            "2026-12-24T18:00:00.000Z",
            "outside business hours Thu 09:00-18:00 Europe/Lisbon (calendar 'office')",
            2,
            id="over-a-holiday-the-first-reason-is-kept",
        ),
        pytest.param(
            CronTrigger("0 * * * *", "Europe/Lisbon"),
            ["office"],
            "2026-01-05T18:30Z",
            "2026-01-06T09:00:00.000Z",
            "2026-01-05T19:00:00.000Z",
            OFFICE_MON,
            2,
            id="hourly-cron",
        ),
        pytest.param(
            CronTrigger("0 9 * * *", "UTC"),
            ["ny-holidays", "office"],
            "2026-07-03T10:00Z",
            "2026-07-06T09:00:00.000Z",
            "2026-07-04T09:00:00.000Z",
            "holiday 2026-07-04 (calendar 'ny-holidays')",
            4,
            id="two-calendars-daily",
        ),
        pytest.param(
            IntervalTrigger(60_000),
            ["ny-sun-0130-03"],
            "2026-11-01T05:59:30Z",
            "2026-11-01T06:30:00.000Z",
            "2026-11-01T06:00:00.000Z",
            "outside business hours Sun 01:30-03:00 America/New_York (calendar 'ny-sun-0130-03')",
            2,
            id="ny-fall-reopens-in-second-pass",
        ),
        pytest.param(
            IntervalTrigger(60_000),
            ["lis-sun-01-03"],
            "2026-03-29T00:30Z",
            "2026-03-29T01:00:00.000Z",
            "2026-03-29T00:31:00.000Z",
            "outside business hours Sun 01:00-03:00 Europe/Lisbon (calendar 'lis-sun-01-03')",
            2,
            id="lis-spring-opens-at-transition",
        ),
        pytest.param(
            OnceTrigger(ms("2026-12-25T10:00Z")),
            ["office"],
            "2026-12-01T00:00Z",
            None,
            "2026-12-25T10:00:00.000Z",
            "holiday 2026-12-25 (calendar 'office')",
            2,
            id="once-on-a-holiday-never",
        ),
    ],
)
def test_next_allowed(trigger, calendars, after, slot, skipped, reason, max_calls):
    counting = CountingTrigger(trigger)
    got = next_allowed(counting, [CALENDARS[c] for c in calendars], ms(after))
    assert (utc(got.slot_ms), utc(got.first_skipped_ms), got.skip_reason) == (slot, skipped, reason)
    assert counting.calls <= max_calls


def test_disjoint_calendars_end_at_the_horizon():
    mondays = parse_calendar("mondays", {"windows": {"mon": "00:00-24:00"}})
    tuesdays = parse_calendar("tuesdays", {"windows": {"tue": "00:00-24:00"}})
    got = next_allowed(IntervalTrigger(1_000), [mondays, tuesdays], ms("2026-01-05T00:00Z"))
    assert got.slot_ms is None and got.examined == 1
    assert got.skip_reason == "outside business hours Mon (no window) UTC (calendar 'tuesdays')"
    assert next_instant_all_allow([mondays, tuesdays], 0, ms("2027-01-01T00:00Z")) is None


def test_limit_bounds_the_candidates():
    # A one-minute daily window that the trigger's slots (every odd minute, at :30) never hit.
    cal = parse_calendar("narrow", {"windows": {"*": "09:00-09:01"}})
    trigger = CountingTrigger(IntervalTrigger(120_000, 90_000))
    got = next_allowed(trigger, [cal], ms("2026-01-01T00:00Z"), limit=5)
    assert got.slot_ms is None and got.examined == 5 and trigger.calls == 5
    assert got.first_skipped_ms == ms("2026-01-01T00:01:30Z")


def test_no_slot_after_the_horizon():
    got = next_allowed(IntervalTrigger(1_000), [CALENDARS["office"]], ms("2026-01-10T12:00Z"), horizon_ms=DAY_MS)
    assert got.slot_ms is None  # Monday 09:00 is 45 hours away


# --- .ics --------------------------------------------------------------------------------

ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//shardcron tests//EN
BEGIN:VEVENT
UID:christmas
SUMMARY:Natal
DTSTART;VALUE=DATE:20261225
DTEND;VALUE=DATE:20261226
END:VEVENT
BEGIN:VEVENT
UID:new-year
SUMMARY:Ano Novo
DTSTART;VALUE=DATE:20270101
END:VEVENT
BEGIN:VEVENT
UID:carnival
SUMMARY:Carnaval
DTSTART;VALUE=DATE:20260216
DTEND;VALUE=DATE:20260218
END:VEVENT
BEGIN:VEVENT
UID:two-days
DTSTART;VALUE=DATE:20260610
DURATION:P2D
END:VEVENT
BEGIN:VEVENT
UID:maintenance
SUMMARY:DB maintenance
DTSTART;TZID=Europe/Lisbon:20260714T100000
DTEND;TZID=Europe/Lisbon:20260714T120000
END:VEVENT
BEGIN:VEVENT
UID:utc-half-hour
DTSTART:20260715T100000Z
DURATION:PT30M
END:VEVENT
BEGIN:VEVENT
UID:floating
DTSTART:20260120T100000
DTEND:20260120T110000
END:VEVENT
BEGIN:VEVENT
UID:cancelled
STATUS:CANCELLED
DTSTART;VALUE=DATE:20260301
END:VEVENT
END:VCALENDAR
"""


def test_ics_holidays_and_ranges():
    cal = parse_calendar("pt-holidays", {"timezone": "Europe/Lisbon", "ics": ICS, "exclude_dates": ["2026-06-13"]})
    assert cal.excluded_dates == {
        date(2026, 12, 25),
        date(2027, 1, 1),
        date(2026, 2, 16),
        date(2026, 2, 17),
        date(2026, 6, 10),
        date(2026, 6, 11),
        date(2026, 6, 13),
    }
    assert [(utc(a), utc(b)) for a, b in cal.excluded_ranges] == [
        ("2026-01-20T10:00:00.000Z", "2026-01-20T11:00:00.000Z"),  # floating: Lisbon wall clock, WET
        ("2026-07-14T09:00:00.000Z", "2026-07-14T11:00:00.000Z"),  # 10:00-12:00 WEST
        ("2026-07-15T10:00:00.000Z", "2026-07-15T10:30:00.000Z"),
    ]


@pytest.mark.parametrize(
    "at, reason",
    [
        pytest.param("2026-12-25T10:00Z", "holiday 2026-12-25 (calendar 'pt-holidays')", id="christmas"),
        pytest.param("2026-12-26T00:00Z", None, id="dtend-exclusive"),
        pytest.param("2026-12-31T23:59:59.999Z", None, id="new-year-eve"),
        pytest.param("2027-01-01T23:59:59.999Z", "holiday 2027-01-01 (calendar 'pt-holidays')", id="no-dtend-one-day"),
        pytest.param("2026-02-17T12:00Z", "holiday 2026-02-17 (calendar 'pt-holidays')", id="multi-day"),
        pytest.param("2026-02-18T00:00Z", None, id="multi-day-dtend-exclusive"),
        pytest.param("2026-03-01T12:00Z", None, id="cancelled-ignored"),
        pytest.param(
            "2026-07-14T09:00Z",
            "excluded range 2026-07-14T09:00:00Z..2026-07-14T11:00:00Z (calendar 'pt-holidays')",
            id="timed-event",
        ),
        pytest.param("2026-07-14T11:00Z", None, id="timed-event-end"),
    ],
)
def test_ics_exclusions(at, reason):
    cal = parse_calendar("pt-holidays", {"timezone": "Europe/Lisbon", "ics": ICS})
    assert cal.why_excluded(ms(at)) == reason


def _ics(event_lines: str) -> str:
    return (
        f"BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//t//EN\nBEGIN:VEVENT\nUID:e\nSUMMARY:bad one\n{event_lines}\n"
        "END:VEVENT\nEND:VCALENDAR\n"
    )


@pytest.mark.parametrize(
    "ics, message",
    [
        pytest.param("not a calendar", "not iCalendar text", id="garbage"),
        pytest.param(42, "expected iCalendar text", id="not-text"),
        pytest.param(_ics("DTSTART;VALUE=DATE:20261225\nRRULE:FREQ=YEARLY"), "repeats (RRULE)", id="rrule"),
        pytest.param(_ics("DTSTART:20261225T100000Z"), "needs DTEND or DURATION", id="timed-without-end"),
        pytest.param(_ics("DTSTART:20261225T100000Z\nDTEND:20261225T090000Z"), "is not after DTSTART", id="end-first"),
        pytest.param(_ics("DTSTART:2026xx"), "DTSTART", id="bad-dtstart"),
        pytest.param(_ics("SUMMARY:x"), "has no DTSTART", id="no-dtstart"),
        pytest.param(_ics("DTSTART;VALUE=DATE:20260101\nDTEND;VALUE=DATE:20270301"), "spans 424 days", id="too-long"),
        pytest.param(_ics("DTSTART;VALUE=DATE:20260101\nDTEND;VALUE=DATE:20260101"), "spans 0 days", id="empty"),
        pytest.param(
            _ics("DTSTART;VALUE=DATE:20260101\nDTEND:20260102T100000Z"), "is a time but DTSTART", id="date-then-time"
        ),
    ],
)
def test_ics_refusals(ics, message):
    with pytest.raises(CalendarError) as err:
        parse_calendar("feed", {"ics": ics})
    assert err.value.field.startswith("ics") and message in str(err.value)
    assert str(err.value).startswith("calendar 'feed': ics")


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mapping, field, shown",
    [
        pytest.param({"timezone": "Mars/Base"}, "timezone", "'Mars/Base'", id="unknown-zone"),
        pytest.param({"timezone": 5}, "timezone", "5", id="zone-not-text"),
        pytest.param({"timezone": ""}, "timezone", "''", id="zone-empty"),
        pytest.param({"exclude_dates": ""}, "exclude_dates", "''", id="dates-empty-text"),
        pytest.param({"timezon": "UTC"}, "timezon", "unknown key", id="misspelled-key"),
        pytest.param({"exclude_dates": "2026-12-25"}, "exclude_dates", "'2026-12-25'", id="dates-not-a-list"),
        pytest.param({"exclude_dates": ["2026-13-01"]}, "exclude_dates[0]", "'2026-13-01'", id="month-13"),
        pytest.param(
            {"exclude_dates": ["2026-12-25", "25/12/2026"]}, "exclude_dates[1]", "'25/12/2026'", id="not-iso-date"
        ),
        pytest.param(
            {"exclude_dates": [datetime(2026, 12, 25, 10)]}, "exclude_dates[0]", "datetime", id="a-time-is-not-a-date"
        ),
        pytest.param({"windows": {}}, "windows", "empty", id="windows-empty"),
        pytest.param({"windows": "mon-fri 09:00-18:00"}, "windows", "'mon-fri 09:00-18:00'", id="windows-text"),
        pytest.param({"windows": {"mon-fri": "9-18"}}, "windows.mon-fri.start", "'9'", id="hour-only"),
        pytest.param({"windows": {"mon-fri": "09:00-18:60"}}, "windows.mon-fri.end", "'18:60'", id="minute-60"),
        pytest.param({"windows": {"mon-fri": "24:00-18:00"}}, "windows.mon-fri.start", "'24:00'", id="start-2400"),
        pytest.param({"windows": {"mon-fri": "09:00-24:01"}}, "windows.mon-fri.end", "'24:01'", id="end-past-2400"),
        pytest.param({"windows": {"mon-fry": "09:00-18:00"}}, "windows.mon-fry.days", "'mon-fry'", id="bad-day"),
        pytest.param({"windows": {"mon": "09:00-09:00"}}, "windows.mon", "09:00-09:00 is empty", id="start-is-end"),
        pytest.param({"windows": {"mon": "09:00"}}, "windows.mon", "'09:00'", id="no-end"),
        pytest.param({"windows": {"mon": ["09:00-12:00", 5]}}, "windows.mon[1]", "5", id="list-item"),
        pytest.param({"windows": [{"days": "mon", "start": "09:00"}]}, "windows[0]", "'start'", id="no-end-key"),
        pytest.param(
            {"windows": [{"days": "", "start": "09:00", "end": "10:00"}]}, "windows[0].days", "''", id="no-days"
        ),
        pytest.param(
            {"windows": [{"days": ["mon", 3], "start": "09:00", "end": "10:00"}]},
            "windows[0].days",
            "3",
            id="day-not-text",
        ),
        pytest.param(
            {"exclude_ranges": [{"from": "2026-11-24T10:00:00", "to": "2026-11-24T12:00Z"}]},
            "exclude_ranges[0].from",
            "no UTC offset",
            id="naive-time",
        ),
        pytest.param(
            {"exclude_ranges": [{"from": "2026-11-24T12:00Z", "to": "2026-11-24T10:00Z"}]},
            "exclude_ranges[0]",
            "must be before",
            id="backwards-range",
        ),
        pytest.param(
            {"exclude_ranges": [{"from": "soon", "to": "2026-11-24T12:00Z"}]},
            "exclude_ranges[0].from",
            "'soon'",
            id="not-a-time",
        ),
        pytest.param(
            {"exclude_ranges": [{"from": "2026-11-24T10:00Z"}]},
            "exclude_ranges[0]",
            "exactly 'from' and 'to'",
            id="range-without-end",
        ),
        pytest.param(
            {"exclude_ranges": [{"from": True, "to": "2026-11-24T12:00Z"}]},
            "exclude_ranges[0].from",
            "True",
            id="bool-is-not-ms",
        ),
        pytest.param(
            {"exclude_ranges": {"from": "a", "to": "b"}}, "exclude_ranges", "expected a list", id="ranges-not-a-list"
        ),
    ],
)
def test_parse_refusals_name_the_field_and_value(mapping, field, shown):
    with pytest.raises(CalendarError) as err:
        parse_calendar("office", mapping)
    assert isinstance(err.value, ValueError)
    assert err.value.field == field
    assert str(err.value).startswith(f"calendar 'office': {field}: ")
    assert shown in str(err.value)


@pytest.mark.parametrize("name", ["", "has space", "-leading-dash", "x" * 129, 7, "ü"])
def test_parse_refuses_bad_names(name):
    with pytest.raises(CalendarError) as err:
        parse_calendar(name, {})
    assert err.value.field == "name"


def test_parse_refuses_a_non_table():
    with pytest.raises(CalendarError) as err:
        parse_calendar("office", ["mon-fri"])
    assert err.value.field == "calendar"


@pytest.mark.parametrize(
    "windows, expected",
    [
        pytest.param({"mon-fri": "09:00-18:00"}, [(d, "09:00", "18:00") for d in range(5)], id="range"),
        pytest.param(
            [{"days": ["mon", "tue", "wed", "thu", "fri"], "start": "09:00", "end": "18:00"}],
            [(d, "09:00", "18:00") for d in range(5)],
            id="list-form-same",
        ),
        pytest.param(
            {"fri-mon": "10:00-11:00"},
            [(0, "10:00", "11:00"), (4, "10:00", "11:00"), (5, "10:00", "11:00"), (6, "10:00", "11:00")],
            id="wrapping-range",
        ),
        pytest.param({"SAT,Sun": "10:00-12:00"}, [(5, "10:00", "12:00"), (6, "10:00", "12:00")], id="list-any-case"),
        pytest.param({"*": "00:00-24:00"}, [(d, "00:00", "24:00") for d in range(7)], id="every-day-all-day"),
        pytest.param(
            {"mon": ["09:00-12:00", "11:00-13:00", "14:00-15:00"]},
            [(0, "09:00", "13:00"), (0, "14:00", "15:00")],
            id="overlaps-merge",
        ),
        pytest.param({"sun": "22:00-02:00"}, [(0, "00:00", "02:00"), (6, "22:00", "24:00")], id="sun-night-into-mon"),
        pytest.param({"mon": "22:00-00:00"}, [(0, "22:00", "24:00")], id="to-midnight"),
        pytest.param({"mon": " 09:30 - 17:45 "}, [(0, "09:30", "17:45")], id="spaces"),
    ],
)
def test_parse_windows(windows, expected):
    cal = parse_calendar("c", {"windows": windows})

    def hhmm(ms_):
        return f"{ms_ // 3_600_000:02d}:{ms_ // 60_000 % 60:02d}"

    assert [(w.weekday, hhmm(w.start_ms), hhmm(w.end_ms)) for w in cal.windows] == expected


def test_toml_values_dates_and_aware_datetimes_and_epoch_ms():
    # TOML and YAML give bare dates as date and offset times as aware datetime; the API sends epoch ms.
    lisbon_summer = timezone(timedelta(hours=1))
    cal = parse_calendar(
        "c",
        {
            "exclude_dates": [date(2026, 12, 25)],
            "exclude_ranges": [
                {"from": datetime(2026, 7, 14, 10, tzinfo=lisbon_summer), "to": ms("2026-07-14T11:00Z")}
            ],
        },
    )
    assert cal.excluded_dates == {date(2026, 12, 25)}
    assert cal.excluded_ranges == ((ms("2026-07-14T09:00Z"), ms("2026-07-14T11:00Z")),)


def test_equal_definitions_make_equal_calendars():
    a = parse_calendar(
        "c",
        {
            "windows": {"mon-fri": "09:00-18:00"},
            "exclude_ranges": [
                {"from": "2026-01-01T02:00Z", "to": "2026-01-01T03:00Z"},
                {"from": "2026-01-01T00:00Z", "to": "2026-01-01T02:00Z"},
            ],
        },
    )
    b = parse_calendar(
        "c",
        {
            "windows": [
                {"days": "fri", "start": "09:00", "end": "18:00"},
                {"days": "mon-thu", "start": "09:00", "end": "18:00"},
            ],
            "exclude_ranges": [{"from": "2026-01-01T00:00Z", "to": "2026-01-01T03:00Z"}],
        },
    )
    assert a == b and hash(a) == hash(b)
    assert a.excluded_ranges == ((ms("2026-01-01T00:00Z"), ms("2026-01-01T03:00Z")),)  # touching ranges join


@pytest.mark.parametrize(
    "kwargs, field",
    [
        pytest.param({"timezone": "Nowhere/Zone"}, "timezone", id="zone"),
        pytest.param({"windows": (Window(7, 0, 1),)}, "windows", id="weekday-7"),
        pytest.param({"windows": (Window(0, 5, 5),)}, "windows", id="empty-window"),
        pytest.param({"windows": (Window(0, 0, DAY_MS + 1),)}, "windows", id="past-midnight"),
        pytest.param({"excluded_ranges": ((10, 10),)}, "exclude_ranges", id="empty-range"),
    ],
)
def test_constructing_directly_is_checked_too(kwargs, field):
    with pytest.raises(CalendarError) as err:
        Calendar("c", **kwargs)
    assert err.value.field == field
