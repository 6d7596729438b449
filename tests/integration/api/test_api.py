"""The Scheduler API of one real node (real etcd, real SQLite): validation, statuses,
standard services, the client's failover, and random malformed requests."""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import replace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shardcron import Client
from shardcron.client.errors import InvalidRequest, NotFound, Unavailable
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.spec.bounds import MAX_PAYLOAD_BYTES
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from tests.support.databases import create_database

pytestmark = pytest.mark.cluster

SHARDS = 4
MiB = 1024 * 1024


API_DBS = [k for k in ("sqlite", "postgresql") if k in os.environ.get("SHARDCRON_TEST_DBS", "sqlite,postgresql")]


@pytest.fixture(scope="module", params=API_DBS)
def node(request, etcd_server, database_servers, tmp_path_factory):
    """One node leading every shard of a 4-shard cluster, without --allow-shell, on each database."""
    if database_servers.get(request.param):
        pytest.fail(database_servers[request.param], pytrace=False)
    d = tmp_path_factory.mktemp(f"api-node-{request.param}")
    url, drop = create_database(request.param, directory=d)
    c = Cluster(etcd_server.endpoints, url, f"/t{uuid.uuid4().hex[:12]}", SHARDS, 4, str(d))
    n = c.add("solo")
    try:
        c.wait_all_led(60)
        yield n
    finally:
        c.stop_all()
        drop()
    text = n.log_text()
    assert "Traceback" not in text, f"the node logged a traceback:\n{text[-6000:]}"


@pytest.fixture(scope="module")
def stub(node):
    with grpc.insecure_channel(node.address, options=[("grpc.max_send_message_length", 16 * MiB)]) as ch:
        yield pb_grpc.SchedulerStub(ch)


def noop_job(job_id: str, **kw) -> pb.Job:
    return pb.Job(id=job_id, schedule=pb.Schedule(interval_ms=60_000), noop=pb.NoopExecutor(), **kw)


def http_job(job_id: str, **http) -> pb.Job:
    return pb.Job(
        id=job_id,
        schedule=pb.Schedule(cron="0 3 * * *"),
        http=pb.HttpExecutor(**{"url": "http://127.0.0.1:9/x", **http}),
    )


def status_of(fn, *args, **kw) -> tuple[grpc.StatusCode, str]:
    try:
        fn(*args, timeout=10, **kw)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def _job(**kw) -> pb.Job:
    return pb.Job(**kw)


# -- validation: every bad request is INVALID_ARGUMENT naming the field -------------------

LONG_AGO_MS = int(time.time() * 1000) - 10 * 24 * 3600 * 1000

