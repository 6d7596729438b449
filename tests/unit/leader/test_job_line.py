"""Each job's line (``leader/job_line.py``): the states of its slots and the head let go when it moves."""

import pytest

from shardcron.leader.job_line import JobLines
from shardcron.model import SlotRef
from shardcron.rules.takeover import Dispatch


def d(slot_s: int, job_id: str = "j", catch_up: bool = False) -> Dispatch:
    return Dispatch(SlotRef(job_id, slot_s * 1000), 1, catch_up=catch_up)


def test_a_job_with_nothing_started_or_waiting_has_no_line():
    lines = JobLines()
    assert lines.get("j") is None and lines.going("j") == 0
    assert lines.settled("j", 1000) is None  # a slot that never queued: nothing to let go


def test_slots_wait_in_slot_order_and_the_head_goes_when_the_line_moves():
    lines = JobLines()
    lines.admitting("j", 31_000)  # the first catch-up slot, on its way to its executor
    lines.park(d(33, catch_up=True))
    lines.park(d(34))  # the live slot, behind the unstarted catch-ups
    lines.park(d(32, catch_up=True))
    line = lines.get("j")
    assert [p.slot.scheduled_at_ms for p in line.parked] == [32_000, 33_000, 34_000]
    assert line.unstarted_before(34_000) and not line.unstarted_before(31_000)
    # ADMITTING -> GOING: the head (32) is judged again, and stays unstarted until it starts or settles.
    assert lines.started("j", 31_000) == d(32, catch_up=True)
    assert lines.going("j") == 1 and line.unstarted == {32_000, 33_000, 34_000}
    assert lines.ended("j") == d(33, catch_up=True)  # each move lets one more go; its verdict re-parks it
    lines.park(d(33, catch_up=True))
    lines.admitting("j", 32_000)
    assert lines.started("j", 32_000) == d(33, catch_up=True)
    lines.admitting("j", 33_000)
    assert lines.started("j", 33_000) == d(34)
    assert not line.unstarted_before(34_000) and lines.going("j") == 2
    assert lines.settled("j", 34_000) is None  # the live slot skipped: nothing more waits
    assert lines.ended("j") is None and lines.ended("j") is None
    assert lines.get("j") is None  # an empty line is gone


def test_a_slot_dropped_before_starting_lets_the_next_one_go():
    lines = JobLines()
    lines.admitting("j", 1000)
    lines.park(d(2))
    assert lines.settled("j", 1000) == d(2)
    assert lines.settled("j", 2000) is None and lines.get("j") is None


def test_jobs_have_lines_of_their_own():
    lines = JobLines()
    lines.admitting("a", 1000)
    lines.park(d(2, job_id="b"))
    assert lines.started("a", 1000) is None
    assert lines.get("b").parked == [d(2, job_id="b")]


def test_a_run_that_was_not_going_cannot_end():
    lines = JobLines()
    with pytest.raises(ValueError, match="not going"):
        lines.ended("j")


def test_a_leadership_that_ends_drops_what_waits():
    lines = JobLines()
    lines.park(d(1))
    lines.park(d(2, job_id="b"))
    assert lines.parked_count() == 2
    assert lines.drop_parked() == 2 and lines.parked_count() == 0
