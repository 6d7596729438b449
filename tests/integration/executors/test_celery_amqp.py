"""The celery and amqp executors against real brokers (Redis :6379, RabbitMQ :5672) and real consumers, never mocks.

Three layers:

* the executors alone: a Celery task lands in its broker (Redis and RabbitMQ)
  with the slot's task id and the tick's headers; an AMQP message reaches its
  queue with its message id and headers; an unroutable message, a missing
  exchange, a closed port, a silent server, a cancel each fail the tick in
  bounded time with a clear error naming the masked URL; a connection the
  broker closed is replaced without failing a tick;
* one node ticking a celery job (to a real ``celery worker``) and an amqp job
  (to a real aio-pika consumer) every second for 30 s: every slot the store
  recorded succeeded is delivered exactly once, with the tick row's fence;
* a leader killed right after its first enqueue: the successor retries the
  slot (attempt 2). Celery and AMQP are at-least-once, so the consumer gets
  the slot twice, and ``shardcron.consumer`` admits exactly one of the copies.

Every test uses its own uuid-named queues, dedupe prefix and record files.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aio_pika
import pytest
import redis

from shardcron import Client
from shardcron.dev.testing.cluster import GaveUp, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.executors.aio import LoopThread
from shardcron.executors.amqp import AmqpExecutor
from shardcron.executors.celery import CeleryExecutor
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid, tick_fields
from shardcron.model import AmqpSpec, CelerySpec, ExecutorKind, ExecutorSpec, TickContext, TickStatus
from shardcron.runtime.latch import Latch
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.tick_reads import list_ticks, unresolved_ticks
from tests.support import sockets
from tests.support.processes import stop_process
from tests.support.workers import celery_app

REDIS_URL = os.environ.get("SHARDCRON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("SHARDCRON_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.timeout(180)


def ctx(
    job_id: str = "job-c", at: int | None = None, attempt: int = 1, fence: int = 7, node_id: str = "node-a"
) -> TickContext:
    at = at if at is not None else int(time.time()) * 1000
    return TickContext(job_id=job_id, scheduled_at_ms=at, attempt=attempt, fence=fence, shard=3, node_id=node_id)


def celery_spec(url: str = REDIS_URL, task: str = "reports.daily", **kw) -> ExecutorSpec:
    return ExecutorSpec(ExecutorKind.CELERY, celery=CelerySpec(url=url, task=task, **kw))


def amqp_spec(routing_key: str, url: str = AMQP_URL, **kw) -> ExecutorSpec:
    return ExecutorSpec(ExecutorKind.AMQP, amqp=AmqpSpec(url=url, routing_key=routing_key, **kw))


def amqp(work):
    """``await work(channel)`` on a connection of the test's own."""

    async def main():
        connection = await aio_pika.connect(AMQP_URL, timeout=10)
        try:
            return await work(await connection.channel())
        finally:
            await connection.close()

    return asyncio.run(main())


def amqp_get_all(queue: str) -> list[aio_pika.abc.AbstractIncomingMessage]:
    async def get(channel):
        q = await channel.declare_queue(queue, passive=True)
        got = []
        while (m := await q.get(fail=False, no_ack=True)) is not None:
            got.append(m)
        return got

    return amqp(get)


def forget_rabbitmq(queue: str, *, exchange: bool = False) -> None:
    """Delete a test's queue (and the exchange Celery declares under the queue's name)."""

    async def delete(channel):
        await channel.queue_delete(queue)
        if exchange:
            await channel.exchange_delete(queue)

    amqp(delete)


@pytest.fixture
def executors() -> Iterator[tuple[CeleryExecutor, AmqpExecutor]]:
    connections, loop = Connections(), LoopThread()
    yield CeleryExecutor(connections, loop), AmqpExecutor(connections, loop)
    connections.close()
    loop.close()


@pytest.fixture
def celery_exec(executors) -> CeleryExecutor:
    return executors[0]


