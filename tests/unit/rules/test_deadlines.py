"""The deadlines' pure rules: which judgements a slot gets, and when a row missed one."""

from __future__ import annotations

import pytest

from shardcron.errors import InvalidJob
from shardcron.model import Tick, TickStatus
from shardcron.rules.deadlines import (
    JUDGE_GRACE_MS,
    MIN_LOOKBACK_MS,
    DeadlineKind,
    Judgement,
    SlotState,
    describe_miss,
    has_deadlines,
    judgements_for,
    lookback_since_ms,
    missed,
    unraised,
)
from shardcron.spec.job import job_from_dict

S, R, OK, F = TickStatus.SKIPPED, TickStatus.RUNNING, TickStatus.SUCCEEDED, TickStatus.FAILED


def job(**deadlines):
    return job_from_dict({"id": "j", "every": "1m", **deadlines})


def test_a_slot_gets_one_judgement_per_deadline_of_its_job():
    assert judgements_for(job(), 60_000) == [] and not has_deadlines(job())
    got = judgements_for(job(start_deadline="10s", deadline="30m", heartbeat="1h"), 60_000)
    assert [(j.kind, j.due_ms, j.needs_ack) for j in got] == [
        (DeadlineKind.START, 70_000, True),
        (DeadlineKind.FINISH, 60_000 + 1_800_000, True),
        (DeadlineKind.HEARTBEAT, 60_000 + 3_600_000, True),
    ]
    assert got[0].judge_at_ms == 70_000 + JUDGE_GRACE_MS
    assert [j.needs_ack for j in judgements_for(job(deadline="30m"), 0)] == [False]


@pytest.mark.parametrize(
    ("kind", "needs_ack", "state", "expected"),
    [
        # start: by the due time, or never
        (DeadlineKind.START, False, None, True),
        (DeadlineKind.START, False, SlotState(TickStatus.CLAIMED), True),
        (DeadlineKind.START, False, SlotState(S, None, 50), True),
        (DeadlineKind.START, False, SlotState(R, 100), False),
        (DeadlineKind.START, False, SlotState(R, 101), True),
        # finish: succeeded by the due time (and acked by then, with a heartbeat)
        (DeadlineKind.FINISH, False, SlotState(OK, 10, 100), False),
        (DeadlineKind.FINISH, False, SlotState(OK, 10, 101), True),
        (DeadlineKind.FINISH, False, SlotState(F, 10, 20), True),
        (DeadlineKind.FINISH, False, SlotState(R, 10), True),
        (DeadlineKind.FINISH, True, SlotState(OK, 10, 20), True),
        (DeadlineKind.FINISH, True, SlotState(OK, 10, 20, 100), False),
        (DeadlineKind.FINISH, True, SlotState(OK, 10, 20, 101), True),
        # heartbeat: acked by the due time, whatever the run did
        (DeadlineKind.HEARTBEAT, False, SlotState(F, 10, 20, 90), False),
        (DeadlineKind.HEARTBEAT, False, SlotState(OK, 10, 20), True),
    ],
)
def test_missed(kind, needs_ack, state, expected):
    j = Judgement("j", 0, kind, 100, needs_ack)
    assert missed(j, state) is expected
    assert describe_miss(j, state)  # every case has its one line


def test_deadlines_are_checked_where_a_job_is_written():
    with pytest.raises(InvalidJob, match="deadline: must be at least 1000 ms"):
        job(deadline="500ms")
    with pytest.raises(InvalidJob, match="start_deadline: must be longer than the job's jitter"):
        job(start_deadline="5s", jitter="5s")
    with pytest.raises(InvalidJob, match="heartbeat"):
        job(heartbeat="soon")
    assert job(start_deadline="6s", jitter="5s").start_deadline_ms == 6_000


def test_the_audit_finds_a_miss_the_rule_sees_and_no_row_records():
    j = job(deadline="10s")
    late = Tick("j", 0, 0, 1, "n", OK, 1, started_at_ms=5, finished_at_ms=20_000)
    recorded = Tick(
        "j", 60_000, 0, 1, "n", OK, 1, started_at_ms=5, finished_at_ms=90_000, missed_deadlines=("deadline",)
    )
    on_time = Tick("j", 120_000, 0, 1, "n", OK, 1, started_at_ms=5, finished_at_ms=125_000)
    manual = Tick("j", 130_000, 0, 1, "n", F, 1, manual=True, started_at_ms=5, finished_at_ms=131_000)
    not_judged_yet = Tick("j", 180_000, 0, 1, "n", R, 1, started_at_ms=180_001)
    rows = [late, recorded, on_time, manual, not_judged_yet]
    got = unraised(j, rows, judged_before_ms=185_000)
    assert [(u.scheduled_at_ms, u.kind) for u in got] == [(0, DeadlineKind.FINISH)]


def test_a_new_leader_looks_back_over_the_longest_deadline_and_the_catch_up_window():
    now = 100 * 3_600_000
    j = job(start_deadline="2m", deadline="30m", catchup_window="6h")
    assert lookback_since_ms(j, now) == now - 1_800_000 - JUDGE_GRACE_MS - 6 * 3_600_000
    short = job(deadline="10s", catchup_window="5m")  # at least an hour
    assert lookback_since_ms(short, now) == now - 10_000 - JUDGE_GRACE_MS - MIN_LOOKBACK_MS