BAD_JOBS = [
    ("empty id", noop_job(""), "id", "non-empty"),
    ("oversized id", noop_job("x" * 257), "id", "the limit is 256"),
    ("control character in id", noop_job("a\nb"), "id", "control characters"),
    (
        "bad cron",
        _job(id="a", schedule=pb.Schedule(cron="61 * * * *"), noop=pb.NoopExecutor()),
        "schedule.cron",
        "not a valid cron",
    ),
    (
        "cron with 4 fields",
        _job(id="a", schedule=pb.Schedule(cron="* * * *"), noop=pb.NoopExecutor()),
        "schedule.cron",
        "expected 5",
    ),
    (
        "unknown timezone",
        _job(id="a", schedule=pb.Schedule(cron="0 3 * * *", timezone="Mars/Olympus"), noop=pb.NoopExecutor()),
        "timezone",
        "unknown timezone",
    ),
    (
        "negative interval",
        _job(id="a", schedule=pb.Schedule(interval_ms=-1000), noop=pb.NoopExecutor()),
        "schedule.interval_ms",
        "positive",
    ),
    (
        "zero interval",
        _job(id="a", schedule=pb.Schedule(interval_ms=0), noop=pb.NoopExecutor()),
        "schedule.interval_ms",
        "positive",
    ),
    ("no schedule", _job(id="a", noop=pb.NoopExecutor()), "schedule", "exactly one"),
    (
        "once in the past beyond the catch-up window",
        _job(id="a", schedule=pb.Schedule(at_ms=LONG_AGO_MS), noop=pb.NoopExecutor()),
        "schedule.at",
        "in the past",
    ),
    ("no executor", _job(id="a", schedule=pb.Schedule(interval_ms=1000)), "executor", "missing"),
    (
        "interval below the minimum (1ms for 1m)",
        _job(id="a", schedule=pb.Schedule(interval_ms=1), noop=pb.NoopExecutor()),
        "schedule.every",
        "minimum interval of 1s; to allow it, lower the cluster's minimum with `shardcron config --min-interval",
    ),
    (
        "interval just below the minimum",
        _job(id="a", schedule=pb.Schedule(interval_ms=999), noop=pb.NoopExecutor()),
        "schedule.every",
        "every 999ms",
    ),
    (
        "shell without --allow-shell",
        _job(id="a", schedule=pb.Schedule(interval_ms=1000), shell=pb.ShellExecutor(command="true")),
        "executor.kind",
        "--allow-shell",
    ),
    ("url not http(s)", http_job("a", url="ftp://example.com/x"), "executor.url", "http:// or https://"),
    ("url not a url", http_job("a", url="not a url"), "executor.url", "http:// or https://"),
    ("empty url", http_job("a", url=""), "executor.url", "needs a url"),
    ("payload over 1 MiB", http_job("a", body="x" * (MAX_PAYLOAD_BYTES + 1)), "executor.body", "the limit is"),
    ("unknown method", http_job("a", method="FETCH"), "executor.method", "is not one of"),
    ("bad header name", http_job("a", headers=[pb.Header(name="a b", value="1")]), "executor.headers", "bad header"),
    (
        "header value with a newline",
        http_job("a", headers=[pb.Header(name="X", value="1\r\nY: 2")]),
        "executor.headers",
        "bad value",
    ),
    ("unknown catch-up policy", noop_job("a", catchup=7), "catchup", "is not one of"),
    ("unknown overlap policy", noop_job("a", overlap=5), "overlap", "is not one of"),
    ("zero timeout", noop_job("a", timeout_ms=0), "timeout", "at least 1 ms"),
    ("negative timeout", noop_job("a", timeout_ms=-5), "timeout", "duration"),
    ("negative catch-up window", noop_job("a", catchup_window_ms=-1), "catchup_window", "duration"),
    ("no attempts", noop_job("a", retry=pb.RetryPolicy(max_attempts=0)), "retry.max_attempts", "at least 1"),
    ("too many attempts", noop_job("a", retry=pb.RetryPolicy(max_attempts=101)), "retry.max_attempts", "at most"),
    ("zero backoff", noop_job("a", retry=pb.RetryPolicy(backoff_initial_ms=0)), "retry.backoff", "at least"),
    ("too many labels", noop_job("a", labels={f"k{i}": "v" for i in range(65)}), "labels", "at most 64"),
    ("label value too long", noop_job("a", labels={"k": "v" * 300}), "labels", "256"),
    ("empty label key", noop_job("a", labels={"": "v"}), "labels", "256"),
    (
        "celery broker url not redis or amqp",
        _job(id="a", schedule=pb.Schedule(interval_ms=1000), celery=pb.CeleryExecutor(url="http://h/", task="t")),
        "executor.url",
        "must start with one of redis://",
    ),
    (
        "celery args not JSON",
        _job(
            id="a",
            schedule=pb.Schedule(interval_ms=1000),
            celery=pb.CeleryExecutor(url="redis://h", task="t", args_json="[1,"),
        ),
        "executor.args",
        "not valid JSON",
    ),
    (
        "rq func not a dotted path",
        _job(id="a", schedule=pb.Schedule(interval_ms=1000), rq=pb.RqExecutor(url="redis://h", func="a b")),
        "executor.func",
        "dotted path",
    ),
    (
        "nats subject with a wildcard",
        _job(id="a", schedule=pb.Schedule(interval_ms=1000), nats=pb.NatsExecutor(url="nats://h", subject="jobs.*")),
        "executor.subject",
        "no wildcards",
    ),
    (
        "amqp default exchange without a routing key",
        _job(id="a", schedule=pb.Schedule(interval_ms=1000), amqp=pb.AmqpExecutor(url="amqp://h/")),
        "executor.routing_key",
        "names the queue",
    ),
    (
        "redis-stream without a stream",
        _job(id="a", schedule=pb.Schedule(interval_ms=1000), redis_stream=pb.RedisStreamExecutor(url="redis://h")),
        "executor.stream",
        "missing",
    ),
    (
        "python without --allow-python",
        _job(id="a", schedule=pb.Schedule(interval_ms=1000), python=pb.PythonExecutor(target="os:system")),
        "executor.kind",
        "--allow-python",
    ),
]


