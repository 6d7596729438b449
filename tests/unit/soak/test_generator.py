"""The soak generator's pure decisions (next operation, outcome classification, the model's transitions) and
the static workload's (job ids on every shard, the jobs file with its calendar), without a cluster."""

from __future__ import annotations

import random
from collections import Counter

import grpc
import pytest

from shardcron.client.errors import ApiError, NotFound, Unavailable
from shardcron.sharding import shard_for
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from shardcron.spec.jobfile import load_file_calendars, load_job_file
from tests.faults import harness
from tests.faults.soak import generator as g
from tests.faults.soak import workload as w

T0 = 1_800_000_000_000
ACTIVE = g.DynJob(g.JobPhase.ACTIVE, {"id": "dyn-0", "every": "1s"})
PAUSED = g.DynJob(g.JobPhase.PAUSED, {"id": "dyn-0", "every": "1s"})


# -- classification -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, outcome",
    [
        (None, "ok"),
        (grpc.StatusCode.OK, "ok"),
        (grpc.StatusCode.INVALID_ARGUMENT, "fail"),
        (grpc.StatusCode.NOT_FOUND, "fail"),
        (grpc.StatusCode.ALREADY_EXISTS, "fail"),
        (grpc.StatusCode.PERMISSION_DENIED, "fail"),
        (grpc.StatusCode.UNAUTHENTICATED, "fail"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "fail"),
        (grpc.StatusCode.OUT_OF_RANGE, "fail"),
        # a ShardcronError raised after the store write (telling the scheduler) is FAILED_PRECONDITION too
        (grpc.StatusCode.FAILED_PRECONDITION, "info"),
        (grpc.StatusCode.ABORTED, "info"),
        (grpc.StatusCode.UNAVAILABLE, "info"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "info"),
        (grpc.StatusCode.INTERNAL, "info"),
        (grpc.StatusCode.UNKNOWN, "info"),
        (grpc.StatusCode.CANCELLED, "info"),
    ],
)
def test_classify(code, outcome):
    assert g.classify(code) == outcome


@pytest.mark.parametrize(
    "exc, outcome, error",
    [
        (None, "ok", None),
        (NotFound(grpc.StatusCode.NOT_FOUND, "job 'dyn-1' not found"), "fail", "NOT_FOUND: job 'dyn-1' not found"),
        (
            Unavailable(grpc.StatusCode.UNAVAILABLE, "shard 3 has no leader"),
            "info",
            "UNAVAILABLE: shard 3 has no leader",
        ),
        (ApiError(grpc.StatusCode.DEADLINE_EXCEEDED, ""), "info", "DEADLINE_EXCEEDED: deadline exceeded"),
        (ConnectionResetError("reset by peer"), "info", "ConnectionResetError: reset by peer"),
        (ValueError("a bug of ours"), "info", "ValueError: a bug of ours"),
    ],
)
def test_outcome_of_any_exception(exc, outcome, error):
    assert g.outcome_of(exc) == (outcome, error)


