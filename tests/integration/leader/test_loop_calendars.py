"""Calendars in the Scheduler, stepped through time over a real SQLite store (tests/support/stepped_scheduler.py):
an excluded slot is never claimed nor run, a job whose calendar is not known yet owes nothing until it
is, a change reschedules at once, a slot claimed before a change that now excludes it is recorded
skipped, not run, and a new leader does not catch up excluded slots."""

from __future__ import annotations

from shardcron.coordination.calendar_book import CalendarBook
from shardcron.leader.loop import CALENDAR_SKIP_PREFIX
from shardcron.model import TickStatus
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from tests.integration.leader.test_loop import OK, left_by_a_dead_leader
from tests.support.stepped_scheduler import T0, Rig, S

CLAIMED = (TickStatus.CLAIMED, None)


def _excluding(*spans: tuple[int, int]):
    """Calendar "cal" excluding each [from, to) given in seconds after T0."""
    return parse_calendar("cal", {"exclude_ranges": [{"from": T0 + a * S, "to": T0 + b * S} for a, b in spans]})


def _job():
    return job_from_dict({"id": "biz", "every": "1s", "calendars": ["cal"]})


def test_excluded_slots_are_never_claimed_and_a_change_takes_effect_at_once(rig):
    r = rig([_job()])  # its calendar is not known to this node yet: nothing is owed
    assert r.scheduler.claim_due() == 0 and r.ticks("biz") == {}
    r.scheduler.calendars.replace([_excluding((3, 5))])
    r.scheduler.calendars_changed({"cal"})
    for k in range(7):
        r.at(T0 + k * S)
    assert r.ticks("biz") == {1: OK, 2: OK, 5: OK, 6: OK, 7: CLAIMED}  # 3 and 4: no row at all
    # Slot 7 is claimed already; a change now excludes it and slot 8.
    r.scheduler.calendars.replace([_excluding((3, 5), (7, 9))])
    r.scheduler.calendars_changed({"cal"})
    for k in (7, 8, 9):
        r.at(T0 + k * S)
    got = r.ticks("biz")
    status, error = got.pop(7)
    assert status is TickStatus.SKIPPED and error.startswith(CALENDAR_SKIP_PREFIX) and "calendar 'cal'" in error
    assert got == {1: OK, 2: OK, 5: OK, 6: OK, 9: OK, 10: CLAIMED}
    # The change allows 3 to 4 again only in the past: nothing is owed back.
    r.scheduler.calendars.replace([parse_calendar("cal", {})])
    r.scheduler.calendars_changed({"cal"})
    r.at(T0 + 10 * S)
    assert set(r.ticks("biz")) == {1, 2, 5, 6, 7, 9, 10, 11}


def test_a_new_leader_does_not_catch_up_the_slots_a_calendar_excludes(engine):
    # The old leader (fence 5) last recorded T0 - 10 s and died; of the missed slots, -6 s to -3 s
    # are excluded: the rest are caught up at once.
    left_by_a_dead_leader(engine, _job(), T0 - 10 * S)
    r = Rig(engine, [], calendars=CalendarBook([_excluding((-6, -2))]))
    try:
        r.at(T0)
        assert set(r.ticks("biz")) == {-10, -9, -8, -7, -2, -1, 0, 1}
        assert all(r.ticks("biz")[k] == OK for k in (-9, -8, -7, -2, -1, 0))
    finally:
        r.close()
