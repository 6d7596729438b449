"""A job's jitter end to end in pure code: the job table, its stored JSON, the proto, the dispatch
offset and the audit's unresolved rule; parsing a jitter and checking it against the gap.
(jitter_offset_ms itself: rules/test_jitter.py.)"""

from __future__ import annotations

import pytest

from shardcron.errors import InvalidJob
from shardcron.leader.loop import jitter_offset_of
from shardcron.model import SlotRef, Tick, TickStatus
from shardcron.rules.audit import find_unresolved
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.takeover import Dispatch
from shardcron.spec.job import job_from_dict, job_from_json, job_to_dict, job_to_json
from shardcron.spec.schedule import check_jitter, parse_jitter
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import job_from_proto, job_to_proto, stored_job_from_proto


def job(**over):
    base = {"id": "j", "every": "1m", "executor": {"kind": "noop"}}
    base.update(over)
    return base


@pytest.mark.parametrize(
    "data, jitter_ms",
    [
        (job(), 0),
        (job(jitter=None), 0),
        (job(jitter=""), 0),
        (job(jitter="0s"), 0),
        (job(jitter="30s"), 30_000),
        (job(jitter="250ms"), 250),
        (job(jitter=1.5), 1_500),  # a number is seconds, like every duration
        (job(jitter="59s999ms"), 59_999),  # just shorter than the 1 m gap
        (job(every=None, cron="*/5 * * * *", jitter="4m"), 240_000),
        (job(every=None, at="2030-01-01T00:00:00Z", jitter="1d"), 86_400_000),  # a single run has no gap
    ],
)
def test_jitter_is_parsed(data, jitter_ms):
    assert job_from_dict(data).jitter_ms == jitter_ms


@pytest.mark.parametrize(
    "data, says",
    [
        (job(jitter="abc"), "expected a duration"),
        (job(jitter="-5s"), "expected a duration"),
        (job(jitter=True), "expected a duration"),
        (job(jitter="1m"), "not shorter than the schedule's shortest gap (1m)"),
        (job(jitter="2m"), "not shorter"),
        (job(every=None, cron="*/5 * * * *", jitter="5m"), "not shorter"),
        (job(every=None, cron="0 9,10 * * *", jitter="2h"), "not shorter than the schedule's shortest gap (1h)"),
        (job(jitter="11000d"), "longer than the limit"),
    ],
)
def test_bad_jitter_names_the_field(data, says):
    with pytest.raises(InvalidJob) as err:
        job_from_dict(data)
    assert err.value.field == "jitter" and says in str(err.value), str(err.value)


def test_stored_json_round_trips_and_is_unchanged_without_jitter():
    plain = job_from_dict(job())
    assert "jitter" not in job_to_dict(plain)  # a job stored before jitter existed reads back the same
    jittered = job_from_dict(job(jitter="30s"))
    assert job_to_dict(jittered)["jitter"] == "30000ms"
    assert job_from_json(job_to_json(jittered)) == jittered


@pytest.mark.parametrize("jitter", [None, "1ms", "30s", "59s999ms"])
def test_proto_round_trip(jitter):
    model = job_from_dict(job(jitter=jitter))
    p = job_to_proto(model, redact=False)
    assert p.HasField("jitter_ms") is bool(model.jitter_ms)
    assert job_from_proto(pb.Job.FromString(p.SerializeToString())) == model
    assert stored_job_from_proto(p).jitter_ms == model.jitter_ms


@pytest.mark.parametrize("ms, field", [(60_000, "jitter"), (-1, "jitter")])
def test_proto_bad_jitter_names_the_field(ms, field):
    p = job_to_proto(job_from_dict(job()), redact=False)
    p.jitter_ms = ms
    with pytest.raises(InvalidJob) as err:
        job_from_proto(p)
    assert err.value.field == field


def test_dispatch_offset_follows_the_job():
    jittered, plain = job_from_dict(job(jitter="30s")), job_from_dict(job())
    slot = SlotRef("j", 1_700_000_040_000)
    assert jitter_offset_of(jittered, slot) == jitter_offset_ms("j", slot.scheduled_at_ms, 30_000)
    assert 0 <= jitter_offset_of(jittered, slot) < 30_000
    assert jitter_offset_of(plain, slot) == 0 and jitter_offset_of(None, slot) == 0
    assert Dispatch(slot, 1).offset_ms == 0  # the default: an unjittered start


S = 1000
NOW = 1_000 * S
GRACE = 60 * S