# -- the model's transitions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job, planned, outcome, result, expected_state",
    [
        (g.DynJob(), g.Planned("put", "dyn-0", {"every": "2s"}), "ok", {"paused": False}, g.JobPhase.ACTIVE),
        (
            g.DynJob(),
            g.Planned("put", "dyn-0", {"every": "2s", "paused": True}),
            "ok",
            {"paused": True},
            g.JobPhase.PAUSED,
        ),
        (PAUSED, g.Planned("put", "dyn-0", {"every": "2s"}), "ok", {"paused": False}, g.JobPhase.ACTIVE),
        (ACTIVE, g.Planned("pause", "dyn-0"), "ok", {"paused": True}, g.JobPhase.PAUSED),
        (PAUSED, g.Planned("resume", "dyn-0"), "ok", {"paused": False}, g.JobPhase.ACTIVE),
        (ACTIVE, g.Planned("delete", "dyn-0"), "ok", None, g.JobPhase.ABSENT),
        (ACTIVE, g.Planned("trigger", "dyn-0"), "ok", {"slot_ms": T0}, g.JobPhase.ACTIVE),
        (PAUSED, g.Planned("backfill", "dyn-0", back_s=5, rate_per_s=2.0), "ok", {"id": "b"}, g.JobPhase.PAUSED),
        (ACTIVE, g.Planned("pause", "dyn-0"), "fail", None, g.JobPhase.ACTIVE),
        (g.DynJob(), g.Planned("delete", "dyn-0"), "fail", None, g.JobPhase.ABSENT),
        (ACTIVE, g.Planned("pause", "dyn-0"), "info", None, g.JobPhase.UNKNOWN),
        (ACTIVE, g.Planned("trigger", "dyn-0"), "info", None, g.JobPhase.UNKNOWN),
        (g.DynJob(), g.Planned("put", "dyn-0", {"every": "1s"}), "info", None, g.JobPhase.UNKNOWN),
    ],
)
def test_after(job, planned, outcome, result, expected_state):
    got = g.after(job, planned, outcome, result, T0)
    assert got.state is expected_state
    if expected_state is g.JobPhase.UNKNOWN:
        assert got.repair_at_ms == T0 + g.INDETERMINATE_TAIL_MS
    if planned.kind == "put" and outcome == "ok":
        assert got.spec == planned.spec


def test_an_unknown_job_is_left_alone_for_the_tail_then_re_put_first():
    jobs = {"dyn-0": g.DynJob(g.JobPhase.UNKNOWN, None, T0 + g.INDETERMINATE_TAIL_MS), "dyn-1": ACTIVE}
    rng = random.Random(1)
    for _ in range(300):
        p = g.next_op(jobs, ["noop-00-0"], rng, T0 + g.INDETERMINATE_TAIL_MS - 1)
        assert p.job != "dyn-0"
    p = g.next_op(jobs, ["noop-00-0"], rng, T0 + g.INDETERMINATE_TAIL_MS)
    assert (p.kind, p.job) == ("put", "dyn-0")
    job_from_dict(p.spec, require_executor=True)


def test_nothing_to_do_when_every_job_is_in_its_tail_and_there_is_no_static_job():
    jobs = {"dyn-0": g.DynJob(g.JobPhase.UNKNOWN, None, T0 + 1)}
    assert g.next_op(jobs, [], random.Random(0), T0) is None


def _valid(planned: g.Planned, job: g.DynJob | None, at_ms: int) -> bool:
    """Whether ``planned`` is an operation the generator may choose at ``at_ms`` for ``job`` (None: static)."""
    if job is None:
        return planned.kind in ("trigger", "backfill")
    if job.state is g.JobPhase.UNKNOWN:
        return planned.kind == "put" and at_ms >= job.repair_at_ms
    return (
        planned.kind
        in {
            g.JobPhase.ABSENT: {"put"},
            g.JobPhase.ACTIVE: {"put", "pause", "delete", "trigger", "backfill"},
            g.JobPhase.PAUSED: {"put", "resume", "delete", "backfill"},
        }[job.state]
    )


@pytest.mark.parametrize("seed", range(5))
def test_random_walks_choose_only_valid_ops_and_cover_every_kind(seed):
    rng = random.Random(seed)
    jobs = {f"dyn-{k}": g.DynJob() for k in range(g.DYN_JOBS)}
    static = ["noop-00-0", "session"]
    kinds: Counter = Counter()
    t = T0
    for _ in range(600):
        t += 1000
        p = g.next_op(jobs, static, rng, t)
        job = jobs.get(p.job)
        assert _valid(p, job, t), (p, job)
        state = job.state if job else None
        kinds[p.kind] += 1
        if p.kind == "put":
            job_from_dict(p.spec, require_executor=True)  # every spec is one the API admits
        if p.kind == "backfill":
            assert g.BACKFILL_BACK_S[0] <= p.back_s <= g.BACKFILL_BACK_S[1] and p.rate_per_s > 0
        if p.job in jobs:
            outcome = rng.choice(["ok", "ok", "ok", "fail", "info"])
            paused = (
                p.kind == "pause"
                or (p.kind == "put" and bool(p.spec.get("paused")))
                or (p.kind not in ("put", "resume") and state is g.JobPhase.PAUSED)
            )
            jobs[p.job] = g.after(jobs[p.job], p, outcome, {"paused": paused}, t)
    assert set(kinds) == {"put", "pause", "resume", "delete", "trigger", "backfill"}, kinds


