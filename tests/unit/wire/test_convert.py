"""Proto <-> model conversion, status mapping and the watch queue: pure logic, table-driven."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from sqlalchemy.exc import DataError

from shardcron.wire.convert import (
    BadRequest,
    decode_page_token,
    encode_page_token,
    job_dict_from_proto,
    job_from_proto,
    job_to_proto,
    put_job_request_bytes,
    shard_map_from_proto,
    shard_map_to_proto,
    stored_job_from_proto,
    tick_event_to_proto,
    tick_from_proto,
    tick_to_proto,
)
from shardcron.api.routing import Deadline
from shardcron.api.status import CallFailed, clip, retry_hint, status_for
from shardcron.api.watch import WatcherQueue
from shardcron.errors import (
    FencedOut,
    InvalidJob,
    JobNotFound,
    StoreUnavailable,
    TriggerBusy,
    VersionConflict,
)
from shardcron.spec.job import job_from_dict
from shardcron.model import Tick, TickStatus
from shardcron.v1 import scheduler_pb2 as pb

JOBS = [
    {"id": "cron", "cron": "*/5 * * * *", "timezone": "Europe/Lisbon", "executor": {"kind": "noop"}},
    {"id": "every", "every": "90s", "catchup": "latest", "catchup_window": "0s", "overlap": "allow",
     "timeout": "2m", "retry": {"max_attempts": 3, "backoff": "250ms", "backoff_max": "10s"},
     "labels": {"team": "a", "tier": "1"}, "paused": True, "executor": {"kind": "shell", "command": "echo hi"}},
    {"id": "once", "at": "2030-01-01T09:00:00+01:00", "catchup": "none",
     "executor": {"kind": "http", "url": "https://example.com/x", "method": "PUT", "body": "{}",
                  "headers": {"Authorization": "Bearer s3cret", "X-A": "1"}, "secret_headers": ["authorization"]}},
]


@pytest.mark.parametrize("d", JOBS, ids=[j["id"] for j in JOBS])
def test_a_job_survives_model_to_proto_to_model(d):
    job = job_from_dict(d)
    back = job_from_proto(job_to_proto(job, redact=False))
    assert back == job


def test_answers_mask_secret_header_values_and_only_them():
    job = job_from_dict(JOBS[2])
    headers = {h.name: h.value for h in job_to_proto(job, redact=True).http.headers}
    assert headers == {"Authorization": "***", "X-A": "1"}


def test_a_serialized_put_request_holds_the_job_as_defined_secrets_included():
    job = job_from_dict(JOBS[2])
    req = pb.PutJobRequest.FromString(put_job_request_bytes(job))
    assert job_from_proto(req.job) == job and not req.HasField("expected_version")


def test_unset_fields_take_jobspec_defaults():
    p = pb.Job(id="a", schedule=pb.Schedule(interval_ms=1000), noop=pb.NoopExecutor())
    assert job_from_proto(p) == job_from_dict({"id": "a", "interval_ms": 1000, "executor": {"kind": "noop"}})
    assert job_dict_from_proto(p) == {"id": "a", "schedule": {"interval_ms": 1000}, "executor": {"kind": "noop"}}


def test_store_assigned_fields_are_kept_when_reading_an_answer_but_ignored_in_a_request():
    p = job_to_proto(job_from_dict(JOBS[0]), redact=True)
    p.version, p.active_since_ms = 7, 123
    assert job_from_proto(p).version == 0
    stored = stored_job_from_proto(p)
    assert (stored.version, stored.active_since_ms) == (7, 123)


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p.ClearField("executor"), "executor"),  # no executor is an error, never a noop
    (lambda p: setattr(p, "catchup", 9), "catchup"),
    (lambda p: setattr(p, "overlap", -1), "overlap"),
    (lambda p: setattr(p, "timeout_ms", 0), "timeout"),
    (lambda p: setattr(p, "catchup_window_ms", -5), "catchup_window"),
    (lambda p: p.retry.SetInParent() or setattr(p.retry, "max_attempts", 0), "retry.max_attempts"),
    (lambda p: p.schedule.ClearField("kind"), "schedule"),
    (lambda p: setattr(p.schedule, "interval_ms", -1), "schedule.interval_ms"),
    (lambda p: setattr(p.schedule, "timezone", "Mars/Olympus"), "timezone"),
    (lambda p: setattr(p, "id", ""), "id"),
])
def test_each_bad_field_is_named(mutate, field):
    p = pb.Job(id="a", schedule=pb.Schedule(interval_ms=1000), noop=pb.NoopExecutor())
    mutate(p)
    with pytest.raises(InvalidJob) as e:
        job_from_proto(p)
    assert e.value.field == field


def test_ticks_round_trip_with_their_optional_fields():
    full = Tick("a", 1000, 3, 17, "n1", TickStatus.SUCCEEDED, attempt=2, manual=True, claimed_at_ms=990,
                started_at_ms=1000, finished_at_ms=1500, exit_code=0, http_status=None, output="ok", error=None)
    assert tick_from_proto(tick_to_proto(full)) == full
    bare = Tick("a", 1000, 0, 1, "n0", TickStatus.CLAIMED)
    assert tick_from_proto(tick_to_proto(bare)) == bare


def test_a_tick_event_becomes_a_tick_with_the_dropped_count():
    ev = Tick("a", 1000, 1, 5, "n0", TickStatus.FAILED, 1, started_at_ms=1000, finished_at_ms=1200, error="boom")
    p = tick_event_to_proto(ev, dropped=3)
    assert p.dropped == 3
    t = tick_from_proto(p.tick)
    assert (t.status, t.error, t.finished_at_ms, t.output) == (TickStatus.FAILED, "boom", 1200, None)


def test_the_shard_map_round_trips():
    m = {"prefix": "/cron", "shard_count": 2, "revision": 9,
         "shards": [{"shard": 0, "leader": "n0", "address": "h:1", "fence": 4, "leader_since_ms": 5,
                     "candidates": 2, "jobs": 10, "state": "leading"},
                    {"shard": 1, "leader": None, "address": None, "fence": None, "leader_since_ms": None,
                     "candidates": 0, "jobs": None, "state": "no leader"}],
         "nodes": [{"node": "n0", "address": "h:1", "started_at_ms": 3, "leads": 1, "fair_share": "1",
                    "draining": False}],
         "reshard": None}
    assert shard_map_from_proto(shard_map_to_proto(m)) == m
    m["reshard"] = {"from": 2, "to": 4, "state": "draining", "requested_at_ms": 12}
    assert shard_map_from_proto(shard_map_to_proto(m)) == m


def test_page_tokens_round_trip_and_garbage_is_a_bad_request():
    assert decode_page_token(encode_page_token("job/é 1")) == "job/é 1"
    assert decode_page_token("") is None
    with pytest.raises(BadRequest) as e:
        decode_page_token("!!!")
    assert e.value.field == "page_token"


@pytest.mark.parametrize("exc, code", [
    (InvalidJob("schedule.cron", "bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (BadRequest("page_size", "bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (JobNotFound("a"), grpc.StatusCode.NOT_FOUND),
    (VersionConflict("a", 1, 2), grpc.StatusCode.ABORTED),
    (FencedOut(3, 4, 5), grpc.StatusCode.UNAVAILABLE),
    (StoreUnavailable("db down"), grpc.StatusCode.UNAVAILABLE),
    (TriggerBusy("a", 1), grpc.StatusCode.UNAVAILABLE),
    (CallFailed(grpc.StatusCode.PERMISSION_DENIED, "no"), grpc.StatusCode.PERMISSION_DENIED),
    (KeyError("bug"), grpc.StatusCode.INTERNAL),
    (DataError("INSERT", {}, ValueError("PostgreSQL text fields cannot contain NUL (0x00) bytes")),
     grpc.StatusCode.INVALID_ARGUMENT),
])
def test_status_mapping(exc, code):
    assert status_for(exc)[0] is code


def test_only_leadership_changes_carry_the_retry_hint():
    assert retry_hint(FencedOut(1, 2, 3))
    assert retry_hint(CallFailed(grpc.StatusCode.UNAVAILABLE, "x", retry=True))
    assert not retry_hint(StoreUnavailable("db down"))


def test_long_details_are_cut_to_fit_a_header():
    assert clip("short") == "short"
    cut = clip("é" * 5000)
    assert len(cut.encode()) < 1100 and cut.endswith("(cut)")


class _Ctx:
    def __init__(self, remaining):
        self._remaining = remaining

    def time_remaining(self):
        return self._remaining


@pytest.mark.parametrize("remaining, expected", [(None, 29.8), (1e9, 29.8), (1.0, 0.9), (0.1, 0.09)])
def test_deadline_defaults_to_30s_and_leaves_a_margin_to_answer(remaining, expected):
    assert Deadline.of(_Ctx(remaining)).remaining() == pytest.approx(expected, abs=0.02)


def test_the_watch_queue_drops_the_oldest_and_counts():
    def event(at_ms: int) -> pb.TickEvent:
        return pb.TickEvent(tick=pb.Tick(job_id="j", scheduled_at_ms=at_ms))

    async def scenario():
        q = WatcherQueue(limit=3)
        for i in range(5):
            q.put(event(i))
        got = [await q.get(0) for _ in range(3)]
        return [(e.tick.scheduled_at_ms, e.dropped) for e in got], await q.get(0.01)

    events, after = asyncio.run(scenario())
    assert events == [(2, 2), (3, 0), (4, 0)]  # the first event after a drop says how many went
    assert after is None


@pytest.mark.parametrize("watching, job_id, wanted", [("", "a", True), ("a", "a", True), ("a", "b", False)])
def test_a_watcher_queue_wants_its_job_or_all(watching, job_id, wanted):
    async def scenario():
        return WatcherQueue(watching).wants(job_id)

    assert asyncio.run(scenario()) is wanted
