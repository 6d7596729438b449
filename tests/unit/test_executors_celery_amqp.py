"""The celery and amqp executors' pure parts: headers, broker options, error wording. No broker needed."""

from __future__ import annotations

import errno
import threading

import aiormq.exceptions
import pytest
from kombu.exceptions import ConnectionLimitExceeded, OperationalError

from shardcron.executors import amqp as amqp_executor
from shardcron.executors import celery as celery_executor
from shardcron.executors.aio import LoopThread
from shardcron.executors.connections import Connections
from shardcron.executors.identity import tick_headers
from shardcron.model import AmqpSpec, ExecutorKind, ExecutorSpec, TickContext

TICK = TickContext(job_id="j", scheduled_at_ms=1_767_225_605_000, attempt=2, fence=9, shard=1, node_id="n0")


def test_amqp_headers_keep_the_jobs_own_and_never_let_it_forge_shardcrons():
    spec = AmqpSpec(url="amqp://h/", routing_key="q", headers=(
        ("X-Team", "billing"), ("x-shardcron-fence", "999"), ("X-SHARDCRON-NODE", "evil"), ("idempotency-KEY", "f"),
    ))
    headers = amqp_executor.message_headers(spec, TICK)
    assert headers == {"X-Team": "billing", **tick_headers(TICK)}


@pytest.mark.parametrize("url, expected, absent", [
    ("redis://127.0.0.1:6379/0", {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}, "confirm_publish"),
    ("rediss://h:6380/0", {"socket_timeout": 5.0}, "confirm_publish"),
    ("amqp://guest:guest@h:5672//", {"confirm_publish": True, "read_timeout": 5.0, "write_timeout": 5.0},
     "socket_timeout"),
    ("pyamqp://h//", {"confirm_publish": True}, "socket_timeout"),
])
def test_celery_transport_options_bound_every_wait_and_confirm_on_rabbitmq(url, expected, absent):
    options = celery_executor._transport_options(url, "n7")
    assert options["max_retries"] == 0  # one connect attempt: kombu would otherwise retry forever
    assert expected.items() <= options.items()
    assert absent not in options


def test_celery_names_its_rabbitmq_connections_after_the_node():
    options = celery_executor._transport_options("amqp://h//", "n7")
    assert options["client_properties"] == {"connection_name": "shardcron node n7 (celery)"}


@pytest.mark.parametrize("exc, reason", [
    (ConnectionLimitExceeded(10), "all 10 connections to the broker stayed busy"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "connection refused"),
    (TimeoutError("timed out"), "no answer within 5s"),
    (TypeError("Object of type set is not JSON serializable"),
     "the task's arguments could not be sent: TypeError: Object of type set is not JSON serializable"),
])
def test_celery_failures_read_as_one_line(exc, reason):
    assert celery_executor._explain(exc) == reason


def test_celery_looks_under_kombus_wrapper_for_the_cause():
    try:
        try:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        except ConnectionRefusedError as cause:
            raise OperationalError("[Errno 111] Connection refused") from cause
    except OperationalError as wrapped:
        assert celery_executor._explain(wrapped) == "connection refused"


def test_a_password_quoted_by_a_client_library_is_scrubbed_as_written_and_decoded():
    text = celery_executor._scrub("login as u with s3cr@t failed (s3cr%40t)", "amqp://u:s3cr%40t@h/")
    assert "s3cr" not in text and text.count("***") == 2


def test_amqp_connection_errors_read_as_one_line():
    refused = aiormq.exceptions.AMQPConnectionError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 1)")
    assert amqp_executor._connection_reason(refused) == "connection refused"
    reset = aiormq.exceptions.AMQPConnectionError(errno.ECONNRESET, "Connection reset by peer")
    assert amqp_executor._connection_reason(reset) == "connection failed: [Errno 104] Connection reset by peer"


@pytest.mark.parametrize("kind", [ExecutorKind.CELERY, ExecutorKind.AMQP])
def test_a_spec_without_settings_is_an_invalid_job_not_a_crash(kind):
    connections, loop = Connections(), LoopThread()
    try:
        executor = (celery_executor.CeleryExecutor if kind is ExecutorKind.CELERY
                    else amqp_executor.AmqpExecutor)(connections, loop)
        result = executor.run(ExecutorSpec(kind), TICK, 5.0, threading.Event())
    finally:
        connections.close()
        loop.close()
    assert not result.ok and result.error.startswith("invalid job: "), result.error
