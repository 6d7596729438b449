"""Backfill planning: owed slots skip recorded and excluded ones, pages resume, validation names the option."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.model import Overlap
from shardcron.rules.backfill_plan import (
    MAX_BACKFILL_SLOTS,
    BackfillAction,
    BackfillError,
    backfill_page,
    backfill_slot_action,
    count_slots,
    owed_slots,
    parse_overlap,
    parse_rate,
    slot_not_before_ms,
    validate_backfill,
)
from shardcron.rules.triggers import IntervalTrigger, OnceTrigger
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.cron import CronTrigger
from tests.support.instants import CountingTrigger, ms

MIN = 60_000


T0 = ms("2026-01-05T08:00Z")  # a Monday; Lisbon is on UTC in January
OFFICE = parse_calendar(
    "office", {"timezone": "Europe/Lisbon", "windows": {"mon-fri": "09:00-18:00"}, "exclude_dates": ["2026-01-06"]}
)
NO_11 = parse_calendar("no-11", {"exclude_ranges": [{"from": "2026-01-05T11:00Z", "to": "2026-01-05T12:00Z"}]})
HOURLY = IntervalTrigger(3_600_000)


def hours(*hh: int, day: str = "2026-01-05") -> list[int]:
    return [ms(f"{day}T{h:02d}:00Z") for h in hh]


@pytest.mark.parametrize(
    "trigger, calendars, start, end, recorded, expected",
    [
        pytest.param(
            HOURLY,
            [],
            "2026-01-05T08:00Z",
            "2026-01-05T12:00Z",
            [],
            hours(8, 9, 10, 11),
            id="from-inclusive-to-exclusive",
        ),
        pytest.param(
            HOURLY, [], "2026-01-05T08:00Z", "2026-01-05T12:00Z", hours(9, 11), hours(8, 10), id="recorded-are-not-owed"
        ),
        pytest.param(
            HOURLY, [], "2026-01-05T07:59:59.999Z", "2026-01-05T08:00:00.001Z", [], hours(8), id="tight-range"
        ),
        pytest.param(
            HOURLY,
            [OFFICE],
            "2026-01-05T00:00Z",
            "2026-01-05T23:59Z",
            [],
            hours(*range(9, 18)),
            id="business-hours-only",
        ),
        pytest.param(
            HOURLY,
            [OFFICE],
            "2026-01-05T00:00Z",
            "2026-01-07T10:00Z",
            hours(10, 12),
            hours(9, 11, 13, 14, 15, 16, 17) + hours(9, day="2026-01-07"),
            id="recorded-and-holiday-and-night",
        ),
        pytest.param(
            HOURLY,
            [OFFICE, NO_11],
            "2026-01-05T00:00Z",
            "2026-01-05T14:00Z",
            [],
            hours(9, 10, 12, 13),
            id="two-calendars",
        ),
        pytest.param(
            CronTrigger("0 9 * * *", "Europe/Lisbon"),
            [OFFICE],
            "2026-01-01T00:00Z",
            "2026-01-10T00:00Z",
            hours(9, day="2026-01-08"),
            hours(9, day="2026-01-01")
            + hours(9, day="2026-01-02")
            + hours(9, day="2026-01-05")
            + hours(9, day="2026-01-07")
            + hours(9, day="2026-01-09"),
            id="daily-cron-weekdays-minus-holiday-minus-recorded",
        ),
        pytest.param(
            OnceTrigger(ms("2026-01-05T09:30Z")),
            [OFFICE],
            "2026-01-05T00:00Z",
            "2026-01-06T00:00Z",
            [],
            [ms("2026-01-05T09:30Z")],
            id="once",
        ),
        pytest.param(HOURLY, [OFFICE], "2026-01-06T00:00Z", "2026-01-07T00:00Z", [], [], id="all-excluded"),
        pytest.param(HOURLY, [], "2026-01-05T08:00Z", "2026-01-05T12:00Z", hours(8, 9, 10, 11), [], id="all-recorded"),
    ],
)
def test_owed_slots(trigger, calendars, start, end, recorded, expected):
    assert list(owed_slots(trigger, calendars, ms(start), ms(end), recorded)) == expected


@pytest.mark.parametrize("recorded_type", [list, set, frozenset, tuple], ids=lambda t: t.__name__)
def test_recorded_may_be_any_collection(recorded_type):
    recorded = recorded_type(hours(9, 11))
    assert list(owed_slots(HOURLY, [], T0, ms("2026-01-05T12:00Z"), recorded)) == hours(8, 10)


def test_excluded_stretches_are_jumped_not_walked():
    # Every second for a week under business hours: 9 open hours a weekday, the rest jumped.
    trigger = CountingTrigger(IntervalTrigger(1_000))
    week_start, week_end = ms("2026-01-05T00:00Z"), ms("2026-01-12T00:00Z")
    owed = list(owed_slots(trigger, [OFFICE], week_start, week_end, []))
    assert len(owed) == 4 * 9 * 3_600  # Mon, Wed, Thu, Fri; Tuesday is a holiday
    assert trigger.calls <= len(owed) + 10


# --- pages -------------------------------------------------------------------------------


def test_pages_cover_the_owed_slots_once_in_order():
    req = validate_backfill(HOURLY, ms("2026-01-05T00:00Z"), ms("2026-01-09T00:00Z"), 10, batch_size=4)
    recorded = set(hours(10, 12))
    pages, cursor = [], None
    while True:
        page = backfill_page(HOURLY, [OFFICE], req, recorded, cursor)
        pages.append(page.slots)
        if page.cursor_ms is None:
            break
        cursor = page.cursor_ms
    flat = [s for p in pages for s in p]
    assert flat == list(owed_slots(HOURLY, [OFFICE], req.from_ms, req.to_ms, recorded))
    assert all(len(p) == 4 for p in pages[:-1]) and len(pages[-1]) <= 4
    assert len(flat) == 9 * 3 - 2  # Mon, Wed, Thu; two of Monday's recorded


def test_replanning_after_a_failover_skips_what_ran():
    # A successor re-plans from the range's start with the rows it finds: the first page ran.
    req = validate_backfill(HOURLY, ms("2026-01-05T00:00Z"), ms("2026-01-06T00:00Z"), 10, batch_size=3)
    first = backfill_page(HOURLY, [OFFICE], req, set())
    assert first.slots == tuple(hours(9, 10, 11))
    again = backfill_page(HOURLY, [OFFICE], req, set(first.slots))
    assert again.slots == tuple(hours(12, 13, 14))


@pytest.mark.parametrize(
    "batch, owed, cursor",
    [
        pytest.param(4, 2, None, id="short-page-is-the-last"),
        pytest.param(2, 2, "2026-01-05T09:00Z", id="full-page-has-a-cursor"),
    ],
)
def test_page_cursor(batch, owed, cursor):
    req = validate_backfill(HOURLY, T0, ms("2026-01-05T11:00Z"), 1, batch_size=batch)
    page = backfill_page(HOURLY, [], req, hours(10))
    assert len(page.slots) == owed
    assert page.cursor_ms == (ms(cursor) if cursor else None)


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field, shown",
    [
        pytest.param({"from_ms": T0, "to_ms": T0}, "--to", "must be after --from", id="empty-range"),
        pytest.param({"from_ms": T0 + 1, "to_ms": T0}, "--to", "must be after --from", id="backwards"),
        pytest.param({"from_ms": "yesterday"}, "--from", "'yesterday'", id="from-not-ms"),
        pytest.param({"to_ms": 1.5}, "--to", "1.5", id="to-not-whole"),
        pytest.param({"rate_per_s": 0}, "--rate", "0", id="zero-rate"),
        pytest.param({"rate_per_s": -2}, "--rate", "-2", id="negative-rate"),
        pytest.param({"rate_per_s": float("inf")}, "--rate", "inf", id="infinite-rate"),
        pytest.param({"rate_per_s": True}, "--rate", "True", id="bool-rate"),
        pytest.param({"batch_size": 0}, "--batch", "0", id="zero-batch"),
        pytest.param({"batch_size": 10_001}, "--batch", "10001", id="huge-batch"),
        pytest.param({"overlap": "sometimes"}, "--overlap", "'sometimes'", id="bad-overlap"),
        pytest.param(
            {"trigger": IntervalTrigger(1_000), "to_ms": T0 + 1_000_001_000},
            "--from/--to",
            "more than 1,000,000 slots",
            id="too-many-slots",
        ),
        pytest.param(
            {"trigger": CronTrigger("* * * * * *", "UTC"), "to_ms": T0 + 21_000, "max_slots": 20},
            "--from/--to",
            "more than 20 slots",
            id="too-many-cron-slots",
        ),
    ],
)
def test_validation_names_the_option(kwargs, field, shown):
    args = {"trigger": HOURLY, "from_ms": T0, "to_ms": T0 + 86_400_000, "rate_per_s": 10} | kwargs
    with pytest.raises(BackfillError) as err:
        validate_backfill(**args)
    assert isinstance(err.value, ValueError)
    assert err.value.field == field and str(err.value).startswith(f"{field}: ") and shown in str(err.value)


def test_validation_accepts_the_limit_exactly():
    req = validate_backfill(
        IntervalTrigger(1_000), T0, T0 + MAX_BACKFILL_SLOTS * 1_000, 100, batch_size=500, overlap="ALLOW"
    )
    assert req.slot_count == MAX_BACKFILL_SLOTS and req.overlap is Overlap.ALLOW and req.batch_size == 500


@pytest.mark.parametrize(
    "trigger, start, end, expected",
    [
        pytest.param(HOURLY, T0, T0 + 4 * 3_600_000, 4, id="interval-arithmetic"),
        pytest.param(HOURLY, T0 + 1, T0 + 3_600_000, 0, id="interval-none"),
        pytest.param(HOURLY, T0 + 1, T0 + 3_600_001, 1, id="interval-one"),
        pytest.param(CronTrigger("0 * * * *", "UTC"), T0, T0 + 4 * 3_600_000, 4, id="cron-walk"),
        pytest.param(OnceTrigger(T0), T0, T0 + 1, 1, id="once"),
        pytest.param(HOURLY, T0, T0, 0, id="empty"),
    ],
)
def test_count_slots(trigger, start, end, expected):
    assert count_slots(trigger, start, end, cap=1_000) == expected


@settings(max_examples=100, deadline=None)
@given(
    interval=st.integers(1, 10_000),
    anchor=st.integers(-10_000, 10_000),
    start=st.integers(-50_000, 50_000),
    length=st.integers(0, 50_000),
)
def test_count_slots_arithmetic_matches_the_walk(interval, anchor, start, length):
    class Opaque:  # the same slots, but not an IntervalTrigger: counted by walking
        next_after = IntervalTrigger(interval, anchor).next_after

    cap = 100_000
    assert count_slots(IntervalTrigger(interval, anchor), start, start + length, cap) == count_slots(
        Opaque(), start, start + length, cap
    )


@pytest.mark.parametrize(
    "text, expected",
    [("10/s", 10.0), ("600/m", 10.0), ("600/min", 10.0), ("36000/h", 10.0), ("2.5", 2.5), (4, 4.0), (" 1 / s ", 1.0)],
)
def test_parse_rate(text, expected):
    assert parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["fast", "10/d", "0/s", "-1/s", True, "nan/s", ""])
def test_parse_rate_refuses(text):
    with pytest.raises(BackfillError) as err:
        parse_rate(text)
    assert err.value.field == "--rate"


@pytest.mark.parametrize(
    "text, expected", [("skip", Overlap.SKIP), ("Allow", Overlap.ALLOW), (Overlap.ALLOW, Overlap.ALLOW)]
)
def test_parse_overlap(text, expected):
    assert parse_overlap(text) is expected


# --- pace and overlap -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index, rate, expected",
    [(0, 10, 0), (1, 10, 100), (10, 10, 1_000), (1, 3, 334), (3, 3, 1_000), (5, 0.5, 10_000)],
)
def test_slot_not_before(index, rate, expected):
    assert slot_not_before_ms(T0, index, rate) == T0 + expected


@pytest.mark.parametrize("index, rate", [(-1, 10), (0, 0)])
def test_slot_not_before_refuses(index, rate):
    with pytest.raises(ValueError):
        slot_not_before_ms(T0, index, rate)


@pytest.mark.parametrize(
    "overlap, running, action",
    [
        (Overlap.SKIP, 0, BackfillAction.RUN),
        (Overlap.SKIP, 1, BackfillAction.SKIP),
        (Overlap.ALLOW, 0, BackfillAction.RUN),
        (Overlap.ALLOW, 3, BackfillAction.RUN),
    ],
)
def test_backfill_slot_action(overlap, running, action):
    assert backfill_slot_action(overlap, running) is action
