"""The nats executor against the real NATS server with JetStream (127.0.0.1:4222), never mocks.

Direct tests publish with the executor and read the stream back. The cluster
tests run real node processes and a real consumer process
(``tests/support/workers/nats_consumer.py``) and check, slot by slot, that
every slot the store recorded succeeded arrives exactly once, with its fence;
and that a leader killed right after its publish (crash point
``SHARDCRON_TEST_CRASH_AFTER_DISPATCH``) costs no second message: its successor
re-publishes with the same ``Nats-Msg-Id`` and JetStream drops the copy.

Every test has its own stream, with a uuid-named subject space.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import nats
import pytest

from shardcron import Client
from shardcron.dev.testing.cluster import GaveUp, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.executors.aio import LoopThread
from shardcron.executors.connections import Connections
from shardcron.executors.nats import NatsExecutor
from shardcron.model import ExecutorKind, ExecutorSpec, NatsSpec, TickContext, TickStatus
from shardcron.runtime.latch import Latch
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.tick_reads import list_ticks
from tests.support import sockets
from tests.support.processes import stop_process
from tests.support.workers.nats_consumer import read_messages

NATS_URL = os.environ.get("SHARDCRON_TEST_NATS_URL", "nats://127.0.0.1:4222")

pytestmark = pytest.mark.timeout(180)


async def _with_js(work):
    nc = await nats.connect(NATS_URL, connect_timeout=5, allow_reconnect=False, max_reconnect_attempts=1)
    try:
        return await work(nc.jetstream(timeout=10))
    finally:
        await nc.close()


def js(work):
    """``work(jetstream_context)`` on a connection of its own."""
    return asyncio.run(_with_js(work))


class Stream:
    def __init__(self):
        token = uuid.uuid4().hex[:12]
        self.name = f"SC_{token}"
        self.prefix = f"sc.{token}"
        self.subjects = f"{self.prefix}.>"

    def messages(self) -> list:
        async def read(j):
            state = (await j.stream_info(self.name)).state
            if not state.messages:
                return []
            return [await j.get_msg(self.name, seq) for seq in range(state.first_seq, state.last_seq + 1)]

        return js(read)


@pytest.fixture
def stream():
    s = Stream()
    js(lambda j: j.add_stream(name=s.name, subjects=[s.subjects]))
    yield s
    js(lambda j: j.delete_stream(s.name))


@pytest.fixture
def executor():
    connections, loop = Connections(), LoopThread()
    yield NatsExecutor(connections, loop)
    connections.close()
    loop.close()


def ctx(job_id: str = "job-n", at: int = 1_767_225_605_000, attempt: int = 1, fence: int = 7) -> TickContext:
    return TickContext(job_id=job_id, scheduled_at_ms=at, attempt=attempt, fence=fence, shard=3, node_id="node-a")


def nats_spec(subject: str, url: str = NATS_URL, **kw) -> ExecutorSpec:
    return ExecutorSpec(ExecutorKind.NATS, nats=NatsSpec(url=url, subject=subject, **kw))


# -- direct -------------------------------------------------------------------------------


def test_jetstream_publish_is_acked_and_carries_the_tick(executor, stream):
    spec = nats_spec(
        f"{stream.prefix}.reports",
        body='{"report": "daily"}',
        headers=(
            ("X-Team", "billing"),
            # Forgeries: shardcron's own headers are not the job's to set.
            ("X-Shardcron-Fence", "999"),
            ("nats-msg-id", "forged"),
            ("Idempotency-Key", "forged"),
        ),
    )
    result = executor.run(spec, ctx(), 10.0, Latch())
    assert result.ok, result.error
    assert result.output.startswith(f"published to JetStream stream {stream.name} (seq 1)"), result.output
    [msg] = stream.messages()
    assert msg.subject == f"{stream.prefix}.reports"
    assert msg.data == b'{"report": "daily"}'
    h = msg.headers
    assert h["Nats-Msg-Id"] == "job-n:1767225605000"
    assert h["Idempotency-Key"] == "job-n:1767225605000"
    assert h["X-Shardcron-Fence"] == "7"
    assert h["X-Shardcron-Job-Id"] == "job-n"
    assert h["X-Shardcron-Scheduled-At-Ms"] == "1767225605000"
    assert h["X-Shardcron-Attempt"] == "1"
    assert h["X-Team"] == "billing"
    assert "forged" not in h.values() and "999" not in h.values()


def test_the_same_slot_twice_is_one_message_and_a_duplicate(executor, stream):
    spec = nats_spec(f"{stream.prefix}.x", body="b")
    first = executor.run(spec, ctx(attempt=1), 10.0, Latch())
    again = executor.run(spec, ctx(attempt=2, fence=8), 10.0, Latch())  # a successor's retry
    other = executor.run(spec, ctx(at=1_767_225_606_000), 10.0, Latch())
    assert first.ok and again.ok and other.ok, (first.error, again.error, other.error)
    assert again.output.startswith("duplicate: "), again.output
    assert "JetStream dropped it within its duplicate window" in again.output
    assert not first.output.startswith("duplicate") and not other.output.startswith("duplicate")
    msgs = stream.messages()
    assert [m.headers["Nats-Msg-Id"] for m in msgs] == ["job-n:1767225605000", "job-n:1767225606000"]
    assert msgs[0].headers["X-Shardcron-Fence"] == "7"  # the first copy is the one kept


def test_a_subject_no_stream_stores_fails_clearly(executor):
    subject = f"sc.nostream.{uuid.uuid4().hex[:12]}"
    result = executor.run(nats_spec(subject), ctx(), 10.0, Latch())
    assert not result.ok
    assert result.error.startswith(f"no JetStream stream stores subject {subject} at {NATS_URL}"), result.error
    assert "create a stream covering it" in result.error


def test_core_publish_is_at_most_once_and_says_so(executor, stream):
    spec = nats_spec(f"{stream.prefix}.core", jetstream=False, body="x")
    results = [executor.run(spec, ctx(), 10.0, Latch()) for _ in range(2)]
    assert all(r.ok for r in results), [r.error for r in results]
    assert "at-most-once" in results[0].output
    # No ack to wait for, but the Nats-Msg-Id rides along: a stream that happens to cover
    # the subject still keeps one copy of the slot.
    [msg] = stream.messages()
    assert msg.headers["Nats-Msg-Id"] == "job-n:1767225605000"


def test_a_closed_port_fails_without_waiting_for_the_timeout(executor):
    port = free_port()
    spec = nats_spec("sc.any", url=f"nats://user:s3cret@127.0.0.1:{port}")
    result = executor.run(spec, ctx(), 60.0, Latch())
    assert not result.ok
    assert result.error.startswith(f"cannot connect to NATS at nats://user:***@127.0.0.1:{port}: "), result.error
    assert "s3cret" not in result.error
    assert "refused" in result.error.lower()


@pytest.fixture
def silent_server():
    """``(port, accepted)``: a TCP port that accepts connections and never says anything (a NATS server that hangs)."""
    with sockets.silent_server() as server:
        yield server


def test_cancel_stops_a_hanging_connect(executor, silent_server):
    port, accepted = silent_server
    cancel = Latch()

    def cancel_once_connected():
        wait_until(lambda: accepted, 30, 0.01)  # the executor is now waiting for the server's INFO
        cancel.set()

    threading.Thread(target=cancel_once_connected, daemon=True).start()
    result = executor.run(nats_spec("sc.any", url=f"nats://127.0.0.1:{port}"), ctx(), 60.0, cancel)
    assert not result.ok
    assert result.error.startswith("cancelled: while connecting to NATS"), result.error


def test_cancel_before_the_publish(executor, stream):
    cancel = Latch()
    cancel.set()
    result = executor.run(nats_spec(f"{stream.prefix}.x"), ctx(), 10.0, cancel)
    assert not result.ok and result.error.startswith("cancelled: ")
    assert stream.messages() == []


def test_a_hanging_server_fails_the_connect_within_its_bound(executor, silent_server):
    port, _ = silent_server
    result = executor.run(nats_spec("sc.any", url=f"nats://127.0.0.1:{port}"), ctx(), 1.0, Latch())
    assert not result.ok
    assert result.error.startswith(f"cannot connect to NATS at nats://127.0.0.1:{port}: "), result.error


def test_a_pooled_connection_that_closed_is_replaced(executor, stream):
    spec = nats_spec(f"{stream.prefix}.x")
    assert executor.run(spec, ctx(at=1), 10.0, Latch()).ok
    pooled = executor._connections.get(("nats", NATS_URL), lambda: None)
    executor._loop.run(pooled.close, 10)  # as when its server goes away: nats-py closes it for good
    result = executor.run(spec, ctx(at=2), 10.0, Latch())
    assert result.ok, result.error
    assert executor._connections.get(("nats", NATS_URL), lambda: None) is not pooled
    assert len(stream.messages()) == 2


def test_a_retry_later_than_the_duplicate_window_is_warned_about_once(executor, caplog):
    caplog.set_level(logging.INFO, logger="shardcron.executors.nats")
    s = Stream()
    js(lambda j: j.add_stream(name=s.name, subjects=[s.subjects], duplicate_window=1.0))
    try:
        spec = nats_spec(f"{s.prefix}.x")
        now = int(time.time() * 1000)

        def warned():
            return [r for r in caplog.records if r.levelno == logging.WARNING and "duplicate_window" in r.getMessage()]

        # A retry (attempt 2) of a slot 10 s old: the window is looked up off the tick's path, then warned about.
        assert executor.run(spec, ctx(at=now - 10_000, attempt=2), 10.0, Latch()).ok
        wait_until(warned, 30, 0.02, "the late retry to be warned about")
        # The window is known now, so a second late retry is checked within run(): no second warning.
        assert executor.run(spec, ctx(at=now - 9_000, attempt=2), 10.0, Latch()).ok
        [warning] = warned()
        assert f"JetStream stream {s.name} at {NATS_URL}" in warning.getMessage()
        assert "longer than the job's catch-up window" in warning.getMessage()
    finally:
        js(lambda j: j.delete_stream(s.name))


# -- real nodes, a real consumer ----------------------------------------------------------


@pytest.fixture
def consumer(stream, tmp_path):
    out, ready = tmp_path / "consumer.jsonl", tmp_path / "consumer.ready"
    log = open(tmp_path / "consumer.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.workers.nats_consumer",
            "--url",
            NATS_URL,
            "--stream",
            stream.name,
            "--subject",
            stream.subjects,
            "--out",
            str(out),
            "--ready",
            str(ready),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()

    def started():
        if proc.poll() is not None:
            raise GaveUp(f"the consumer exited: {(tmp_path / 'consumer.log').read_text()[-2000:]}")
        return ready.exists()

    try:
        wait_until(started, 30, 0.05, "the consumer to subscribe")
        yield out
    finally:
        stop_process(proc, 15)


def _job(job_id: str, stream: Stream, **extra) -> dict:
    return {
        "id": job_id,
        "every": "1s",
        **extra,
        "executor": {"kind": "nats", "url": NATS_URL, "subject": f"{stream.prefix}.{job_id}", "body": "tick"},
    }


def _by_slot(messages: list[dict]) -> dict[int, list[dict]]:
    """Stored messages per slot: one entry per stream sequence (a redelivery is not a second message)."""
    stored = {m["stream_seq"]: m for m in messages}
    out: dict[int, list[dict]] = {}
    for m in stored.values():
        out.setdefault(int(m["headers"]["X-Shardcron-Scheduled-At-Ms"]), []).append(m)
    return out


def _wait_delivered(consumer, succeeded: dict, cutoff_ms: int) -> dict[int, list[dict]]:
    """Wait until the consumer has every succeeded slot; the messages per slot, up to ``cutoff_ms``."""
    try:
        wait_until(
            lambda: set(_by_slot(read_messages(consumer))) >= set(succeeded),
            60,
            0.2,
            "the consumer to receive every succeeded slot",
        )
    except TimeoutError as e:
        missing = sorted(set(succeeded) - set(_by_slot(read_messages(consumer))))
        pytest.fail(
            f"{e}: {len(missing)} of {len(succeeded)} never arrived, e.g. "
            f"{[(at, succeeded[at].output) for at in missing[:3]]}",
            pytrace=False,
        )
    return _by_slot(_messages_through(consumer, cutoff_ms))


def _ticks_through(engine, job_id: str, cutoff_ms: int) -> list:
    """The job's ticks up to ``cutoff_ms``, oldest first, once every one of them is final.

    The job keeps running meanwhile: the comparison is over a closed range of
    slots, so nothing is deleted under a claim in flight.
    """

    def all_final():
        ts = [t for t in list_ticks(engine, job_id, limit=1000) if t.scheduled_at_ms <= cutoff_ms]
        return ts if all(t.status.is_final for t in ts) else None

    try:
        ticks = wait_until(all_final, 60, 0.2, f"the ticks of {job_id} up to {cutoff_ms} to be final")
    except TimeoutError as e:
        still = [
            t
            for t in list_ticks(engine, job_id, limit=1000)
            if t.scheduled_at_ms <= cutoff_ms and not t.status.is_final
        ]
        pytest.fail(f"{e}: still unresolved: {still}", pytrace=False)
    return sorted(ticks, key=lambda t: t.scheduled_at_ms)


def _succeeded(engine, job_id: str) -> list[int]:
    return sorted(t.scheduled_at_ms for t in list_ticks(engine, job_id, limit=1000) if t.status is TickStatus.SUCCEEDED)


def _messages_through(consumer, cutoff_ms: int) -> list[dict]:
    return [m for m in read_messages(consumer) if int(m["headers"]["X-Shardcron-Scheduled-At-Ms"]) <= cutoff_ms]


@pytest.mark.cluster
def test_every_succeeded_slot_reaches_the_consumer_exactly_once(fresh_db_url, make_cluster, stream, consumer):
    db = fresh_db_url("postgresql")
    cluster = make_cluster(db, shards=1)
    node = cluster.add("n0")
    cluster.wait_all_led(60)
    engine = make_engine(db)
    try:
        with Client(node.address) as client:
            client.put_job(job_from_dict(_job("steady", stream), require_executor=True))
        cutoff = wait_until(
            lambda: len(s := _succeeded(engine, "steady")) >= 20 and s[-1], 90, 0.5, "20 slots to succeed"
        )
        ticks = _ticks_through(engine, "steady", cutoff)
        succeeded = {t.scheduled_at_ms: t for t in ticks if t.status is TickStatus.SUCCEEDED}
        assert len(succeeded) >= 20
        by_slot = _wait_delivered(consumer, succeeded, cutoff)
        assert set(by_slot) == set(succeeded), "a message for a slot the store did not record succeeded"
        for at, tick in succeeded.items():
            [msg] = by_slot[at]  # exactly one stored message per slot
            assert msg["headers"]["X-Shardcron-Fence"] == str(tick.fence)
            assert msg["headers"]["Nats-Msg-Id"] == f"steady:{at}"
            assert msg["headers"]["X-Shardcron-Attempt"] == str(tick.attempt)
            assert msg["subject"] == f"{stream.prefix}.steady"
    finally:
        engine.dispose()


@pytest.mark.cluster
def test_a_leader_killed_after_its_publish_costs_no_second_message(fresh_db_url, make_cluster, stream, consumer):
    db = fresh_db_url("postgresql")
    cluster = make_cluster(db, shards=1)
    n0 = cluster.add("n0", env={"SHARDCRON_TEST_CRASH_AFTER_DISPATCH": "crashy"})
    cluster.wait_all_led(60, by={"n0"})
    cluster.add("n1")
    job = job_from_dict(_job("crashy", stream, retry={"max_attempts": 3, "backoff": "200ms"}), require_executor=True)
    engine = make_engine(db)
    try:
        with Client([n0.address]) as client:
            client.put_job(job)
        wait_until(lambda: not n0.alive(), 60, 0.1, "n0 to kill itself after its first publish")
        assert "crash point: after_dispatch of crashy" in n0.log_text()
        # The slot n0 published is the job's first: n0 died before recording it.
        [first_msg] = wait_until(lambda: read_messages(consumer), 30, 0.1, "n0's message to reach the consumer")
        crashed_at = int(first_msg["headers"]["X-Shardcron-Scheduled-At-Ms"])
        n0_fence = int(first_msg["headers"]["X-Shardcron-Fence"])

        def crashed_slot_final():
            [t] = [t for t in list_ticks(engine, "crashy", limit=200) if t.scheduled_at_ms == crashed_at]
            return t if t.status.is_final else None

        tick = wait_until(crashed_slot_final, 90, 0.2, "n1 to retry the slot n0 published")
        # A few more slots under n1; the comparison covers every slot up to the last of them.
        cutoff = wait_until(
            lambda: len(s := [at for at in _succeeded(engine, "crashy") if at > crashed_at]) >= 3 and s[-1],
            60,
            0.2,
            "three later slots to succeed under n1",
        )
        ticks = _ticks_through(engine, "crashy", cutoff)

        assert tick.status is TickStatus.SUCCEEDED, (tick.status, tick.error)
        assert tick.node_id == "n1" and tick.fence > n0_fence
        assert tick.attempt == 2
        assert tick.output.startswith("duplicate: "), tick.output

        succeeded = {t.scheduled_at_ms: t for t in ticks if t.status is TickStatus.SUCCEEDED}
        by_slot = _wait_delivered(consumer, succeeded, cutoff)
        counts = Counter({at: len(msgs) for at, msgs in by_slot.items()})
        assert counts[crashed_at] == 1, by_slot[crashed_at]
        [kept] = by_slot[crashed_at]
        assert kept["headers"]["X-Shardcron-Fence"] == str(n0_fence)  # n0's copy; n1's was dropped
        assert kept["headers"]["X-Shardcron-Attempt"] == "1"
        assert set(by_slot) == set(succeeded)
        assert all(n == 1 for n in counts.values()), counts
    finally:
        engine.dispose()
