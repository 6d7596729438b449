"""Tracing against real parts: real node processes exporting over OTLP to a receiver in the test, a real
HTTP sink, a real Celery worker that continues the trace (opentelemetry-instrumentation-celery), a gRPC
call forwarded between two real nodes; and a node without OTEL_* settings, which imports no OpenTelemetry.

``SHARDCRON_TEST_TRACE_DUMP=<path>``: the Celery test writes the spans it received there as JSON
(``scripts/trace_waterfall.py`` draws the documentation's waterfall from it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from shardcron import Client
from shardcron.dev.testing.cluster import GaveUp, wait_until
from shardcron.spec.job import job_from_dict
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, descends_from
from tests.support.processes import stop_process
from tests.support.workers import celery_app, traced_celery_app

ROOT = Path(__file__).resolve().parents[3]
REDIS_URL = os.environ.get("SHARDCRON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
DUMP_ENV = "SHARDCRON_TEST_TRACE_DUMP"
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}  # ms: spans reach the receiver at once, not every 5 s


@pytest.fixture
def receiver():
    with OtlpReceiver() as r:
        yield r


def traced_node_env(receiver: OtlpReceiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        **FAST_EXPORT,
    }


def tick_spans(spans: list[ReceivedSpan], job_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == "shardcron.tick" and s.attributes.get("shardcron.job") == job_id]


@pytest.fixture
def traced_worker(tmp_path):
    """A real Celery worker on a queue of its own, exporting its spans over OTLP/HTTP to ``receiver``."""
    procs = []
    rds = redis.Redis.from_url(REDIS_URL)
    token = uuid.uuid4().hex[:12]
    queue, prefix = f"sc-traced-{token}", f"sc-traced-dedupe-{token}:"

    def start(receiver: OtlpReceiver) -> str:
        ready, log = tmp_path / "worker.ready", tmp_path / "worker.log"
        env = {
            **os.environ,
            celery_app.BROKER_ENV: REDIS_URL,
            celery_app.READY_ENV: str(ready),
            celery_app.PREFIX_ENV: prefix,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint,
            "OTEL_SERVICE_NAME": "report-worker",
            **FAST_EXPORT,
        }
        command = [sys.executable, "-m", "celery", "-A", "tests.support.workers.traced_celery_app", "worker"]
        command += ["-P", "solo", "-Q", queue, "-n", f"{queue}@%h", "-l", "INFO", "--without-gossip"]
        command += ["--without-mingle", "--without-heartbeat"]
        out = open(log, "wb")
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()
        procs.append(proc)

        def started():
            if proc.poll() is not None:
                raise GaveUp(f"the worker exited: {log.read_text(errors='replace')[-3000:]}")
            return ready.exists()

        wait_until(started, 60, 0.05, "the traced celery worker to be ready")
        return queue

    yield start
    for proc in procs:
        stop_process(proc, 20)
    for pattern in (f"{prefix}*", f"*{queue}*"):
        for key in rds.scan_iter(pattern):
            rds.delete(key)
    rds.close()


@pytest.mark.cluster
def test_a_celery_tick_s_trace_continues_on_the_worker_and_through_dedupe(
    make_cluster, tmp_path, receiver, traced_worker
):
    queue = traced_worker(receiver)
    cluster = make_cluster(f"sqlite:///{tmp_path}/store.db", shards=1)
    node = cluster.add("n0", env=traced_node_env(receiver))
    cluster.wait_all_led(60)
    job = {
        "id": "nightly-report",
        "every": "1s",
        "executor": {"kind": "celery", "url": REDIS_URL, "task": traced_celery_app.TASK, "queue": queue},
    }
    with Client(node.address) as client:
        client.put_job(job_from_dict(job, require_executor=True))

        def a_continued_trace(spans):
            by_trace = {s.trace_id: s for s in spans if s.service == "report-worker" and s.name.startswith("run/")}
            return any(
                t.trace_id in by_trace and [e["name"] for e in t.events][-1:] == ["result written"]
                for t in tick_spans(spans, "nightly-report")
            )

        spans = receiver.wait_for(a_continued_trace, "a tick span and the worker's task span of its trace")
        client.delete_job("nightly-report")
    if dump := os.environ.get(DUMP_ENV):
        receiver.dump(dump)
    worker_runs = {s.trace_id: s for s in spans if s.service == "report-worker" and s.name.startswith("run/")}
    tick = next(t for t in tick_spans(spans, "nightly-report") if t.trace_id in worker_runs)
    run = worker_runs[tick.trace_id]
    assert tick.service == "shardcron"
    assert tick.kind == 4  # producer
    assert descends_from(run, tick, spans), "the worker's task span is not the tick span's child"
    assert run.name == f"run/{traced_celery_app.TASK}"
    assert [e["name"] for e in tick.events] == ["claim", "start", "result", "result written"]
    assert tick.attributes["shardcron.executor.kind"] == "celery"
    assert tick.attributes["shardcron.node"] == "n0"
    assert tick.attributes["shardcron.attempt"] == 1
    assert (
        tick.attributes["shardcron.idempotency_key"]
        == f"nightly-report:{tick.attributes['shardcron.slot.scheduled_at_ms']}"
    )
    verdicts = [(e["name"], e["attributes"]["shardcron.verdict"]) for e in run.events]
    assert verdicts == [("first", "first"), ("duplicate", "duplicate")]
    assert tick.start_ns <= run.start_ns and run.end_ns <= tick.end_ns + 5_000_000_000


@pytest.mark.cluster
def test_an_http_tick_s_traceparent_reaches_the_sink_with_the_tick_span_s_trace(make_cluster, tmp_path, receiver, sink):
    cluster = make_cluster(f"sqlite:///{tmp_path}/store.db", shards=1)
    node = cluster.add("n0", env=traced_node_env(receiver))
    cluster.wait_all_led(60)
    job = {"id": "ping", "every": "1s", "executor": {"kind": "http", "url": f"{sink.url}/ping"}}
    with Client(node.address) as client:
        client.put_job(job_from_dict(job, require_executor=True))
        assert sink.wait_for(lambda reqs: len(reqs) >= 1, timeout=60)
        request = sink.requests()[0]
        traceparent = request.header("traceparent")
        assert traceparent is not None, "the tick's request carries no traceparent"
        version, trace_id, parent_id, flags = traceparent.split("-")
        assert (version, len(trace_id), len(parent_id)) == ("00", 32, 16)
        at = int(request.header("X-Shardcron-Scheduled-At-Ms"))
        spans = receiver.wait_for(
            lambda spans: any(t.attributes["shardcron.slot.scheduled_at_ms"] == at for t in tick_spans(spans, "ping")),
            "the tick span of the slot the sink received",
        )
        client.delete_job("ping")
    (tick,) = [t for t in tick_spans(spans, "ping") if t.attributes["shardcron.slot.scheduled_at_ms"] == at]
    assert (tick.trace_id, tick.span_id) == (trace_id, parent_id)
    assert tick.kind == 3  # client
    assert tick.attributes["shardcron.http_status"] == 200


@pytest.mark.cluster
def test_a_forwarded_call_is_the_forwarding_node_s_span_s_child(make_cluster, tmp_path, receiver):
    cluster = make_cluster(f"sqlite:///{tmp_path}/store.db", shards=1)
    leader = cluster.add("n0", env=traced_node_env(receiver))
    cluster.wait_all_led(60, by={"n0"})
    other = cluster.add("n1", env=traced_node_env(receiver))
    cluster.wait_settled({"n0", "n1"}, 60)
    led_by = cluster.leaders()[0]
    follower = other if led_by == "n0" else leader
    with Client([follower.address]) as client:  # this node does not lead the job's shard: it forwards
        client.put_job(job_from_dict({"id": "forwarded", "every": "1h", "executor": {"kind": "noop"}}))

    def put_spans(spans):
        return [s for s in spans if s.name == "shardcron.v1.Scheduler/PutJob"]

    spans = receiver.wait_for(lambda spans: len(put_spans(spans)) >= 2, "the PutJob spans of both nodes")
    puts = put_spans(spans)
    (outer,) = [s for s in puts if s.parent_span_id is None]
    (inner,) = [s for s in puts if s.parent_span_id is not None]
    assert inner.trace_id == outer.trace_id
    assert inner.parent_span_id == outer.span_id
    assert outer.kind == inner.kind == 2  # server
    assert (outer.attributes["rpc.method"], inner.attributes["rpc.grpc.status_code"]) == ("PutJob", 0)
    assert outer.start_ns <= inner.start_ns and inner.end_ns <= outer.end_ns


@pytest.mark.cluster
def test_a_node_without_otel_settings_imports_no_opentelemetry(make_cluster, tmp_path, sink):
    cluster = make_cluster(f"sqlite:///{tmp_path}/store.db", shards=1)
    # -X importtime's report (on stderr, into the node's log) names every module the process imports.
    node = cluster.add("n0", env={"PYTHONPROFILEIMPORTTIME": "1"})
    cluster.wait_all_led(60)
    with Client(node.address) as client:
        client.put_job(job_from_dict({"id": "plain", "every": "1s", "executor": {"kind": "http", "url": sink.url}}))
        assert sink.wait_for(lambda reqs: len(reqs) >= 2, timeout=60)
        client.delete_job("plain")
    log = node.log_text()
    assert "import time:" in log and "shardcron.node" in log  # the report is there
    assert "opentelemetry" not in log
    assert sink.requests()[0].header("traceparent") is None
