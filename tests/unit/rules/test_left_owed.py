"""rules/left_owed.py: what a changed or deleted job's old definition still owes, as a table."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardcron.rules.left_owed import LeftOwed, left_owed, owed_until
from shardcron.rules.triggers import IntervalTrigger, OnceTrigger, slots_between
from shardcron.spec.job import job_from_dict

S = 1000
ACTIVE = job_from_dict({"id": "j", "every": "1s"})
PAUSED = replace(ACTIVE, paused=True)


@pytest.mark.parametrize(
    ("old", "new", "now", "expected"),
    [
        (PAUSED, None, 10 * S, None),  # a paused definition claimed nothing since its pause
        (PAUSED, replace(ACTIVE, active_since_ms=9 * S), 10 * S, None),  # resumed: the pause is not owed
        (ACTIVE, None, 10 * S, 10 * S),  # deleted: what was due before the delete
        (ACTIVE, replace(PAUSED, active_since_ms=2 * S), 10 * S, 10 * S),  # paused: up to the pause
        (ACTIVE, replace(ACTIVE, active_since_ms=7 * S), 10 * S, 7 * S),  # re-put: up to the new start
        (ACTIVE, replace(ACTIVE, active_since_ms=12 * S), 10 * S, 10 * S),  # a start ahead of now: now
    ],
)
def test_owed_until(old, new, now, expected):
    assert owed_until(old, new, now) == expected


@pytest.mark.parametrize(
    ("trigger", "claimed_through", "until", "limit", "expected"),
    [
        (IntervalTrigger(S), 3 * S, 3 * S, 10, LeftOwed([], False)),  # not behind: the usual case
        (IntervalTrigger(S), 3 * S, 3 * S + 999, 10, LeftOwed([], False)),  # the next slot is not due yet
        (IntervalTrigger(S), 3 * S, 6 * S + 500, 10, LeftOwed([4 * S, 5 * S, 6 * S], False)),
        (IntervalTrigger(S), 3 * S, 6 * S, 10, LeftOwed([4 * S, 5 * S, 6 * S], False)),  # closed on the right
        (IntervalTrigger(S), 3 * S, 9 * S, 2, LeftOwed([4 * S, 5 * S], True)),  # over the limit: the oldest
        (IntervalTrigger(S), 3 * S, 5 * S, 2, LeftOwed([4 * S, 5 * S], False)),  # exactly the limit
        (OnceTrigger(5 * S), 3 * S, 9 * S, 10, LeftOwed([5 * S], False)),
        (OnceTrigger(5 * S), 5 * S, 9 * S, 10, LeftOwed([], False)),  # its one slot was claimed
    ],
)
def test_left_owed(trigger, claimed_through, until, limit, expected):
    assert left_owed(trigger.next_after, claimed_through, until, limit) == expected


def test_a_calendar_skipping_next_slot_is_followed():
    def even_seconds_only(after: int) -> int:  # a 1 s job under a calendar that allows even seconds
        return (after // (2 * S) + 1) * 2 * S

    assert left_owed(even_seconds_only, 1 * S, 7 * S, 10) == LeftOwed([2 * S, 4 * S, 6 * S], False)


def test_a_broken_next_slot_is_refused_not_looped_on():
    with pytest.raises(RuntimeError, match="not a later slot"):
        left_owed(lambda after: 5 * S, 5 * S, 9 * S, 10)


@given(
    every=st.integers(1, 5 * S),
    claimed_through=st.integers(0, 100 * S),
    behind=st.integers(0, 100 * S),
    limit=st.integers(1, 50),
)
def test_left_owed_is_the_slots_between_capped(every, claimed_through, behind, limit):
    trigger = IntervalTrigger(every)
    until = claimed_through + behind
    all_owed = slots_between(trigger, claimed_through, until)
    got = left_owed(trigger.next_after, claimed_through, until, limit)
    assert got == LeftOwed(all_owed[:limit], len(all_owed) > limit)