@pytest.mark.parametrize("job, field, why", [c[1:] for c in BAD_JOBS], ids=[c[0] for c in BAD_JOBS])
def test_a_bad_job_is_invalid_argument_naming_the_field(stub, job, field, why):
    code, details = status_of(stub.PutJob, pb.PutJobRequest(job=job))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith(f"{field}: ") and why in details, details
    # The batch call refuses the same job the same way, in its per-job result.
    r = stub.PutJobs(pb.PutJobsRequest(jobs=[job]), timeout=10).results[0]
    assert r.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and r.message.startswith(f"{field}: "), r


def test_an_executor_kind_this_server_does_not_know_is_refused_not_taken_for_noop(node):
    # A newer client's executor arrives as an unknown field (number 99) of Job.
    job = pb.Job(id="future", schedule=pb.Schedule(interval_ms=60_000)).SerializeToString()
    job += b"\x9a\x06\x00"  # field 99, length-delimited, empty
    assert pb.Job.FromString(job).WhichOneof("executor") is None
    raw = pb.PutJobRequest(job=pb.Job.FromString(job)).SerializeToString()
    assert raw.endswith(b"\x9a\x06\x00"), "the unknown field travels"
    with grpc.insecure_channel(node.address) as ch:
        call = ch.unary_unary("/shardcron.v1.Scheduler/PutJob")
        with pytest.raises(grpc.RpcError) as e:
            call(raw, timeout=10)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("executor: ")


def test_a_dispatch_job_is_stored_whole_and_answered_with_its_broker_password_masked(stub, node):
    job = _job(
        id="celery-report",
        schedule=pb.Schedule(cron="0 3 * * *"),
        celery=pb.CeleryExecutor(
            url="redis://:s3cret@127.0.0.1:9/0",
            task="app.tasks.report",
            args_json='[1,"a"]',
            kwargs_json='{"k":true}',
            queue="reports",
            priority=5,
            expires_ms=30_000,
        ),
    )
    answer = stub.PutJob(pb.PutJobRequest(job=job), timeout=10).job
    got = stub.GetJob(pb.GetJobRequest(id="celery-report"), timeout=10).job
    for j in (answer, got):
        assert j.celery.url == "redis://:***@127.0.0.1:9/0"
        assert (j.celery.task, j.celery.queue, j.celery.priority, j.celery.expires_ms) == (
            "app.tasks.report",
            "reports",
            5,
            30_000,
        )
        assert j.celery.args_json == '[1,"a"]' and j.celery.kwargs_json == '{"k":true}'
    # The node's store keeps the password: the executor needs it.
    from shardcron.store.engine import make_engine
    from shardcron.store.job_reads import get_job

    engine = make_engine(node.db)
    try:
        assert get_job(engine, "celery-report").executor.celery.url == "redis://:s3cret@127.0.0.1:9/0"
    finally:
        engine.dispose()
    stub.DeleteJob(pb.DeleteJobRequest(id="celery-report"), timeout=10)


def test_a_payload_of_exactly_1_mib_is_accepted(stub):
    r = stub.PutJob(pb.PutJobRequest(job=http_job("one-mib", body="x" * MAX_PAYLOAD_BYTES)), timeout=30)
    assert r.job.version >= 1 and len(r.job.http.body) == MAX_PAYLOAD_BYTES


