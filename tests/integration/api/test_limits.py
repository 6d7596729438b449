"""Each limit that protects a node, crossed on a real node: RESOURCE_EXHAUSTED naming its flag.

One node (real etcd, SQLite) started with small limits, so each can be crossed
with a handful of calls. After every refusal the node still answers.
"""

from __future__ import annotations

import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron import Client
from shardcron.client.channel import NODE_HEADER
from shardcron.client.errors import LimitExceeded
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.model import TickStatus
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from tests.support.peers import cluster_seal_of

pytestmark = pytest.mark.cluster

MAX_STREAMS = 5
PER_PEER = 3
MAX_REQUEST = 64 * 1024
MAX_JOBS = 5
TRIGGERS = "3/1m"
PREFIX = f"/t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def node(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("limits")
    c = Cluster(etcd_server.endpoints, f"sqlite:///{d}/store.db", PREFIX, 2, 4, str(d))
    n = c.add(
        "limited",
        extra_args=[
            "--allow-shell",
            "--max-streams",
            str(MAX_STREAMS),
            "--max-streams-per-peer",
            str(PER_PEER),
            "--max-request-bytes",
            "64KiB",
            "--max-jobs-per-call",
            str(MAX_JOBS),
            "--trigger-rate",
            TRIGGERS,
        ],
    )
    try:
        c.wait_all_led(60)
        yield n
    finally:
        c.stop_all()
    text = n.log_text()
    assert "Traceback" not in text, f"the node logged a traceback:\n{text[-6000:]}"


@pytest.fixture
def stub(node):
    with grpc.insecure_channel(node.address) as ch:
        yield pb_grpc.SchedulerStub(ch)


def _refused(call) -> str:
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, e.value.details()
    return e.value.details()


def _still_answers(node) -> None:
    with grpc.insecure_channel(node.address) as ch:
        assert (
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        assert pb_grpc.SchedulerStub(ch).GetShards(pb.GetShardsRequest(), timeout=10).shard_count == 2


def _opened(call) -> bool:
    """Whether the node took the stream: it sends its headers (with its id) as soon as it does,
    while a refusal is a status alone."""
    return any(k == NODE_HEADER for k, _ in call.initial_metadata() or ())


def test_streams_per_peer_then_per_node(node, etcd_server):
    forwarded = (cluster_seal_of(etcd_server.endpoints, PREFIX).marker(None),)  # what a member node sends
    opened = []
    try:
        with grpc.insecure_channel(node.address) as ch:
            stub = pb_grpc.SchedulerStub(ch)

            def watch(metadata=()):
                call = stub.WatchTicks(pb.WatchTicksRequest(local_only=True), metadata=metadata, timeout=60)
                opened.append(call)
                return call

            for _ in range(PER_PEER):
                assert _opened(watch())
            details = _refused(lambda: next(watch()))
            assert "--max-streams-per-peer" in details and "127.0.0.1" in details
            # Streams that other nodes open on a caller's behalf count against the node only.
            for _ in range(MAX_STREAMS - PER_PEER):
                assert _opened(watch(forwarded))
            details = _refused(lambda: next(watch(forwarded)))
            assert "--max-streams" in details and "--max-streams-per-peer" not in details
            _still_answers(node)
            # Closing streams gives their slots back (once the node has seen the cancels).
            for c in opened:
                c.cancel()
            opened.clear()

            def one_more_opens():
                call = watch()
                ok = _opened(call)
                call.cancel()
                return ok

            wait_until(one_more_opens, 20, 0.5, what="a stream slot given back")
    finally:
        for c in opened:
            c.cancel()


def test_a_request_over_max_request_bytes_names_the_flag(node, stub):
    big = pb.Job(
        id="big",
        noop=pb.NoopExecutor(),
        schedule=pb.Schedule(interval_ms=60_000),
        labels={"pad": "x" * (MAX_REQUEST + 1000)},
    )
    details = _refused(lambda: stub.PutJob(pb.PutJobRequest(job=big), timeout=10))
    assert "--max-request-bytes" in details and str(MAX_REQUEST) in details
    # Far over it, grpc itself refuses before the node reads it: still RESOURCE_EXHAUSTED.
    huge = pb.Job(id="huge", noop=pb.NoopExecutor(), labels={"pad": "x" * (4 * MAX_REQUEST)})
    _refused(lambda: stub.PutJob(pb.PutJobRequest(job=huge), timeout=10))
    _still_answers(node)


def test_jobs_per_put_jobs_call(node, stub):
    jobs = [
        pb.Job(id=f"many-{i}", noop=pb.NoopExecutor(), schedule=pb.Schedule(interval_ms=60_000))
        for i in range(MAX_JOBS + 1)
    ]
    details = _refused(lambda: stub.PutJobs(pb.PutJobsRequest(jobs=jobs), timeout=10))
    assert "--max-jobs-per-call" in details and str(MAX_JOBS) in details
    answer = stub.PutJobs(pb.PutJobsRequest(jobs=jobs[:MAX_JOBS]), timeout=30)
    assert [r.code for r in answer.results] == [0] * MAX_JOBS


def test_triggers_are_rate_limited_per_job(node):
    with Client(node.address) as c:
        for name in ("trig-a", "trig-b"):
            c.put_job(pb_job(name))
        for _ in range(3):
            c.trigger_job("trig-a")
        with pytest.raises(LimitExceeded) as e:
            c.trigger_job("trig-a")
        assert "--trigger-rate is 3/m" in str(e.value) and "'trig-a'" in str(e.value)
        c.trigger_job("trig-b")  # another job has its own budget


def test_a_manual_run_waits_for_a_running_one_when_overlap_is_skip(node):
    from shardcron.client.errors import ApiError

    with Client(node.address) as c:
        c.put_job(pb_job("slow", shell="sleep 20", overlap="skip"))
        c.trigger_job("slow")
        wait_until(
            lambda: any(t.status is TickStatus.RUNNING for t in c.list_ticks("slow")), 30, what="the manual run running"
        )
        with pytest.raises(ApiError) as e:
            c.trigger_job("slow")
        assert e.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert "is running now" in str(e.value) and "skip" in str(e.value)


def pb_job(job_id: str, *, shell: str | None = None, overlap: str = "skip"):
    from shardcron.spec.job import job_from_dict

    executor = {"kind": "shell", "command": shell} if shell else {"kind": "noop"}
    return job_from_dict({"id": job_id, "every": "1h", "paused": True, "overlap": overlap, "executor": executor})
