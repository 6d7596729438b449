"""Jobs between protobuf and ``model.Job``: round trips, masking, defaults and named bad fields."""

from __future__ import annotations

import pytest

from shardcron.errors import InvalidJob
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import (
    job_dict_from_proto,
    job_from_proto,
    job_to_proto,
    put_job_request_bytes,
    stored_job_from_proto,
)

JOBS = [
    {"id": "cron", "cron": "*/5 * * * *", "timezone": "Europe/Lisbon", "executor": {"kind": "noop"}},
    {
        "id": "every",
        "every": "90s",
        "catchup": "latest",
        "catchup_window": "0s",
        "overlap": "allow",
        "timeout": "2m",
        "retry": {"max_attempts": 3, "backoff": "250ms", "backoff_max": "10s"},
        "labels": {"team": "a", "tier": "1"},
        "paused": True,
        "executor": {"kind": "shell", "command": "echo hi"},
    },
    {
        "id": "once",
        "at": "2030-01-01T09:00:00+01:00",
        "catchup": "none",
        "executor": {
            "kind": "http",
            "url": "https://example.com/x",
            "method": "PUT",
            "body": "{}",
            "headers": {"Authorization": "Bearer s3cret", "X-A": "1"},
            "secret_headers": ["authorization"],
        },
    },
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


@pytest.mark.parametrize(
    "mutate, field",
    [
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
    ],
)
def test_each_bad_field_is_named(mutate, field):
    p = pb.Job(id="a", schedule=pb.Schedule(interval_ms=1000), noop=pb.NoopExecutor())
    mutate(p)
    with pytest.raises(InvalidJob) as e:
        job_from_proto(p)
    assert e.value.field == field