@pytest.mark.parametrize(
    "method, request_, field",
    [
        ("GetJob", pb.GetJobRequest(id=""), "id"),
        ("DeleteJob", pb.DeleteJobRequest(id="x" * 300), "id"),
        ("PauseJob", pb.PauseJobRequest(id=""), "id"),
        ("ResumeJob", pb.ResumeJobRequest(id="\x00"), "id"),
        ("TriggerJob", pb.TriggerJobRequest(id=""), "id"),
        ("ListTicks", pb.ListTicksRequest(job_id=""), "job_id"),
        ("ListTicks", pb.ListTicksRequest(job_id="a", page_token="@@"), "page_token"),
        ("ListJobs", pb.ListJobsRequest(page_size=-1), "page_size"),
        ("ListJobs", pb.ListJobsRequest(page_token="not base64!"), "page_token"),
        ("ListJobs", pb.ListJobsRequest(shard=SHARDS), "shard"),
        ("ListJobs", pb.ListJobsRequest(labels={"k": "a\x00"}), "labels"),
        ("ListJobs", pb.ListJobsRequest(page_token="AA=="), "page_token"),  # a NUL: no job id holds one
        ("ListJobs", pb.ListJobsRequest(id_prefix="x" * 257), "id_prefix"),
        ("PutJob", pb.PutJobRequest(job=noop_job("a"), expected_version=-1), "expected_version"),
    ],
)
def test_other_bad_requests_name_their_field(stub, method, request_, field):
    code, details = status_of(getattr(stub, method), request_)
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith(f"{field}: "), details


def test_bytes_that_are_not_the_request_message_are_invalid_argument(node):
    with grpc.insecure_channel(node.address) as ch:
        call = ch.unary_unary("/shardcron.v1.Scheduler/PutJob")
        with pytest.raises(grpc.RpcError) as e:
            call(b"\x0a\x05\xff\xfe\xfd\xfc\xfb", timeout=10)  # field 1 "string" with invalid UTF-8
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid shardcron.v1.PutJobRequest" in e.value.details()


def test_missing_jobs_are_not_found_and_versions_conflict(stub):
    for method, req in [
        ("GetJob", pb.GetJobRequest(id="nope")),
        ("DeleteJob", pb.DeleteJobRequest(id="nope")),
        ("PauseJob", pb.PauseJobRequest(id="nope")),
        ("ResumeJob", pb.ResumeJobRequest(id="nope")),
        ("TriggerJob", pb.TriggerJobRequest(id="nope")),
    ]:
        code, details = status_of(getattr(stub, method), req)
        assert code is grpc.StatusCode.NOT_FOUND and "'nope'" in details, (method, details)

    jid = f"cas-{uuid.uuid4().hex[:6]}"
    first = stub.PutJob(pb.PutJobRequest(job=noop_job(jid), expected_version=0), timeout=10).job
    assert first.version == 1
    code, details = status_of(stub.PutJob, pb.PutJobRequest(job=noop_job(jid), expected_version=0))
    assert code is grpc.StatusCode.ABORTED and "expected version 0, found 1" in details
    code, _ = status_of(stub.PutJob, pb.PutJobRequest(job=noop_job(jid), expected_version=5))
    assert code is grpc.StatusCode.ABORTED
    assert stub.PutJob(pb.PutJobRequest(job=noop_job(jid), expected_version=1), timeout=10).job.version == 2


