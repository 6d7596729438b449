"""The scheduling decisions, one table per function, one row per branch."""

import pytest

from shardcron.model import CatchUp, Overlap, RetryPolicy, TickStatus
from shardcron.rules.policies import (
    PAUSED_SKIP_REASON,
    RESCHEDULED_SKIP_REASON,
    CatchUpPlan,
    OrphanAction,
    OverlapVerdict,
    backoff_ms,
    disowned_slot,
    overlap_allows,
    overlap_verdict,
    plan_catch_up,
    settle_orphan,
)

NOW = 1_000_000
MIN = 60_000
HOUR = 60 * MIN

# Slots of a minutely job: three long gone, three inside a 10-minute window.
OLD = (NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - HOUR)
RECENT = (NOW - 5 * MIN, NOW - 2 * MIN, NOW - MIN)


@pytest.mark.parametrize(
    "policy, window_ms, missed, expected",
    [
        # nothing missed
        (CatchUp.ALL, 10 * MIN, (), CatchUpPlan((), (), 0)),
        (CatchUp.LATEST, 10 * MIN, (), CatchUpPlan((), (), 0)),
        (CatchUp.NONE, 10 * MIN, (), CatchUpPlan((), (), 0)),
        # everything inside the window
        (CatchUp.ALL, 10 * MIN, RECENT, CatchUpPlan(RECENT, (), 0)),
        (CatchUp.LATEST, 10 * MIN, RECENT, CatchUpPlan(RECENT[-1:], RECENT[:-1], 0)),
        (CatchUp.NONE, 10 * MIN, RECENT, CatchUpPlan((), RECENT, 0)),
        # a single missed slot: LATEST runs it, skips nothing
        (CatchUp.LATEST, 10 * MIN, (NOW - MIN,), CatchUpPlan((NOW - MIN,), (), 0)),
        # some beyond the window: counted, never recorded
        (CatchUp.ALL, 10 * MIN, OLD + RECENT, CatchUpPlan(RECENT, (), 3)),
        (CatchUp.LATEST, 10 * MIN, OLD + RECENT, CatchUpPlan(RECENT[-1:], RECENT[:-1], 3)),
        (CatchUp.NONE, 10 * MIN, OLD + RECENT, CatchUpPlan((), RECENT, 3)),
        # all beyond the window
        (CatchUp.ALL, 10 * MIN, OLD, CatchUpPlan((), (), 3)),
        (CatchUp.LATEST, 10 * MIN, OLD, CatchUpPlan((), (), 3)),
        (CatchUp.NONE, 10 * MIN, OLD, CatchUpPlan((), (), 3)),
        # the window's edge is inside it: slot >= now - window
        (CatchUp.ALL, 5 * MIN, RECENT, CatchUpPlan(RECENT, (), 0)),
        (CatchUp.ALL, 5 * MIN - 1, RECENT, CatchUpPlan(RECENT[1:], (), 1)),
        # window 0: only a slot due exactly now is in it, so nothing missed runs
        (CatchUp.ALL, 0, RECENT, CatchUpPlan((), (), 3)),
        (CatchUp.ALL, 0, RECENT + (NOW,), CatchUpPlan((NOW,), (), 3)),
        (CatchUp.LATEST, 0, RECENT + (NOW,), CatchUpPlan((NOW,), (), 3)),
        (CatchUp.NONE, 0, RECENT + (NOW,), CatchUpPlan((), (NOW,), 3)),
        # unsorted or repeated input is still planned once per slot, latest last
        (
            CatchUp.LATEST,
            10 * MIN,
            (RECENT[2], RECENT[0], RECENT[1], RECENT[0]),
            CatchUpPlan(RECENT[-1:], RECENT[:-1], 0),
        ),
        (CatchUp.ALL, 10 * MIN, (RECENT[1], RECENT[1]), CatchUpPlan((RECENT[1],), (), 0)),
    ],
)
def test_plan_catch_up(policy, window_ms, missed, expected):
    assert plan_catch_up(policy, window_ms, list(missed), NOW) == expected