@pytest.fixture
def amqp_exec(executors) -> AmqpExecutor:
    return executors[1]


@pytest.fixture
def rds() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def redis_queue(rds) -> Iterator[str]:
    """A uuid-named Celery queue on the Redis broker; its list and kombu's binding key are deleted after."""
    name = f"sc-celery-{uuid.uuid4().hex[:12]}"
    yield name
    for key in rds.scan_iter(f"*{name}*"):
        rds.delete(key)


@pytest.fixture
def amqp_queue() -> Iterator[str]:
    """A uuid-named RabbitMQ queue (declared), deleted after."""
    name = f"sc-amqp-{uuid.uuid4().hex[:12]}"
    amqp(lambda ch: ch.declare_queue(name, durable=False, auto_delete=False))
    yield name
    forget_rabbitmq(name)


# -- the executors alone -------------------------------------------------------------------


def test_a_celery_task_lands_in_redis_with_the_slot_id_and_the_tick_headers(celery_exec, rds, redis_queue):
    tick = ctx()
    spec = celery_spec(queue=redis_queue, args=(1, "a"), kwargs={"k": "v"}, expires_ms=30_000)
    result = celery_exec.run(spec, tick, 10.0, Latch())
    assert result.ok, result.error
    assert result.output == f"enqueued celery task {slot_uuid(tick)} (reports.daily) to queue {redis_queue}"
    [raw] = rds.lrange(redis_queue, 0, -1)
    msg = json.loads(raw)
    h = msg["headers"]
    assert h["id"] == slot_uuid(tick) and h["task"] == "reports.daily"
    assert {name: h.get(name) for name in tick_fields(tick)} == tick_fields(tick)
    # expires is the slot's time plus expires_ms, not the send time plus it.
    assert datetime.fromisoformat(h["expires"]) == datetime.fromtimestamp(tick.scheduled_at_ms / 1000 + 30, UTC)
    args, kwargs, _embed = json.loads(base64.b64decode(msg["body"]))
    assert (args, kwargs) == ([1, "a"], {"k": "v"})

    # A successor's retry of the slot: the same task id again (Celery brokers keep both copies).
    again = celery_exec.run(spec, ctx(at=tick.scheduled_at_ms, attempt=2, fence=8), 10.0, Latch())
    assert again.ok, again.error
    copies = [json.loads(m)["headers"] for m in rds.lrange(redis_queue, 0, -1)]
    assert [c["id"] for c in copies] == [slot_uuid(tick)] * 2
    assert sorted((c["shardcron_attempt"], c["shardcron_fence"]) for c in copies) == [("1", "7"), ("2", "8")]


def test_a_celery_task_on_rabbitmq_is_confirmed_and_queued(celery_exec):
    queue = f"sc-celery-{uuid.uuid4().hex[:12]}"
    tick = ctx(job_id="job-r")
    try:
        result = celery_exec.run(celery_spec(AMQP_URL, queue=queue, priority=5, kwargs={"n": 1}), tick, 10.0, Latch())
        assert result.ok, result.error
        [msg] = amqp_get_all(queue)
        assert msg.headers["id"] == slot_uuid(tick) and msg.correlation_id == slot_uuid(tick)
        assert {name: msg.headers.get(name) for name in tick_fields(tick)} == tick_fields(tick)
        assert msg.priority == 5
        assert msg.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    finally:
        forget_rabbitmq(queue, exchange=True)


