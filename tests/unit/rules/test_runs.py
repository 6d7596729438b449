"""Next and last run, pure: failures in a row over status sequences, the next owed slot (with
jitter, pause, a job's start, a single run, a calendar), and the proto round trip."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardcron.model import JobRuns, TickStatus
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.runs import failures_in_a_row, job_runs, next_run
from shardcron.rules.triggers import trigger_for
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.tick_convert import job_runs_from_proto, job_runs_to_proto

OK, FAIL, GONE, SKIP = TickStatus.SUCCEEDED, TickStatus.FAILED, TickStatus.ABANDONED, TickStatus.SKIPPED
CLAIMED, RUNNING = TickStatus.CLAIMED, TickStatus.RUNNING


@pytest.mark.parametrize(
    "newest_first, expected",
    [
        ([], 0),
        ([OK], 0),
        ([FAIL], 1),
        ([FAIL, FAIL, FAIL], 3),
        ([FAIL, FAIL, OK, FAIL, FAIL], 2),  # stops at the first success
        ([OK, FAIL, FAIL], 0),  # recovered
        ([GONE, FAIL], 2),  # abandoned (the leader died, retries spent) counts as a failure
        ([FAIL, SKIP, FAIL, OK], 2),  # a skip neither breaks nor extends the run
        ([SKIP, SKIP, OK, FAIL], 0),
        ([SKIP], 0),
        ([RUNNING, CLAIMED, FAIL, OK], 1),  # unfinished ticks pass over
    ],
)
def test_failures_in_a_row(newest_first, expected):
    assert failures_in_a_row(newest_first) == expected


S, M = 1000, 60_000
NOW = 1_700_000_010_000  # 30 s past a whole minute


def job(**over):
    return job_from_dict({"id": "j", "every": "1m", **over})


def test_the_next_slot_of_a_job_without_jitter_is_the_triggers_next():
    j = job()
    got = next_run(j, trigger_for(j.schedule), NOW)
    assert (got.slot_ms, got.start_ms) == (NOW - 30 * S + M, NOW - 30 * S + M)


def test_a_jittered_slot_past_but_not_started_is_still_next():
    # Find a slot whose offset is over 30 s: at NOW (30 s after it) it has not started.
    jitter = 59 * S
    base = NOW - 30 * S
    k = next(k for k in range(1000) if jitter_offset_ms("j", base + k * M, jitter) > 30 * S)
    slot = base + k * M
    now = slot + 30 * S
    got = next_run(job(jitter="59s"), trigger_for(job().schedule), now)
    assert (got.slot_ms, got.start_ms) == (slot, slot + jitter_offset_ms("j", slot, jitter))
    # Once it started, the next one is the following slot, at its own offset.
    started = slot + jitter_offset_ms("j", slot, jitter)
    got = next_run(job(jitter="59s"), trigger_for(job().schedule), started)
    assert (got.slot_ms, got.start_ms) == (slot + M, slot + M + jitter_offset_ms("j", slot + M, jitter))


@pytest.mark.parametrize(
    "j, expected",
    [
        (replace(job(), paused=True), None),
        (replace(job(), active_since_ms=NOW + 5 * M), NOW - 30 * S + 6 * M),  # nothing owed before it took effect
        (job_from_dict({"id": "j", "at_ms": NOW - M}), None),  # a single run already past
        (job_from_dict({"id": "j", "at_ms": NOW + M}), NOW + M),
        (job_from_dict({"id": "j", "at_ms": NOW + 3650 * 86_400_000}), NOW + 3650 * 86_400_000),  # ten years on
    ],
)
def test_next_slot_cases(j, expected):
    got = next_run(j, trigger_for(j.schedule), NOW)
    assert (got and got.slot_ms) == expected


def test_a_calendar_moves_the_next_slot_and_says_why():
    # Calendars are not wired to jobs yet; next_run takes them already.
    closed = parse_calendar("closed", {"exclude_ranges": [{"from": NOW, "to": NOW + 10 * M}]})
    j = job()
    got = next_run(j, trigger_for(j.schedule), NOW, [closed])
    assert got.slot_ms == NOW - 30 * S + 11 * M and got.skipped_ms == NOW - 30 * S + M and got.skip_reason


def test_job_runs_and_its_proto_round_trip():
    runs = job_runs(job(), NOW, last_scheduled_at_ms=NOW - 30 * S, last_status=FAIL, failures=4)
    assert runs == JobRuns(NOW, NOW + 30 * S, NOW + 30 * S, NOW - 30 * S, FAIL, 4)
    missed = job_runs(
        job(), NOW, last_scheduled_at_ms=NOW - 30 * S, last_missed_deadlines=("start_deadline", "deadline")
    )
    assert missed.last_missed_deadlines == ("start_deadline", "deadline") and missed.next_slot_ms == NOW + 30 * S
    for r in (runs, missed, JobRuns(NOW), job_runs(replace(job(), paused=True), NOW)):
        assert job_runs_from_proto(pb.JobRuns.FromString(job_runs_to_proto(r).SerializeToString())) == r
