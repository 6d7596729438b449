"""A job's history_limit in pure code: parsing it, the job table, its stored JSON, the proto, job files."""

from __future__ import annotations

import pytest

from shardcron.errors import InvalidJob
from shardcron.spec.job import job_from_dict, job_from_json, job_to_dict, job_to_json
from shardcron.spec.retention import RetentionError, parse_history_limit
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import job_from_proto, job_to_proto, stored_job_from_proto


def job(**over):
    base = {"id": "j", "every": "1m", "executor": {"kind": "noop"}}
    base.update(over)
    return base


@pytest.mark.parametrize(
    "data, limit",
    [
        (job(), None),
        (job(history_limit=None), None),
        (job(history_limit=1), 1),
        (job(history_limit=10_000), 10_000),
    ],
)
def test_history_limit_is_parsed(data, limit):
    assert job_from_dict(data).history_limit == limit


@pytest.mark.parametrize(
    "value, says",
    [
        (0, "at least 1, got 0"),
        (-3, "at least 1, got -3"),
        ("100", "whole number"),
        (2.5, "whole number"),
        (True, "whole number"),
    ],
)
def test_bad_history_limit_names_the_field(value, says):
    with pytest.raises(InvalidJob) as err:
        job_from_dict(job(history_limit=value))
    assert err.value.field == "history_limit" and says in str(err.value), str(err.value)


def test_stored_json_round_trips_and_is_unchanged_without_a_limit():
    assert "history_limit" not in job_to_dict(job_from_dict(job()))  # stored before retention: reads back the same
    limited = job_from_dict(job(history_limit=50))
    assert job_to_dict(limited)["history_limit"] == 50
    assert job_from_json(job_to_json(limited)) == limited


@pytest.mark.parametrize("limit", [None, 1, 50])
def test_proto_round_trip(limit):
    model = job_from_dict(job(history_limit=limit))
    p = job_to_proto(model, redact=False)
    assert p.HasField("history_limit") is (limit is not None)
    assert job_from_proto(pb.Job.FromString(p.SerializeToString())) == model
    assert stored_job_from_proto(p).history_limit == limit


def test_proto_zero_names_the_field():
    p = job_to_proto(job_from_dict(job()), redact=False)
    p.history_limit = 0
    with pytest.raises(InvalidJob) as err:
        job_from_proto(p)
    assert err.value.field == "history_limit"


def test_job_files_take_it_and_name_a_bad_one(tmp_path):
    from shardcron.spec.jobfile import JobFileError, load_job_file

    path = tmp_path / "jobs.toml"
    path.write_text('[[jobs]]\nid = "a"\nevery = "1m"\nhistory_limit = 100\nexecutor = { kind = "noop" }\n')
    assert [j.history_limit for j in load_job_file(str(path))] == [100]
    path.write_text('[[jobs]]\nid = "a"\nevery = "1m"\nhistory_limit = 0\nexecutor = { kind = "noop" }\n')
    with pytest.raises(JobFileError) as err:
        load_job_file(str(path))
    assert "jobs.toml" in str(err.value) and "history_limit" in str(err.value), str(err.value)


@pytest.mark.parametrize("value, expected", [(None, None), (1, 1), (1000, 1000)])
def test_parse_history_limit(value, expected):
    assert parse_history_limit(value) == expected


@pytest.mark.parametrize("value", [0, -1, 2.5, "10", True])
def test_parse_history_limit_refuses(value):
    with pytest.raises(RetentionError) as err:
        parse_history_limit(value)
    assert err.value.field == "history_limit" and repr(value) in str(err.value)