def test_an_amqp_message_reaches_its_queue_with_the_slot_id_and_the_tick_headers(amqp_exec, amqp_queue):
    tick = ctx(job_id="job-a")
    spec = amqp_spec(
        amqp_queue,
        body='{"report": "daily"}',
        headers=(
            ("X-Team", "billing"),
            # Forgeries: shardcron's own headers are not the job's to set.
            ("X-Shardcron-Fence", "999"),
            ("idempotency-key", "forged"),
        ),
    )
    result = amqp_exec.run(spec, tick, 10.0, Latch())
    assert result.ok, result.error
    assert result.output == (
        f"published message {tick.idempotency_key} to exchange '' with routing key "
        f"'{amqp_queue}' (confirmed by the broker)"
    )
    [msg] = amqp_get_all(amqp_queue)
    assert msg.body == b'{"report": "daily"}'
    assert msg.message_id == tick.idempotency_key
    assert msg.app_id == "shardcron"
    assert msg.content_type == "application/json"
    assert msg.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    h = msg.headers
    assert h["X-Shardcron-Fence"] == "7" and h["X-Shardcron-Attempt"] == "1"
    assert h["X-Shardcron-Job-Id"] == "job-a" and h["X-Shardcron-Node"] == "node-a"
    assert h["X-Shardcron-Scheduled-At-Ms"] == str(tick.scheduled_at_ms)
    assert h["Idempotency-Key"] == tick.idempotency_key
    assert h["X-Team"] == "billing"
    assert "forged" not in h.values() and "999" not in h.values() and "idempotency-key" not in h


def test_an_unroutable_amqp_message_fails_the_tick(amqp_exec):
    nobody = f"sc-nobody-{uuid.uuid4().hex[:12]}"
    result = amqp_exec.run(amqp_spec(nobody), ctx(), 10.0, Latch())
    assert not result.ok
    assert result.error == (
        f"amqp broker amqp://guest:***@127.0.0.1:5672/: could not publish to exchange '' "
        f"with routing key '{nobody}': the broker returned the message as unroutable "
        "(312 NO_ROUTE): no queue is bound for it"
    ), result.error


def test_a_missing_exchange_fails_the_tick_and_the_channel_is_reopened(amqp_exec, amqp_queue):
    exchange = f"sc-noexchange-{uuid.uuid4().hex[:12]}"
    result = amqp_exec.run(amqp_spec("x", exchange=exchange), ctx(), 10.0, Latch())
    assert not result.ok
    assert f"NOT_FOUND - no exchange '{exchange}'" in result.error, result.error
    # The broker closed the channel; the next tick gets a new one.
    after = amqp_exec.run(amqp_spec(amqp_queue), ctx(), 10.0, Latch())
    assert after.ok, after.error
    assert len(amqp_get_all(amqp_queue)) == 1


CONCURRENT_CASES = ("celery-redis", "celery-rabbitmq", "amqp")


@pytest.mark.parametrize("case", CONCURRENT_CASES)
def test_many_worker_threads_publish_at_once(executors, rds, case):
    """More threads than pooled connections, all at once: every publish is confirmed, each lands once."""
    celery, amqp_ = executors
    queue = f"sc-{case}-{uuid.uuid4().hex[:12]}"
    base = int(time.time()) * 1000
    ticks = [ctx(job_id="job-many", at=base + i * 1000) for i in range(32)]
    if case == "amqp":
        amqp(lambda ch: ch.declare_queue(queue, durable=False, auto_delete=False))
        spec = amqp_spec(queue)
        run = amqp_.run
    else:
        spec = celery_spec(REDIS_URL if case == "celery-redis" else AMQP_URL, queue=queue)
        run = celery.run
    results: dict[int, object] = {}
    start = threading.Barrier(len(ticks))

    def publish(i: int) -> None:
        start.wait()
        results[i] = run(spec, ticks[i], 30.0, Latch())

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(len(ticks))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [i for i, r in sorted(results.items()) if not r.ok] == [], [r.error for r in results.values()]
        assert len(results) == len(ticks)
        if case == "celery-redis":
            ids = [json.loads(m)["headers"]["id"] for m in rds.lrange(queue, 0, -1)]
        elif case == "celery-rabbitmq":
            ids = [m.headers["id"] for m in amqp_get_all(queue)]
        else:
            ids = [m.message_id for m in amqp_get_all(queue)]
        expected = [slot_uuid(t) for t in ticks] if case.startswith("celery") else [t.idempotency_key for t in ticks]
        assert sorted(ids) == sorted(expected)
    finally:
        if case == "celery-redis":
            _forget_redis_keys(rds, f"*{queue}*")
        else:
            forget_rabbitmq(queue, exchange=case == "celery-rabbitmq")


