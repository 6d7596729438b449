"""The audit's view of backfilled rows and the backfill runner's page size: pure, one table each.

A backfill adds rows long after their slot. Such a row is present, but its claim time must not excuse
earlier slots the way a catch-up row's does (it says nothing about when the live schedule caught up)."""

from __future__ import annotations

import pytest

from shardcron.leader.backfill_runner import MAX_PAGE, page_size
from shardcron.model import Backfill, Overlap, Tick, TickStatus
from shardcron.rules.audit import added_by_backfill, backfilled_slots, find_missing
from shardcron.spec.job import job_from_dict

S = 1000
H = 3600 * S


def backfill(from_s: int, to_s: int, created_s: int) -> Backfill:
    return Backfill("bf-1", "j", 0, from_s * S, to_s * S, Overlap.SKIP, 10.0, 0, created_s * S)


def row(at_s: int, claimed_s: int | None, manual: bool = False) -> Tick:
    return Tick(
        "j",
        at_s * S,
        0,
        1,
        "a",
        TickStatus.SUCCEEDED,
        attempt=1,
        manual=manual,
        claimed_at_ms=None if claimed_s is None else claimed_s * S,
    )


@pytest.mark.parametrize(
    "at_s, claimed_s, backfills, expected",
    [
        pytest.param(10, 5000, [backfill(0, 100, 4000)], True, id="in range, claimed after it was made"),
        pytest.param(10, 9, [backfill(0, 100, 4000)], False, id="claimed by the live loop before it"),
        pytest.param(100, 5000, [backfill(0, 100, 4000)], False, id="the range's end is excluded"),
        pytest.param(0, 5000, [backfill(0, 100, 4000)], True, id="the range's start is included"),
        pytest.param(10, 5000, [], False, id="no backfill"),
        pytest.param(10, None, [backfill(0, 100, 4000)], False, id="no claim time"),
        pytest.param(150, 5000, [backfill(0, 100, 4000), backfill(100, 200, 4500)], True, id="the second one"),
    ],
)
def test_added_by_backfill(at_s, claimed_s, backfills, expected):
    assert added_by_backfill(at_s * S, None if claimed_s is None else claimed_s * S, backfills) is expected


def test_backfilled_slots_leave_manual_rows_out():
    rows = [row(10, 5000), row(11, 5000, manual=True), row(12, 12)]
    assert backfilled_slots(rows, [backfill(0, 100, 4000)]) == {10 * S}


def test_a_backfilled_row_does_not_excuse_an_earlier_missing_slot():
    """Slot 10 s has no row. Judged by a backfilled row claimed hours later it would look
    "older than the catch-up window when the next row was written" (excused); counted as
    claimed at its own slot (what the audit does with backfilled rows), it stays missing."""
    job = job_from_dict({"id": "j", "every": "1s", "executor": {"kind": "noop"}, "catchup_window": "10s"})
    late_claim = {11 * S: 2 * H}
    assert find_missing(job, late_claim, 9 * S, 11 * S, now_ms=3 * H).excused == (10 * S,)
    as_backfilled = {11 * S: None}
    assert find_missing(job, as_backfilled, 9 * S, 11 * S, now_ms=3 * H).missing == (10 * S,)


@pytest.mark.parametrize(
    "rate, expected",
    [(0.01, 1), (1, 1), (2.5, 3), (50, 50), (1000, 1000), (10**6, MAX_PAGE)],
)
def test_a_page_holds_about_a_second_of_slots(rate, expected):
    assert page_size(rate) == expected