@pytest.mark.parametrize("policy", list(CatchUp))
@pytest.mark.parametrize("window_ms", [0, MIN, 10 * MIN, 10 * HOUR])
def test_plan_catch_up_accounts_for_every_slot(policy, window_ms):
    # Every missed slot is run, skipped or counted as beyond: none vanishes.
    missed = OLD + RECENT
    plan = plan_catch_up(policy, window_ms, missed, NOW)
    assert sorted(plan.run + plan.skip) == [s for s in missed if s >= NOW - window_ms]
    assert len(plan.run) + len(plan.skip) + plan.beyond_window == len(missed)
    assert not set(plan.run) & set(plan.skip)


@pytest.mark.parametrize(
    "window_ms, missed",
    [
        (-1, RECENT),  # a negative window means nothing
        (10 * MIN, RECENT + (NOW + 1,)),  # a future slot is not missed
    ],
)
def test_plan_catch_up_rejects_caller_bugs(window_ms, missed):
    with pytest.raises(ValueError):
        plan_catch_up(CatchUp.ALL, window_ms, missed, NOW)


@pytest.mark.parametrize(
    "policy, running_now, allowed",
    [
        (Overlap.SKIP, 0, True),
        (Overlap.SKIP, 1, False),
        (Overlap.SKIP, 5, False),
        (Overlap.ALLOW, 0, True),
        (Overlap.ALLOW, 1, True),
        (Overlap.ALLOW, 5, True),
    ],
)
def test_overlap_allows(policy, running_now, allowed):
    assert overlap_allows(policy, running_now) is allowed


@pytest.mark.parametrize("policy", list(Overlap))
def test_every_overlap_policy_allows_a_start_when_nothing_runs(policy):
    # The dispatcher skips the policy call when nothing of the job runs: a new policy must keep this true.
    assert overlap_allows(policy, 0) is True


def test_overlap_rejects_negative_count():
    with pytest.raises(ValueError):
        overlap_allows(Overlap.SKIP, -1)


START, SKIP, WAIT = OverlapVerdict.START, OverlapVerdict.SKIP, OverlapVerdict.WAIT


@pytest.mark.parametrize(
    "policy, going, earlier_unstarted, catch_up, verdict",
    [
        pytest.param(Overlap.SKIP, 0, False, False, START, id="skip: nothing goes, nothing waits ahead: start"),
        pytest.param(Overlap.SKIP, 0, False, True, START, id="skip: a catch-up slot with nothing going starts"),
        pytest.param(Overlap.SKIP, 1, False, False, SKIP, id="skip: a started run goes: the live slot is skipped"),
        pytest.param(Overlap.SKIP, 2, False, False, SKIP, id="skip: several going (allow before a re-put)"),
        pytest.param(Overlap.SKIP, 1, False, True, WAIT, id="skip: a catch-up slot waits for the run, not skipped"),
        pytest.param(
            Overlap.SKIP,
            0,
            True,
            False,
            WAIT,
            id="skip: an earlier slot claimed, not started: the live slot waits its turn",
        ),
        pytest.param(
            Overlap.SKIP,
            1,
            True,
            False,
            WAIT,
            id="skip: a run goes AND an earlier slot waits: wait (judged when it is its turn)",
        ),
        pytest.param(Overlap.SKIP, 0, True, True, WAIT, id="skip: catch-up slots start in slot order"),
        pytest.param(Overlap.SKIP, 1, True, True, WAIT, id="skip: a catch-up slot behind another and a run"),
        pytest.param(Overlap.ALLOW, 0, False, False, START, id="allow: start"),
        pytest.param(Overlap.ALLOW, 3, False, False, START, id="allow: runs going do not matter"),
        pytest.param(Overlap.ALLOW, 3, True, False, START, id="allow: unstarted earlier slots do not matter"),
        pytest.param(Overlap.ALLOW, 1, True, True, START, id="allow: a catch-up slot starts at once"),
    ],
)
def test_overlap_verdict(policy, going, earlier_unstarted, catch_up, verdict):
    assert overlap_verdict(policy, going=going, earlier_unstarted=earlier_unstarted, catch_up=catch_up) is verdict


@pytest.mark.parametrize("policy", list(Overlap))
def test_every_overlap_verdict_starts_a_slot_with_nothing_going_or_waiting(policy):
    # A job with no line is started without asking (Scheduler._start): a new policy must keep this true.
    assert overlap_verdict(policy, going=0, earlier_unstarted=False, catch_up=False) is START


def test_overlap_verdict_rejects_a_negative_count():
    with pytest.raises(ValueError):
        overlap_verdict(Overlap.SKIP, going=-1, earlier_unstarted=False, catch_up=False)