CLOSED_PORT_CASES = {
    "celery-redis": ("celery", "redis://:secret@127.0.0.1:{port}/0", "redis://:***@127.0.0.1:{port}/0"),
    "celery-rabbitmq": ("celery", "amqp://guest:secret@127.0.0.1:{port}/", "amqp://guest:***@127.0.0.1:{port}/"),
    "amqp": ("amqp", "amqp://guest:secret@127.0.0.1:{port}/", "amqp://guest:***@127.0.0.1:{port}/"),
}


def _run(executors, kind: str, url: str, cancel: Latch, timeout_s: float = 60.0):
    celery, amqp_ = executors
    if kind == "celery":
        return celery.run(celery_spec(url, queue="sc-unused"), ctx(), timeout_s, cancel)
    return amqp_.run(amqp_spec("sc-unused", url=url), ctx(), timeout_s, cancel)


@pytest.mark.parametrize("case", CLOSED_PORT_CASES)
def test_a_closed_port_fails_at_once_naming_the_masked_url(executors, case):
    kind, url, masked = CLOSED_PORT_CASES[case]
    port = free_port()
    result = _run(executors, kind, url.format(port=port), Latch())
    assert not result.ok
    # Refused, not "timed out after 60s": the tick did not wait for its timeout.
    assert result.error.startswith(f"{kind} broker {masked.format(port=port)}: could not "), result.error
    assert result.error.endswith(": connection refused"), result.error
    assert "secret" not in result.error


@pytest.fixture
def silent_server():
    """``(port, accepted)``: a TCP port that accepts connections and never says anything (a broker that hangs)."""
    with sockets.silent_server() as server:
        yield server


SILENT_CASES = {
    "celery-redis": ("celery", "redis://127.0.0.1:{port}/0"),
    "celery-rabbitmq": ("celery", "amqp://guest:guest@127.0.0.1:{port}/"),
    "amqp": ("amqp", "amqp://guest:guest@127.0.0.1:{port}/"),
}


@pytest.mark.parametrize("case", SILENT_CASES)
def test_cancel_stops_a_hanging_publish(executors, silent_server, case):
    kind, url = SILENT_CASES[case]
    port, accepted = silent_server
    cancel = Latch()
    threading.Thread(target=lambda: (wait_until(lambda: accepted, 30, 0.01), cancel.set()), daemon=True).start()
    result = _run(executors, kind, url.format(port=port), cancel)
    assert not result.ok
    assert result.error.startswith("cancelled: abandoned "), result.error
    assert f"127.0.0.1:{port}" in result.error


@pytest.mark.parametrize("case", SILENT_CASES)
def test_a_silent_broker_times_the_tick_out(executors, silent_server, case):
    kind, url = SILENT_CASES[case]
    port, _ = silent_server
    result = _run(executors, kind, url.format(port=port), Latch(), timeout_s=0.5)
    assert not result.ok
    assert result.error.startswith("timed out after 0.5s waiting for "), result.error


@pytest.mark.parametrize("kind", ["celery", "amqp"])
def test_a_cancel_before_the_publish_sends_nothing(executors, kind, amqp_queue):
    cancel = Latch()
    cancel.set()
    celery, amqp_ = executors
    if kind == "celery":
        result = celery.run(celery_spec(AMQP_URL, queue=amqp_queue), ctx(), 10.0, cancel)
    else:
        result = amqp_.run(amqp_spec(amqp_queue), ctx(), 10.0, cancel)
    assert not result.ok and result.error.startswith("cancelled: "), result.error
    assert amqp_get_all(amqp_queue) == []