def test_failures_say_which_node_answered(node):
    with grpc.insecure_channel(node.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.SchedulerStub(ch).GetJob(pb.GetJobRequest(id="nope"), timeout=10)
    assert ("x-shardcron-node", "solo") in tuple(e.value.trailing_metadata())


# -- behaviour --------------------------------------------------------------------------


def test_list_jobs_pages_and_filters(node):
    tag = uuid.uuid4().hex[:6]
    with Client(node.address) as c:
        results = c.put_jobs(
            [
                job_from_dict({"id": f"{tag}-{i:02d}", "every": "1h", "labels": {"batch": tag, "parity": str(i % 2)}})
                for i in range(25)
            ]
        )
        assert all(r.ok and not r.unchanged for r in results)
        again = c.put_jobs(
            [
                job_from_dict({"id": f"{tag}-{i:02d}", "every": "1h", "labels": {"batch": tag, "parity": str(i % 2)}})
                for i in range(25)
            ]
        )
        assert all(r.ok and r.unchanged and r.job.version == 1 for r in again), "an unchanged job is left alone"
        listed = list(c.list_jobs(labels={"batch": tag}, page_size=7))
        assert [j.id for j in listed] == [f"{tag}-{i:02d}" for i in range(25)]
        odd = list(c.list_jobs(labels={"batch": tag, "parity": "1"}))
        assert len(odd) == 12
        from shardcron.sharding import shard_for

        on_2 = list(c.list_jobs(labels={"batch": tag}, shard=2))
        assert {j.id for j in on_2} == {f"{tag}-{i:02d}" for i in range(25) if shard_for(f"{tag}-{i:02d}", SHARDS) == 2}


def test_list_jobs_searches_by_id_prefix_and_paused_a_page_at_a_time(node):
    tag = uuid.uuid4().hex[:6]
    with Client(node.address) as c:
        ids = [f"{tag}-{kind}-{i}" for kind in ("etl", "mail") for i in range(6)] + [f"{tag}_%-etl"]
        assert all(r.ok for r in c.put_jobs([job_from_dict({"id": i, "every": "1h"}) for i in ids]))
        c.pause_job(f"{tag}-etl-1")
        c.pause_job(f"{tag}-mail-2")
        page, token = c.job_page(id_prefix=f"{tag}-etl", page_size=4)
        assert [j.id for j, _ in page] == [f"{tag}-etl-{i}" for i in range(4)] and token
        rest, token = c.job_page(id_prefix=f"{tag}-etl", page_size=4, page_token=token)
        assert [j.id for j, _ in rest] == [f"{tag}-etl-4", f"{tag}-etl-5"] and token == ""
        paused, _ = c.job_page(id_prefix=tag, paused=True)
        assert [j.id for j, _ in paused] == [f"{tag}-etl-1", f"{tag}-mail-2"]
        active, _ = c.job_page(id_prefix=f"{tag}-mail", paused=False)
        assert len(active) == 5 and all(not j.paused for j, _ in active)
        # % and _ are not wildcards: the prefix is matched as written.
        literal, _ = c.job_page(id_prefix=f"{tag}_%")
        assert [j.id for j, _ in literal] == [f"{tag}_%-etl"]
        none, token = c.job_page(id_prefix=f"{tag}-nothing")
        assert none == [] and token == ""


def test_a_batch_reports_each_job_and_duplicates(node):
    tag = uuid.uuid4().hex[:6]
    with Client(node.address) as c:
        bad = replace(job_from_dict({"id": f"{tag}-b", "every": "1h"}), labels={"k": "v" * 300})
        jobs = [
            job_from_dict({"id": f"{tag}-a", "every": "1h"}),
            job_from_dict({"id": f"{tag}-a", "every": "2h"}),
            bad,
            job_from_dict({"id": f"{tag}-c", "every": "1h"}),
        ]
        r = c.put_jobs(jobs)
    assert [x.ok for x in r] == [True, False, False, True]
    assert "appears more than once" in r[1].message and r[2].message.startswith("labels: ")


def test_the_minimum_interval_itself_and_cron_every_second_are_accepted(stub):
    for job in (
        _job(id="min-every", schedule=pb.Schedule(interval_ms=1000), noop=pb.NoopExecutor(), paused=True),
        _job(id="min-cron", schedule=pb.Schedule(cron="* * * * * *"), noop=pb.NoopExecutor(), paused=True),
    ):
        assert stub.PutJob(pb.PutJobRequest(job=job), timeout=10).job.version >= 1


def test_credential_headers_are_never_returned_even_when_not_named_secret(node):
    jid = f"cred-{uuid.uuid4().hex[:6]}"
    job = job_from_dict(
        {
            "id": jid,
            "every": "1h",
            "executor": {
                "kind": "http",
                "url": "http://127.0.0.1:9/",
                "headers": {"authorization": "Bearer s3cret", "Cookie": "sid=1", "X-Trace": "7"},
            },
        }
    )
    with Client(node.address) as c:
        shown = dict(c.get_job(c.put_job(job).id).executor.http.headers)
    assert shown == {"authorization": "***", "Cookie": "***", "X-Trace": "7"}


def test_secret_header_values_are_never_returned(node):
    jid = f"secret-{uuid.uuid4().hex[:6]}"
    job = job_from_dict(
        {
            "id": jid,
            "every": "1h",
            "executor": {
                "kind": "http",
                "url": "http://127.0.0.1:9/",
                "headers": {"Authorization": "Bearer s3cret"},
                "secret_headers": ["Authorization"],
            },
        }
    )
    with Client(node.address) as c:
        assert dict(c.put_job(job).executor.http.headers) == {"Authorization": "***"}
        assert dict(c.get_job(jid).executor.http.headers) == {"Authorization": "***"}


def test_trigger_records_a_manual_tick_and_watch_streams_it(node):
    jid = f"trig-{uuid.uuid4().hex[:6]}"
    with Client(node.address) as c:
        c.put_job(job_from_dict({"id": jid, "every": "1h", "paused": True}))
        watch = c.watch_ticks(jid)
        got = []

        def consume():
            for t in watch:
                got.append(t)
                return

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        # Trigger until the stream shows one: the watch may be set up after the first trigger.
        slots = set()
        wait_until(lambda: slots.add(c.trigger_job(jid).scheduled_at_ms) or got, 20, 1.0, what="a streamed tick")
        reader.join(5)
        watch.cancel()
        assert got[0].scheduled_at_ms in slots and got[0].status.is_final
        ticks = wait_until(lambda: [t for t in c.list_ticks(jid) if t.status.is_final], 10, what="the manual tick")
        assert ticks[0].manual and ticks[0].node_id == "solo"


def test_health_and_reflection(node):
    with grpc.insecure_channel(node.address) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "shardcron.v1.Scheduler"):
            r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.SERVING
        db = ProtoReflectionDescriptorDatabase(ch)
        services = set(db.get_services())
        assert {"shardcron.v1.Scheduler", "grpc.health.v1.Health"} <= services
        # grpcurl describes messages from reflection alone, without the proto file.
        from google.protobuf.descriptor_pool import DescriptorPool

        method = DescriptorPool(db).FindServiceByName("shardcron.v1.Scheduler").methods_by_name["PutJob"]
        assert method.input_type.fields_by_name["expected_version"].number == 2


