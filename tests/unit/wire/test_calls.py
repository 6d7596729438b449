"""The calls about jobs, as ``Client`` and the dashboard's in-process API both build them: the request each
sends for a caller's arguments, the arguments refused before anything is sent, and the answers read."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from shardcron.api.in_process import CallerApi
from shardcron.client.client import Client
from shardcron.errors import InvalidJob
from shardcron.jobkey import join_key
from shardcron.model import SlotRef, Tick, TickStatus
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.calls import CALL_NAMES, Calls, answered, answered_async
from shardcron.wire.convert import job_to_proto
from shardcron.wire.messages import PAGE_MAX
from shardcron.wire.tick_convert import tick_to_proto
from tests.support.tenancy import hourly_job

KEY = join_key("team-b", "nightly")

# (the caller's namespace, the id or key named, the namespace named) -> the (id, namespace) the request names
NAMING = [
    ("default", "nightly", None, ("nightly", "default")),
    ("team-a", "nightly", None, ("nightly", "team-a")),
    ("team-a", "nightly", "team-b", ("nightly", "team-b")),
    ("team-a", "nightly", "", ("nightly", "default")),
    ("team-a", KEY, None, ("nightly", "team-b")),
    ("team-a", KEY, "team-b", ("nightly", "team-b")),
    ("team-a", "nightly", "*", InvalidJob),  # "*" names no one job
    ("team-a", KEY, "team-a", ValueError),
]
ONE_JOB_CALLS = {
    "get_job": "GetJob",
    "get_job_runs": "GetJob",
    "delete_job": "DeleteJob",
    "pause_job": "PauseJob",
    "resume_job": "ResumeJob",
    "trigger_job": "TriggerJob",
}


def first_request(exchange):
    """The (method, request) an exchange sends first; what it raises before sending anything."""
    return exchange.send(None)


@pytest.mark.parametrize("call, method", ONE_JOB_CALLS.items())
@pytest.mark.parametrize("caller_ns, named, namespace, expected", NAMING)
def test_a_call_about_one_job_names_it_as_a_client_of_the_namespace_would(
    call, method, caller_ns, named, namespace, expected
):
    exchange = getattr(Calls(caller_ns), call)(named, namespace=namespace)
    if expected in (ValueError, InvalidJob):
        with pytest.raises(expected):
            first_request(exchange)
        return
    sent, request = first_request(exchange)
    assert sent == method
    assert (request.id, request.namespace) == expected


@pytest.mark.parametrize("caller_ns, named, namespace, expected", NAMING)
def test_a_backfill_a_watch_and_a_put_name_their_job_the_same_way(caller_ns, named, namespace, expected):
    calls = Calls(caller_ns)
    job = replace(hourly_job("nightly"), id=named)  # a job a client got back has its key as its id
    if expected in (ValueError, InvalidJob):
        with pytest.raises(expected):
            first_request(calls.backfill_job(named, 0, 10, rate_per_s=1, namespace=namespace))
        with pytest.raises(expected):
            calls.watch_ticks_request(named, namespace)
        with pytest.raises(expected):
            calls.job_proto(job, namespace)
        return
    _, backfill = first_request(calls.backfill_job(named, 0, 10, rate_per_s=1.5, namespace=namespace))
    assert (backfill.id, backfill.namespace) == expected
    assert (backfill.from_ms, backfill.to_ms, backfill.rate_per_s, backfill.overlap) == (0, 10, 1.5, pb.OVERLAP_SKIP)
    watch = calls.watch_ticks_request(named, namespace)
    assert (watch.job_id, watch.namespace) == expected
    put = calls.job_proto(job, namespace)
    assert (put.id, put.namespace) == expected


@pytest.mark.parametrize("namespace, expected", [(None, "team-a"), ("*", "*"), ("team-b", "team-b"), ("", "default")])
def test_a_read_of_many_jobs_names_one_namespace_or_all(namespace, expected):
    calls = Calls("team-a")
    _, page = first_request(calls.job_page(namespace=namespace))
    assert page.namespace == expected
    assert calls.watch_ticks_request(None, namespace) == pb.WatchTicksRequest(namespace=expected)
    _, backfills = first_request(calls.list_backfills(namespace=namespace))
    assert (backfills.job_id, backfills.namespace) == ("", expected)


def test_a_job_page_sends_only_the_filters_it_was_given():
    _, bare = first_request(Calls().job_page())
    assert bare == pb.ListJobsRequest(page_size=100, namespace="default")
    assert not bare.HasField("shard") and not bare.HasField("paused")
    _, full = first_request(
        Calls().job_page(
            page_token="t", page_size=7, labels={"a": "b"}, shard=0, namespace="*", id_prefix="n", paused=False
        )
    )
    assert full == pb.ListJobsRequest(
        page_token="t", page_size=7, labels={"a": "b"}, shard=0, namespace="*", id_prefix="n", paused=False
    )
    assert full.HasField("shard") and full.HasField("paused")


def test_the_answers_read_as_shardcrons_own_dataclasses():
    stored = job_to_proto(hourly_job("nightly"), redact=False)
    stored.namespace = "team-b"
    stored.runs.CopyFrom(pb.JobRuns(as_of_ms=5, next_slot_ms=3_600_000, failures_in_a_row=2))
    triggered = pb.TriggerJobResponse(id="nightly", namespace="team-b", scheduled_at_ms=60_000)
    assert answered(Calls().trigger_job(KEY), lambda m, r: triggered) == SlotRef(KEY, 60_000)
    assert answered(Calls().delete_job("nightly"), lambda m, r: pb.DeleteJobResponse()) is None
    rows, token = answered(Calls().job_page(), lambda m, r: pb.ListJobsResponse(jobs=[stored], next_page_token="n"))
    assert token == "n" and [(j.id, runs.next_slot_ms) for j, runs in rows] == [(KEY, 3_600_000)]
    job, runs = answered(Calls().get_job_runs(KEY), lambda m, r: pb.GetJobResponse(job=stored))
    assert (job.id, runs.as_of_ms, runs.failures_in_a_row) == (KEY, 5, 2)


def test_list_ticks_asks_page_after_page_until_the_limit_or_the_last_page():
    asked: list[tuple[int, str]] = []
    pages_left = [3]

    def send(method, request):
        assert method == "ListTicks" and (request.job_id, request.namespace) == ("nightly", "default")
        asked.append((request.page_size, request.page_token))
        pages_left[0] -= 1
        ticks = [tick_to_proto(Tick("nightly", ms, 0, 1, "n", TickStatus.SUCCEEDED)) for ms in range(request.page_size)]
        return pb.ListTicksResponse(ticks=ticks, next_page_token="more" if pages_left[0] else "")

    ticks = answered(Calls().list_ticks("nightly", limit=PAGE_MAX * 2 + 5), send)
    assert asked == [(PAGE_MAX, ""), (PAGE_MAX, "more"), (5, "more")]
    assert len(ticks) == PAGE_MAX * 2 + 5

    asked.clear()
    pages_left[0] = 1
    assert len(answered(Calls().list_ticks("nightly", limit=PAGE_MAX * 3), send)) == PAGE_MAX
    assert asked == [(PAGE_MAX, "")], "the last page ends it"


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "5"])
def test_list_ticks_refuses_a_limit_that_is_not_a_whole_number_of_at_least_one(limit):
    with pytest.raises(ValueError, match="limit: must be a whole number of at least 1"):
        first_request(Calls().list_ticks("nightly", limit=limit))


def test_run_on_an_event_loop_a_call_sends_and_reads_the_same():
    sent = []

    async def send(method, request):
        sent.append((method, request))
        return pb.PauseJobResponse(job=job_to_proto(hourly_job("nightly"), redact=False))

    job = asyncio.run(answered_async(Calls("team-a").pause_job("nightly"), send))
    assert job.id == "nightly"
    assert sent == [("PauseJob", pb.PauseJobRequest(id="nightly", namespace="team-a"))]


def test_a_failed_send_raises_to_the_caller():
    def send(method, request):
        raise ConnectionError("down")

    with pytest.raises(ConnectionError, match="down"):
        answered(Calls().shards(), send)


def test_the_calls_are_the_clients_calls_and_not_the_parts_they_are_built_from():
    assert CALL_NAMES <= {name for name in vars(Client) if not name.startswith("_")}
    assert {"put_job", "pause_job", "list_ticks", "shards"} <= CALL_NAMES
    assert CALL_NAMES.isdisjoint({"ref", "namespaces", "job_proto", "list_jobs_request", "watch_ticks_request"})


@pytest.mark.parametrize("name", ["ref", "job_proto", "namespace", "__init__", "no_such_call"])
def test_the_in_process_caller_refuses_a_name_that_is_not_a_call(name):
    caller = CallerApi(api=None, secret=None)  # the name is checked before the API is reached
    with pytest.raises(ValueError, match=f"no call named '{name}'"):
        asyncio.run(caller.call(name, "nightly"))