def _close_rabbitmq_connections(name_part: str) -> int:
    """Have RabbitMQ close the connections whose client-given name contains ``name_part``."""
    listing = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    pids = [line.split("\t", 1)[0] for line in listing.splitlines() if name_part in line]
    for pid in pids:
        subprocess.run(
            ["rabbitmqctl", "-q", "close_connection", pid, "closed by a shardcron test"],
            capture_output=True,
            timeout=60,
            check=True,
        )
    return len(pids)


@pytest.mark.parametrize("kind", ["celery", "amqp"])
def test_a_connection_the_broker_closed_is_replaced_without_a_failed_tick(executors, kind, amqp_queue):
    node = f"node-{uuid.uuid4().hex[:12]}"
    celery, amqp_ = executors
    # Celery declares its queue itself (durable, with an exchange of the same name).
    queue = f"sc-celery-{uuid.uuid4().hex[:12]}" if kind == "celery" else amqp_queue

    def publish():
        if kind == "celery":
            return celery.run(celery_spec(AMQP_URL, queue=queue), ctx(node_id=node), 10.0, Latch())
        return amqp_.run(amqp_spec(queue), ctx(node_id=node), 10.0, Latch())

    try:
        first = publish()
        assert first.ok, first.error
        assert _close_rabbitmq_connections(f"shardcron node {node}") == 1
        second = publish()
        assert second.ok, second.error
        assert len(amqp_get_all(queue)) == 2
    finally:
        if kind == "celery":
            forget_rabbitmq(queue, exchange=True)


# -- real nodes, real consumers ------------------------------------------------------------