def test_the_client_moves_to_the_next_target_when_one_is_down(node):
    dead = f"127.0.0.1:{free_port()}"
    with Client([dead, node.address], timeout_s=10) as c:
        assert c.shards()["shard_count"] == SHARDS
        assert c.targets[c.nodes.preferred] == node.address
        with pytest.raises(NotFound):
            c.get_job("missing")  # a node's answer is final: not retried elsewhere
    with Client(f"{dead},127.0.0.1:{free_port()}", timeout_s=5) as c:
        with pytest.raises(Unavailable) as e:
            c.shards()
        assert dead in str(e.value)
    with Client([dead, node.address], timeout_s=10) as c, pytest.raises(InvalidRequest) as e:
        c.put_job(job_from_dict({"id": "a", "every": "1s", "executor": {"kind": "shell", "command": "true"}}))
    assert "--allow-shell" in str(e.value)


def test_a_taken_port_stops_the_node_with_a_clear_error(node, etcd_server, tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "node",
            "--listen",
            node.address,
            "--etcd",
            etcd_server.endpoints,
            "--db",
            f"sqlite:///{tmp_path}/x.db",
            "--prefix",
            f"/t{uuid.uuid4().hex[:12]}",
            "--shards",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert f"--listen: cannot listen on {node.address}" in out.stderr
    assert f"shardcron: error: --listen: cannot listen on {node.address}" in out.stderr
    assert "Traceback" not in out.stderr


# -- random malformed requests: never UNKNOWN or INTERNAL, and the node keeps serving ------

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./", min_size=1, max_size=30)
_big = st.sampled_from(
    [0, 1, 255, 256, 257, MAX_PAYLOAD_BYTES - 1, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES + 1, 2 * MAX_PAYLOAD_BYTES]
)
_int64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 1, 1000, 60_000, -(2**63), 2**63 - 1]))
_int32 = st.integers(-(2**31), 2**31 - 1)
_BAD_IDS = st.one_of(_text, st.sampled_from(["", "x" * 256, "x" * 257, "é" * 128, "é" * 129, "\t", "a\x7f", " "]))
_GOOD_CRONS = st.sampled_from(
    [
        "*/5 * * * *",
        "0 3 * * *",
        "0 0 29 2 *",
        "0 0 * * 7",
        "30 */2 * * 1-5",
        "*/10 * * * * *",
        "0 0 L * *",
        "0 0 * * 5#3",
        "@daily",
        "@hourly",
    ]
)
_BAD_CRONS = st.one_of(
    st.sampled_from(["0 0 30 2 *", "0 0 31 4 *", "@reboot", "*/0 * * * *", "0 0 1W * *", "* * * *", ""]),
    st.lists(
        st.sampled_from(
            [
                "*",
                "*/5",
                "0",
                "59",
                "60",
                "61",
                "1-5",
                "L",
                "?",
                "MON",
                "JAN",
                "31",
                "30",
                "2",
                "-1",
                "#",
                ",",
                "*/0",
                "1/0",
                "0-0",
                "5-1",
                "W",
            ]
        ),
        min_size=0,
        max_size=8,
    ).map(" ".join),
    _text,
)
_GOOD_TZ = st.sampled_from(["UTC", "Europe/Lisbon", "America/New_York", "Etc/GMT+14", "Asia/Kathmandu"])
_BAD_TZ = st.one_of(
    st.sampled_from(
        [
            "../../etc/passwd",
            "Local",
            "posix/UTC",
            "right/UTC",
            "/etc/localtime",
            "Europe/../UTC",
            "nul\x00l",
            "Mars/Olympus",
        ]
    ),
    _text,
)
_GOOD_URL = st.sampled_from(["http://127.0.0.1:9/x", "https://example.invalid/hook?a=1", "http://[::1]:9/"])
_BAD_URL = st.one_of(
    st.builds(
        lambda s, rest: s + rest,
        st.sampled_from(
            ["ftp://", "file://", "http:", "", "javascript:", "http://[", "https://::1", "http://a:99999/", "HTTP://"]
        ),
        _text,
    ),
    _text,
)


