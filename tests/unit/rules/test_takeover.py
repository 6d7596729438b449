"""plan_takeover: what a new leader owes, as a table of situations."""

from __future__ import annotations

import pytest

from shardcron.model import (
    CatchUp,
    ExecutorKind,
    ExecutorSpec,
    Job,
    RetryPolicy,
    Schedule,
    ScheduleKind,
    SlotRef,
    Tick,
    TickStatus,
)
from shardcron.rules import takeover
from shardcron.rules.takeover import Dispatch, plan_takeover
from shardcron.rules.triggers import trigger_for

NOW = 1_000_000
FENCE = 50


def job(jid="j", every_ms=1000, **kw) -> Job:
    return Job(jid, Schedule(ScheduleKind.INTERVAL, interval_ms=every_ms), ExecutorSpec(ExecutorKind.NOOP), **kw)


def tick(status, at, attempt=0, fence=10, jid="j", manual=False) -> Tick:
    return Tick(jid, at, 0, fence, "old", TickStatus(status), attempt, manual)


def plan(jobs, last=None, orphans=(), now=NOW):
    return plan_takeover(jobs, {j.id: trigger_for(j.schedule) for j in jobs}, last or {}, orphans, FENCE, now)


@pytest.mark.parametrize(
    "orphan, retry, expected",
    [
        # claimed rows never ran (a side-effecting start marks the row running first): run them
        (tick("claimed", NOW - 500), RetryPolicy(1), ("reclaim", 1)),
        (tick("claimed", NOW + 400), RetryPolicy(1), ("reclaim", 1)),
        # running rows may have run: retry while attempts remain, else abandon
        (tick("running", NOW - 3000, attempt=1), RetryPolicy(2), ("reclaim", 2)),
        (tick("running", NOW - 3000, attempt=1), RetryPolicy(1), ("abandon", None)),
        (tick("running", NOW - 3000, attempt=3), RetryPolicy(3), ("abandon", None)),
    ],
)
def test_orphans_are_settled_by_policy(orphan, retry, expected):
    p = plan([job(retry=retry)], last={"j": NOW - 1000}, orphans=[orphan])
    kind, attempt = expected
    if kind == "reclaim":
        assert p.reclaim == [Dispatch(orphan.slot, attempt, catch_up=True)] and p.abandon == []
    else:
        assert p.abandon == [orphan.slot] and p.reclaim == []


def test_orphans_of_deleted_jobs_are_abandoned_and_current_fence_rows_are_left_alone():
    p = plan(
        [job()],
        last={"j": NOW},
        orphans=[tick("claimed", NOW - 10, jid="gone"), tick("claimed", NOW - 10, fence=FENCE)],
    )
    assert p.abandon == [SlotRef("gone", NOW - 10)] and p.reclaim == []


@pytest.mark.parametrize(
    "policy, run, skip",
    [
        (CatchUp.ALL, [NOW - 2000, NOW - 1000, NOW], []),
        (CatchUp.LATEST, [NOW], [NOW - 2000, NOW - 1000]),
        (CatchUp.NONE, [], [NOW - 2000, NOW - 1000, NOW]),
    ],
)
def test_missed_slots_follow_the_catch_up_policy(policy, run, skip):
    p = plan([job(catchup=policy)], last={"j": NOW - 3000})
    assert [s.scheduled_at_ms for s in p.run] == run
    assert [s.scheduled_at_ms for s in p.skip] == skip
    assert p.resume_after == {"j": NOW}


def test_slots_before_the_job_became_active_are_not_owed():
    p = plan([job(active_since_ms=NOW - 1500)])
    assert [s.scheduled_at_ms for s in p.run] == [NOW - 1000, NOW]


def test_a_claimed_orphan_in_the_future_moves_the_schedule_past_it():
    orphan = tick("claimed", NOW + 1000)
    p = plan([job()], last={"j": NOW + 1000}, orphans=[orphan])
    assert p.run == [] and p.resume_after == {"j": NOW + 1000}


def test_paused_jobs_owe_nothing():
    p = plan([job(paused=True)], last={"j": NOW - 5000})
    assert p.run == p.skip == [] and "j" not in p.resume_after


def test_slots_older_than_the_window_are_not_enumerated_nor_run():
    p = plan([job(catchup_window_ms=2500)], last={"j": NOW - 100_000})
    assert [s.scheduled_at_ms for s in p.run] == [NOW - 2000, NOW - 1000, NOW]


def test_a_backlog_over_the_cap_runs_the_newest_slots_and_counts_the_rest(monkeypatch):
    monkeypatch.setattr(takeover, "MAX_CATCH_UP_SLOTS", 3)
    p = plan([job(every_ms=100, catchup_window_ms=10_000)], last={"j": NOW - 1000})
    assert [s.scheduled_at_ms for s in p.run] == [NOW - 200, NOW - 100, NOW]
    assert p.beyond_window == {"j": 7}


def test_manual_orphans_do_not_move_the_schedule():
    orphan = tick("claimed", NOW + 5000, manual=True)
    p = plan([job()], last={"j": NOW}, orphans=[orphan])
    assert p.reclaim == [Dispatch(orphan.slot, 1, manual=True, catch_up=True)] and p.resume_after == {"j": NOW}