NO_RETRY = RetryPolicy(max_attempts=1)
THREE = RetryPolicy(max_attempts=3)


@pytest.mark.parametrize(
    "status, attempt, retry, could_have_started, action",
    [
        # provably never started: run it as if fresh, whatever the budget
        (TickStatus.CLAIMED, 0, NO_RETRY, False, OrphanAction.RECLAIM),
        (TickStatus.CLAIMED, 0, THREE, False, OrphanAction.RECLAIM),
        (TickStatus.CLAIMED, 3, THREE, False, OrphanAction.RECLAIM),
        # claimed, but the executor may have started: at-least-once
        (TickStatus.CLAIMED, 0, NO_RETRY, True, OrphanAction.RETRY),
        (TickStatus.CLAIMED, 1, NO_RETRY, True, OrphanAction.ABANDON),
        (TickStatus.CLAIMED, 2, THREE, True, OrphanAction.RETRY),
        (TickStatus.CLAIMED, 3, THREE, True, OrphanAction.ABANDON),
        # running: it started, whatever could_have_started says
        (TickStatus.RUNNING, 1, NO_RETRY, False, OrphanAction.ABANDON),
        (TickStatus.RUNNING, 1, NO_RETRY, True, OrphanAction.ABANDON),
        (TickStatus.RUNNING, 1, THREE, False, OrphanAction.RETRY),
        (TickStatus.RUNNING, 2, THREE, True, OrphanAction.RETRY),
        (TickStatus.RUNNING, 3, THREE, True, OrphanAction.ABANDON),
        (TickStatus.RUNNING, 4, THREE, True, OrphanAction.ABANDON),
    ],
)
def test_settle_orphan(status, attempt, retry, could_have_started, action):
    assert settle_orphan(status, attempt, retry, could_have_started) is action


@pytest.mark.parametrize("status", [TickStatus.SUCCEEDED, TickStatus.FAILED, TickStatus.SKIPPED, TickStatus.ABANDONED])
def test_settle_orphan_refuses_final_ticks(status):
    with pytest.raises(ValueError):
        settle_orphan(status, 1, THREE, True)


@pytest.mark.parametrize(
    "initial, cap, attempt, expected",
    [
        (1_000, 60_000, 1, 1_000),
        (1_000, 60_000, 2, 2_000),
        (1_000, 60_000, 3, 4_000),
        (1_000, 60_000, 6, 32_000),
        (1_000, 60_000, 7, 60_000),  # 64s, capped
        (1_000, 60_000, 100, 60_000),
        (1_000, 60_000, 10**9, 60_000),  # no giant integers on the way
        (250, 1_000, 3, 1_000),  # exactly at the cap
        (250, 999, 3, 999),
        (5_000, 1_000, 1, 1_000),  # a cap below the initial delay wins
    ],
)
def test_backoff_ms(initial, cap, attempt, expected):
    retry = RetryPolicy(max_attempts=100, backoff_initial_ms=initial, backoff_max_ms=cap)
    assert backoff_ms(retry, attempt) == expected


@pytest.mark.parametrize("attempt", [0, -1])
def test_backoff_attempts_count_from_one(attempt):
    with pytest.raises(ValueError):
        backoff_ms(RetryPolicy(), attempt)


# -- a claimed slot of a job changed since its claim --------------------------------------------------


@pytest.mark.parametrize(
    "paused, active_since, produces, slot, expected",
    [
        (False, 1_000, True, 2_000, None),  # unchanged: runs
        (True, 1_000, True, 2_000, PAUSED_SKIP_REASON),  # paused within the lookahead
        (True, 3_000, False, 2_000, PAUSED_SKIP_REASON),  # paused: whatever the schedule
        (False, 1_000, False, 2_000, RESCHEDULED_SKIP_REASON),  # the new schedule has no slot there
        (False, 2_000, False, 2_000, None),  # owed by the old definition (at its activation)
        (False, 3_000, False, 2_000, None),  # a late catch-up slot of the old definition
        (False, 1_999, False, 2_000, RESCHEDULED_SKIP_REASON),
    ],
)
def test_disowned_slot(paused, active_since, produces, slot, expected):
    assert disowned_slot(paused=paused, active_since_ms=active_since, produces_slot=produces, slot_ms=slot) == expected