def _pick(draw, good, bad, bad_percent: int = 12):
    """Mostly a valid value, sometimes a malformed one: so that a request gets past its first field
    often enough to reach the others (and, now and then, to be written)."""
    # Hypothesis leans towards small numbers: those mean "good" here.
    return draw(bad if draw(st.integers(0, 99)) >= 100 - bad_percent else good)


@st.composite
def put_requests(draw) -> pb.PutJobRequest:
    job = pb.Job(id=_pick(draw, _name, _BAD_IDS))
    kind = draw(st.sampled_from(["interval", "cron", "interval", "cron", "at", "none"]))
    if kind != "none" or draw(st.booleans()):
        job.schedule.SetInParent()
        if kind == "cron":
            job.schedule.cron = _pick(draw, _GOOD_CRONS, _BAD_CRONS, 20)
        elif kind == "interval":
            job.schedule.interval_ms = _pick(draw, st.integers(1000, 10**8), _int64)
        elif kind == "at":
            # From now (drawn as an offset: the strategy itself must not depend on the clock), or anything.
            if draw(st.booleans()):
                job.schedule.at_ms = int(time.time() * 1000) + draw(st.integers(-(10**10), 10**12))
            else:
                job.schedule.at_ms = draw(_int64)
        if draw(st.booleans()):
            job.schedule.timezone = _pick(draw, _GOOD_TZ, _BAD_TZ)
    executor = draw(st.sampled_from(["noop", "noop", "http", "http", "http", "shell", "none"]))
    if executor == "http":
        job.http.url = _pick(draw, _GOOD_URL, _BAD_URL)
        job.http.method = _pick(
            draw, st.sampled_from(["", "GET", "post", "DELETE"]), st.one_of(st.just("FETCH"), _text)
        )
        for _ in range(draw(st.integers(0, 3))):
            job.http.headers.add(
                name=_pick(draw, st.sampled_from(["X-A", "Authorization", "Content-Type"]), _text),
                value=_pick(draw, _name, _text),
            )
        job.http.body = "b" * _pick(
            draw,
            st.sampled_from([0, 1, 1000, MAX_PAYLOAD_BYTES]),
            st.sampled_from([MAX_PAYLOAD_BYTES + 1, 2 * MAX_PAYLOAD_BYTES]),
        )
        job.http.secret_headers.extend(draw(st.lists(_text, max_size=2)))
    elif executor == "shell":
        job.shell.command = "c" * draw(_big)
    elif executor == "noop":
        job.noop.SetInParent()
    job.catchup = _pick(draw, st.integers(0, 3), st.one_of(st.integers(-3, 9), st.just(2**31 - 1)))
    job.overlap = _pick(draw, st.integers(0, 2), st.one_of(st.integers(-3, 9), st.just(-(2**31))))
    if draw(st.booleans()):
        job.catchup_window_ms = _pick(draw, st.integers(0, 10**9), _int64)
    if draw(st.booleans()):
        job.timeout_ms = _pick(draw, st.integers(1, 10**7), _int64)
    if draw(st.booleans()):
        job.retry.SetInParent()
        if draw(st.booleans()):
            job.retry.max_attempts = _pick(draw, st.integers(1, 100), _int32)
        if draw(st.booleans()):
            job.retry.backoff_initial_ms = _pick(draw, st.integers(1, 10**6), _int64)
        if draw(st.booleans()):
            job.retry.backoff_max_ms = _pick(draw, st.integers(1, 10**7), _int64)
    job.paused = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        job.labels[_pick(draw, _name, st.one_of(_text, st.just("k\x00")))] = _pick(
            draw, _name, st.one_of(_text, st.just("v" * 300), st.just("a\x00b"))
        )
    if draw(st.integers(0, 19)) == 19:
        job.labels.update({f"k{i}": "v" for i in range(65)})
    req = pb.PutJobRequest(job=job)
    if draw(st.integers(0, 3)) == 3:
        req.expected_version = draw(st.one_of(st.integers(-1, 3), _int64))
    return req


