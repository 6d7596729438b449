"""The celery and amqp executors' own parts: headers, options, error wording, publish threads. No broker needed."""

from __future__ import annotations

import errno
import threading
import time

import aiormq.exceptions
import pytest
from kombu.exceptions import ConnectionLimitExceeded, OperationalError

from shardcron.executors import amqp as amqp_executor
from shardcron.executors import amqp_publisher, celery_broker
from shardcron.executors import celery as celery_executor
from shardcron.executors.aio import LoopThread
from shardcron.executors.connections import Connections
from shardcron.executors.identity import tick_headers
from shardcron.model import AmqpSpec, ExecutorKind, ExecutorSpec, TickContext
from shardcron.runtime.latch import Latch
from shardcron.spec.headers import scrub_password

TICK = TickContext(job_id="j", scheduled_at_ms=1_767_225_605_000, attempt=2, fence=9, shard=1, node_id="n0")


def test_amqp_headers_keep_the_jobs_own_and_never_let_it_forge_shardcrons():
    spec = AmqpSpec(
        url="amqp://h/",
        routing_key="q",
        headers=(
            ("X-Team", "billing"),
            ("x-shardcron-fence", "999"),
            ("X-SHARDCRON-NODE", "evil"),
            ("idempotency-KEY", "f"),
        ),
    )
    headers = amqp_executor.message_headers(spec, TICK)
    assert headers == {"X-Team": "billing", **tick_headers(TICK)}


@pytest.mark.parametrize(
    "url, expected, absent",
    [
        ("redis://127.0.0.1:6379/0", {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}, "confirm_publish"),
        ("rediss://h:6380/0", {"socket_timeout": 5.0}, "confirm_publish"),
        (
            "amqp://guest:guest@h:5672//",
            {"confirm_publish": True, "read_timeout": 5.0, "write_timeout": 5.0},
            "socket_timeout",
        ),
        ("pyamqp://h//", {"confirm_publish": True}, "socket_timeout"),
    ],
)
def test_celery_transport_options_bound_every_wait_and_confirm_on_rabbitmq(url, expected, absent):
    options = celery_broker.transport_options(url, "n7")
    assert options["max_retries"] == 0  # one connect attempt: kombu would otherwise retry forever
    assert expected.items() <= options.items()
    assert absent not in options


def test_celery_names_its_rabbitmq_connections_after_the_node():
    options = celery_broker.transport_options("amqp://h//", "n7")
    assert options["client_properties"] == {"connection_name": "shardcron node n7 (celery)"}


@pytest.mark.parametrize(
    "exc, reason",
    [
        (ConnectionLimitExceeded(10), "all 10 connections to the broker stayed busy"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "connection refused"),
        (TimeoutError("timed out"), "no answer within 5s"),
        (
            TypeError("Object of type set is not JSON serializable"),
            "the task's arguments could not be sent: TypeError: Object of type set is not JSON serializable",
        ),
    ],
)
def test_celery_failures_read_as_one_line(exc, reason):
    assert celery_executor.explain(exc) == reason


def test_celery_looks_under_kombus_wrapper_for_the_cause():
    try:
        try:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        except ConnectionRefusedError as cause:
            raise OperationalError("[Errno 111] Connection refused") from cause
    except OperationalError as wrapped:
        assert celery_executor.explain(wrapped) == "connection refused"


def test_a_password_quoted_by_a_client_library_is_scrubbed_as_written_and_decoded():
    text = scrub_password("login as u with s3cr@t failed (s3cr%40t)", "amqp://u:s3cr%40t@h/")
    assert "s3cr" not in text and text.count("***") == 2


def test_amqp_connection_errors_read_as_one_line():
    refused = aiormq.exceptions.AMQPConnectionError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 1)")
    assert amqp_publisher.connection_reason(refused) == "connection refused"
    reset = aiormq.exceptions.AMQPConnectionError(errno.ECONNRESET, "Connection reset by peer")
    assert amqp_publisher.connection_reason(reset) == "connection failed: [Errno 104] Connection reset by peer"


@pytest.mark.parametrize("kind", [ExecutorKind.CELERY, ExecutorKind.AMQP])
def test_a_spec_without_settings_is_an_invalid_job_not_a_crash(kind):
    connections, loop = Connections(), LoopThread()
    try:
        executor = (celery_executor.CeleryExecutor if kind is ExecutorKind.CELERY else amqp_executor.AmqpExecutor)(
            connections, loop
        )
        result = executor.run(ExecutorSpec(kind), TICK, 5.0, Latch())
    finally:
        connections.close()
        loop.close()
    assert not result.ok and result.error.startswith("invalid job: "), result.error


def test_celery_sends_run_on_a_few_long_lived_threads_sharing_one_result_backend():
    before = set(threading.enumerate())
    broker = celery_broker.CeleryBroker("redis://127.0.0.1:1/0", "n0")  # nothing here connects

    def where(gate: threading.Event | None = None):
        if gate is not None:
            gate.wait(10)
        return threading.current_thread(), broker.app().celery.backend

    try:
        one_by_one = [broker.threads.submit(where).result(10) for _ in range(20)]
        # A burst while every thread is busy: at most one thread per pooled connection.
        gate = threading.Event()
        queued = [broker.threads.submit(lambda: where(gate)) for _ in range(3 * celery_broker.POOL_LIMIT)]
        gate.set()
        burst = [f.result(10) for f in queued]
        threads = set(threading.enumerate()) - before
    finally:
        broker.close()
    assert len({thread for thread, _ in one_by_one}) == 1  # one thread, reused, not one per send
    assert {thread for thread, _ in one_by_one + burst} <= threads
    assert len(threads) == celery_broker.POOL_LIMIT
    assert all(t.daemon and t.name == celery_broker.PUBLISH_THREAD_NAME for t in threads)
    # Results are disabled, and the backend is built once for all threads (not per thread).
    assert len({id(backend) for _, backend in one_by_one + burst}) == 1
    assert one_by_one[0][1].as_uri() == "disabled://"
    for t in threads:  # closing the broker ends its idle threads
        t.join(10)
        assert not t.is_alive()
    with pytest.raises(RuntimeError, match="the node is stopping"):
        broker.threads.submit(lambda: None)


def _task(deadline: float, abandoned: bool = False) -> celery_broker.TaskSend:
    task = celery_broker.TaskSend("t", [], {}, "id", {}, {"queue": "q"}, deadline)
    task.abandoned = abandoned
    return task


def test_a_celery_send_given_up_before_its_turn_is_not_sent():
    broker = celery_broker.CeleryBroker(f"redis://127.0.0.1:{_closed_port()}/0", "n0")
    try:
        outcomes = broker.send_in_turn([_task(time.monotonic() + 60, abandoned=True), _task(0.0)])
    finally:
        broker.close()
    # Neither tried the (closed) port: a try would have been refused.
    assert [type(o) for o in outcomes] == [celery_broker.NotSent] * 2


def test_a_broken_connection_fails_the_rest_of_a_burst_without_trying_again():
    broker = celery_broker.CeleryBroker(f"redis://127.0.0.1:{_closed_port()}/0", "n0")
    try:
        outcomes = broker.send_in_turn([_task(time.monotonic() + 60) for _ in range(3)])
    finally:
        broker.close()
    assert celery_executor.explain(outcomes[0]) == "connection refused"
    assert outcomes[1] is outcomes[0] and outcomes[2] is outcomes[0]  # the first slot's error, not a try of their own


def _closed_port() -> int:
    from shardcron.dev.testing.etcd_server import free_port

    return free_port()