def claimed(at: int, job_id: str = "j", manual: bool = False) -> Tick:
    return Tick(job_id, at, 0, 100, "a", TickStatus.CLAIMED, attempt=0, manual=manual, claimed_at_ms=at - S)


def _slot_started_within_grace(job_id: str, jitter_ms: int) -> int:
    """A slot more than GRACE before NOW whose jittered start is less than GRACE before NOW."""
    for k in range(1, 10_000):
        at = NOW - GRACE - k * S
        if at + jitter_offset_ms(job_id, at, jitter_ms) >= NOW - GRACE:
            return at
    raise AssertionError("no such slot")


def test_unresolved_grace_runs_from_the_jittered_start():
    jitter = 50 * 60 * S  # 50 minutes
    at = _slot_started_within_grace("j", jitter)
    offset = jitter_offset_ms("j", at, jitter)
    row = claimed(at)
    # Without jitter in mind, a row claimed 60+ s after its slot looks stuck;
    assert find_unresolved([row], now_ms=NOW, grace_ms=GRACE)
    # its jittered start is not yet a grace ago: no finding;
    assert not find_unresolved([row], now_ms=NOW, grace_ms=GRACE, jitter_ms={"j": jitter})
    # a grace after the jittered start, it is one again;
    assert find_unresolved([row], now_ms=at + offset + GRACE + 1, grace_ms=GRACE, jitter_ms={"j": jitter})
    # a manual run has no jitter, and another job's jitter is not this one's.
    assert find_unresolved([claimed(at, manual=True)], now_ms=NOW, grace_ms=GRACE, jitter_ms={"j": jitter})
    assert find_unresolved([claimed(at, job_id="k")], now_ms=NOW, grace_ms=GRACE, jitter_ms={"j": jitter})


@pytest.mark.parametrize(
    "text, says",
    [
        ('[[jobs]]\nid = "a"\nevery = "1m"\njitter = "abc"\nexecutor = { kind = "noop" }\n', "expected a duration"),
        ('[[jobs]]\nid = "a"\nevery = "1m"\njitter = "1m"\nexecutor = { kind = "noop" }\n', "not shorter"),
    ],
)
def test_a_job_file_with_a_bad_jitter_names_the_file_job_and_field(tmp_path, text, says):
    from shardcron.spec.jobfile import JobFileError, load_job_file

    path = tmp_path / "jobs.toml"
    path.write_text(text)
    with pytest.raises(JobFileError) as err:
        load_job_file(str(path))
    assert "jobs.toml" in str(err.value) and "jitter" in str(err.value) and says in str(err.value), str(err.value)


def test_a_job_file_with_jitter_loads(tmp_path):
    from shardcron.spec.jobfile import load_job_file

    path = tmp_path / "jobs.toml"
    path.write_text('[[jobs]]\nid = "a"\nevery = "1m"\njitter = "30s"\nexecutor = { kind = "noop" }\n')
    assert [j.jitter_ms for j in load_job_file(str(path))] == [30_000]


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("30s", 30_000, id="seconds"),
        pytest.param("1m30s", 90_000, id="compound"),
        pytest.param("250ms", 250, id="ms"),
        pytest.param(5, 5_000, id="number-is-seconds"),
        pytest.param("0", 0, id="zero"),
        pytest.param(None, 0, id="absent"),
        pytest.param("", 0, id="empty"),
    ],
)
def test_parse_jitter(text, expected):
    assert parse_jitter(text) == expected


@pytest.mark.parametrize("text", ["soon", "30 s", "-5s", True, "11000d"])
def test_parse_jitter_refuses_naming_the_field(text):
    with pytest.raises(InvalidJob) as err:
        parse_jitter(text)
    assert err.value.field == "jitter"


@pytest.mark.parametrize("text", [-5, -0.5])
def test_parse_jitter_refuses_negative_numbers(text):
    with pytest.raises(InvalidJob, match="jitter"):
        parse_jitter(text)


@pytest.mark.parametrize(
    "jitter_ms, gap_ms, ok",
    [
        (0, 1_000, True),
        (999, 1_000, True),
        (1_000, 1_000, False),
        (60_000, 5_000, False),
        (86_400_000, None, True),  # a once job has no gap
    ],
)
def test_check_jitter(jitter_ms, gap_ms, ok):
    if ok:
        assert check_jitter(jitter_ms, gap_ms) == jitter_ms
    else:
        with pytest.raises(InvalidJob, match="shortest gap"):
            check_jitter(jitter_ms, gap_ms)