_OK_ANSWERS = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ABORTED}


@pytest.fixture
def written(stub):
    """Ids of the jobs a test wrote; deleted afterwards, so that odd-but-valid random jobs
    (every second, say) do not keep the module's node busy."""
    ids: set[str] = set()
    yield ids
    for job_id in ids:
        status_of(stub.DeleteJob, pb.DeleteJobRequest(id=job_id))


@settings(
    max_examples=500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(req=put_requests())
def test_random_malformed_jobs_never_get_unknown_or_internal(stub, written, req):
    code, details = status_of(stub.PutJob, req)
    event(f"{code.name} {details.partition(':')[0][:30]}")
    if code is grpc.StatusCode.OK:
        written.add(req.job.id)
    assert code in _OK_ANSWERS, f"{code.name}: {details}"


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(
        [m.name for m in pb.DESCRIPTOR.services_by_name["Scheduler"].methods if not m.server_streaming]
    ),
    payload=st.one_of(st.binary(max_size=64), st.sampled_from([b"\x0a\x02\xc3\x28", b"\xff" * 10, b"\x08"])),
)
def test_random_bytes_to_any_method_never_get_unknown_or_internal(node, method, payload):
    with grpc.insecure_channel(node.address) as ch:
        code, details = status_of(ch.unary_unary(f"/shardcron.v1.Scheduler/{method}"), payload)
    assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), f"{method}: {code.name}: {details}"


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    job_id=_text,
    size=_int32,
    token=st.one_of(_text, st.just("")),
    shard=st.one_of(st.none(), _int32),
    labels=st.dictionaries(_text, _text, max_size=3),
)
def test_random_list_requests_never_get_unknown_or_internal(stub, job_id, size, token, shard, labels):
    req = pb.ListJobsRequest(page_size=size, page_token=token, labels=labels)
    if shard is not None:
        req.shard = shard
    for call, r in (
        (stub.ListJobs, req),
        (stub.ListTicks, pb.ListTicksRequest(job_id=job_id, page_size=size, page_token=token)),
        (stub.GetJob, pb.GetJobRequest(id=job_id)),
        (stub.TriggerJob, pb.TriggerJobRequest(id=job_id)),
    ):
        code, details = status_of(call, r)
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (
            f"{code.name}: {details}"
        )


def test_the_node_still_serves_after_the_random_requests(node, stub):
    # Runs after the property tests (file order): the node answers and is healthy.
    assert stub.GetShards(pb.GetShardsRequest(), timeout=10).shard_count == SHARDS
    with grpc.insecure_channel(node.address) as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert r.status == health_pb2.HealthCheckResponse.SERVING
    assert node.alive()