def read_records(path: Path) -> list[dict]:
    """The lines a consumer wrote so far (a partly written last line is left for the next read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


@contextmanager
def _process(command: list[str], log: Path, ready: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )

    def started():
        if proc.poll() is not None:
            raise GaveUp(f"{log.stem} exited: {log.read_text(errors='replace')[-3000:]}")
        return ready.exists()

    try:
        wait_until(started, 60, 0.05, f"{log.stem} to be ready")
        yield
    finally:
        stop_process(proc, 20)


@dataclass
class Consumer:
    """A real consumer process of one kind, on its own queue, recording into ``out``."""

    kind: str  # "celery" (a celery worker on the Redis broker) or "amqp" (an aio-pika consumer)
    queue: str
    out: Path

    def job(self, job_id: str, **extra) -> dict:
        if self.kind == "celery":
            executor = {
                "kind": "celery",
                "url": REDIS_URL,
                "task": celery_app.TASK,
                "queue": self.queue,
                "args": [job_id],
                "kwargs": {"source": "shardcron"},
            }
        else:
            executor = {"kind": "amqp", "url": AMQP_URL, "routing_key": self.queue, "body": json.dumps({"job": job_id})}
        return {"id": job_id, "every": "1s", **extra, "executor": executor}

    def by_slot(self) -> dict[int, list[dict]]:
        """Every delivery so far, per slot."""
        out: dict[int, list[dict]] = {}
        for d in read_records(self.out):
            out.setdefault(d["slot"], []).append(d)
        return out

    def delivery_id_of(self, job_id: str, at: int) -> tuple[str, str]:
        """The field a delivery names its slot by, and the value it must have."""
        if self.kind == "celery":
            return "task_id", slot_uuid(TickContext(job_id, at, 1, 0, 0, ""))
        return "message_id", f"{job_id}:{at}"


@pytest.fixture
def start_consumer(tmp_path, rds) -> Iterator:
    """``start_consumer(kind) -> Consumer``: a real consumer process, stopped and cleaned up after the test."""
    with ExitStack() as stack:

        def start(kind: str) -> Consumer:
            token = uuid.uuid4().hex[:12]
            c = Consumer(kind, f"sc-{kind}-{token}", tmp_path / f"{kind}-{token}.jsonl")
            prefix = f"sc-dedupe-{token}:"
            ready, log = tmp_path / f"{kind}-{token}.ready", tmp_path / f"{kind}-consumer-{token}.log"
            # Registered before the process starts, so they run after it has stopped.
            stack.callback(_forget_redis_keys, rds, f"{prefix}*")
            if kind == "celery":
                stack.callback(_forget_redis_keys, rds, f"*{c.queue}*")
                command = [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "tests.support.workers.celery_app",
                    "worker",
                    "-P",
                    "solo",
                    "-Q",
                    c.queue,
                    "-n",
                    f"{c.queue}@%h",
                    "-l",
                    "INFO",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ]
                env = {
                    celery_app.BROKER_ENV: REDIS_URL,
                    celery_app.RECORD_ENV: str(c.out),
                    celery_app.READY_ENV: str(ready),
                    celery_app.PREFIX_ENV: prefix,
                    celery_app.DEDUPE_REDIS_ENV: REDIS_URL,
                }
            else:
                stack.callback(forget_rabbitmq, c.queue)
                command = [
                    sys.executable,
                    "-m",
                    "tests.support.workers.amqp_consumer",
                    "--url",
                    AMQP_URL,
                    "--queue",
                    c.queue,
                    "--out",
                    str(c.out),
                    "--dedupe-redis",
                    REDIS_URL,
                    "--dedupe-prefix",
                    prefix,
                    "--ready",
                    str(ready),
                ]
                env = {}
            stack.enter_context(_process(command, log, ready, env))
            return c

        yield start


def _forget_redis_keys(rds: redis.Redis, pattern: str) -> None:
    for key in rds.scan_iter(pattern):
        rds.delete(key)


def _succeeded(engine, job_id: str) -> int:
    return sum(t.status is TickStatus.SUCCEEDED for t in list_ticks(engine, job_id, limit=200))


def _settle(engine, client, job_ids: list[str], shard: int = 0) -> dict[str, list]:
    """Delete the jobs, wait until none of their ticks is unresolved; their ticks, oldest first."""
    for job_id in job_ids:
        client.delete_job(job_id)
    wait_until(
        lambda: not [t for t in unresolved_ticks(engine, shard) if t.job_id in job_ids],
        60,
        0.2,
        "the jobs' last ticks to be recorded",
    )
    return {j: sorted(list_ticks(engine, j, limit=1000), key=lambda t: t.scheduled_at_ms) for j in job_ids}


@pytest.mark.cluster
def test_every_succeeded_slot_reaches_its_consumer_exactly_once(make_cluster, fresh_db_url, start_consumer):
    consumers = {f"{kind}-steady": start_consumer(kind) for kind in ("celery", "amqp")}
    db = fresh_db_url("postgresql")
    cluster = make_cluster(db, shards=1)
    node = cluster.add("n0")
    cluster.wait_all_led(60)
    engine = make_engine(db)
    try:
        with Client(node.address) as client:
            for job_id, c in consumers.items():
                client.put_job(job_from_dict(c.job(job_id), require_executor=True))
            wait_until(
                lambda: all(_succeeded(engine, j) >= 30 for j in consumers), 120, 0.5, "30 slots of each job to succeed"
            )
            ticks = _settle(engine, client, list(consumers))
        for job_id, c in consumers.items():
            succeeded = {t.scheduled_at_ms: t for t in ticks[job_id] if t.status is TickStatus.SUCCEEDED}
            assert len(succeeded) >= 30
            wait_until(
                lambda: set(c.by_slot()) >= set(succeeded),
                60,
                0.2,
                f"the {c.kind} consumer to receive every succeeded slot",
            )
            by_slot = c.by_slot()
            assert set(by_slot) == set(succeeded), f"{c.kind}: a delivery of a slot the store did not record succeeded"
            for at, tick in succeeded.items():
                [d] = by_slot[at]  # exactly one delivery per slot
                assert (d["job"], d["fence"], d["attempt"], d["node"]) == (job_id, tick.fence, tick.attempt, "n0")
                assert d["admitted"] and d["verdict"] == "first", d
                field, expected = c.delivery_id_of(job_id, at)
                assert d[field] == expected, d
    finally:
        engine.dispose()


@pytest.mark.cluster
@pytest.mark.parametrize("kind", ["celery", "amqp"])
def test_a_leader_killed_after_its_enqueue_costs_one_admitted_copy(make_cluster, fresh_db_url, start_consumer, kind):
    c = start_consumer(kind)
    job_id = f"{kind}-crashy"
    db = fresh_db_url("postgresql")
    cluster = make_cluster(db, shards=1)
    n0 = cluster.add("n0", env={"SHARDCRON_TEST_CRASH_AFTER_DISPATCH": job_id})
    cluster.wait_all_led(60, by={"n0"})
    n1 = cluster.add("n1")
    job = job_from_dict(c.job(job_id, retry={"max_attempts": 3, "backoff": "200ms"}), require_executor=True)
    engine = make_engine(db)
    try:
        with Client([n0.address]) as client:
            client.put_job(job)
        wait_until(lambda: not n0.alive(), 60, 0.1, "n0 to kill itself after its first enqueue")
        assert f"crash point: after_dispatch of {job_id}" in n0.log_text()
        # The slot n0 enqueued is the job's first; n0 died before recording it.
        first = wait_until(lambda: read_records(c.out), 30, 0.1, "n0's copy to reach the consumer")[0]
        assert first["node"] == "n0" and first["attempt"] == 1
        crashed_at, n0_fence = first["slot"], first["fence"]

        def crashed_slot_final():
            [t] = [t for t in list_ticks(engine, job_id, limit=200) if t.scheduled_at_ms == crashed_at]
            return t if t.status.is_final else None

        tick = wait_until(crashed_slot_final, 90, 0.2, "n1 to retry the slot n0 enqueued")
        wait_until(
            lambda: (
                sum(
                    t.status is TickStatus.SUCCEEDED and t.scheduled_at_ms > crashed_at
                    for t in list_ticks(engine, job_id, limit=200)
                )
                >= 3
            ),
            60,
            0.2,
            "three later slots to succeed under n1",
        )
        with Client([n1.address]) as client:
            ticks = _settle(engine, client, [job_id])[job_id]

        assert tick.status is TickStatus.SUCCEEDED, (tick.status, tick.error)
        assert (tick.node_id, tick.attempt) == ("n1", 2) and tick.fence > n0_fence

        succeeded = {t.scheduled_at_ms: t for t in ticks if t.status is TickStatus.SUCCEEDED}
        # The broker confirmed both copies of the crashed slot (n0's, then n1's retry): both are delivered.
        wait_until(
            lambda: set(c.by_slot()) >= set(succeeded) and len(c.by_slot()[crashed_at]) >= 2,
            60,
            0.2,
            "the consumer to receive every succeeded slot and both copies of the crashed one",
        )
        by_slot = c.by_slot()
        assert set(by_slot) == set(succeeded)
        copies = by_slot[crashed_at]
        assert sorted((d["node"], d["attempt"], d["fence"]) for d in copies) == [
            ("n0", 1, n0_fence),
            ("n1", 2, tick.fence),
        ], copies
        # At-least-once at the broker, exactly once past shardcron.consumer.
        [admitted] = [d for d in copies if d["admitted"]]
        [refused] = [d for d in copies if not d["admitted"]]
        assert admitted["verdict"] == "first"
        assert refused["verdict"] in ("duplicate", "stale-fence"), refused
        for at, t in succeeded.items():
            if at != crashed_at:
                [d] = by_slot[at]
                assert (d["fence"], d["attempt"], d["admitted"]) == (t.fence, t.attempt, True), d
    finally:
        engine.dispose()