def test_the_choice_sequence_is_the_seeds():
    def walk(seed: int) -> list:
        rng = random.Random(seed)
        jobs = {f"dyn-{k}": g.DynJob() for k in range(3)}
        out = []
        for i in range(100):
            p = g.next_op(jobs, ["s"], rng, T0 + i)
            out.append(p)
            if p.job in jobs:
                jobs[p.job] = g.after(jobs[p.job], p, "ok", {"paused": p.kind == "pause"}, T0 + i)
        return out

    assert walk(7) == walk(7)
    assert walk(7) != walk(8)


def test_a_schedule_change_picks_another_schedule():
    rng = random.Random(3)
    for current in g.SCHEDULES:
        for _ in range(20):
            spec = g.random_spec("dyn-2", rng, {"id": "dyn-2", **current})
            assert {k: v for k, v in spec.items() if k in ("every", "cron", "jitter")} != current


def test_backfill_range_is_past_whole_seconds():
    f, t = g.backfill_range(T0 + 2_345, 7)
    assert t % 1000 == 0 and t <= T0 + 2_345 - g.BACKFILL_LAG_MS
    assert t - f == 7_000


# -- the static workload ------------------------------------------------------------------------------


@pytest.mark.parametrize("shards", [1, 12, 64])
def test_noop_ids_put_one_job_on_every_shard(shards):
    ids = w.noop_ids(shards)
    assert sorted(shard_for(i, shards) for i in ids) == list(range(shards))


def test_the_jobs_file_with_its_calendar_loads_as_a_node_reads_it(tmp_path):
    defs = w.static_jobs(
        shards=12, run_s=55, stream_url="redis://10.200.1.1:40000/0", stream_key="soak:x:stream", stream_job="stream-x"
    )
    cal = w.exclusion_calendar(T0 + 123, T0 + 120_000)
    path = harness.write_jobs(tmp_path / "jobs.toml", defs)
    with open(path, "a") as f:
        f.write("\n" + w.calendars_toml({w.CALENDAR: cal}))
    loaded = {j.id: j for j in load_job_file(path)}
    assert set(loaded) == {d.id for d in defs}
    for j in loaded.values():
        assert (j.catchup.value, j.overlap.value) == ("all", "allow")
        assert j.catchup_window_ms >= 55_000 + 3600_000
    assert loaded[w.CALENDAR_JOB].calendars == (w.CALENDAR,)
    assert loaded[w.SESSION_JOB].executor.python.session is True
    assert loaded["stream-x"].executor.redis_stream.stream == "soak:x:stream"
    assert loaded["cron-2s"].schedule.cron == "*/2 * * * * *" and loaded["jitter-2s"].jitter_ms == 700
    [from_file] = load_file_calendars(path)
    assert from_file == parse_calendar(w.CALENDAR, cal)  # what the checker parses from history.calendars
    assert from_file.excluded_ranges[0] == (T0 + 1000, T0 + 1000 + w.EXCLUDED_S * 1000)
    assert not from_file.allows(T0 + 1000) and from_file.allows(T0 + 1000 + w.EXCLUDED_S * 1000)
    assert len(from_file.excluded_ranges) == 6  # one every 20 s over 120 s
