"""The Redis kinds (rq, arq, redis-stream) enqueue each slot exactly once, against a real Redis and real workers.

Three layers:

* the executors alone: one enqueue per slot, a second attempt (another
  leader, another fence) is a "duplicate" success, even after the queue's own
  record of the job is gone; a dead or silent Redis fails the tick in bounded
  time naming the masked URL; cancel stops at once;
* one node ticking three jobs (one per kind) every second, each consumed by a
  real worker process (``rq worker``, an arq worker, an XREADGROUP consumer):
  every slot the store recorded succeeded arrives exactly once, with its fence;
* a leader killed right after its first enqueue: its successor retries the
  slot (attempt 2) and the queue drops the copy, so the worker still runs it once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import redis
from arq.jobs import deserialize_job
from rq.job import Job

from shardcron import Client
from shardcron.dev.testing.cluster import GaveUp, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.executors.arq import ArqExecutor
from shardcron.executors.connections import Connections
from shardcron.executors.identity import slot_uuid
from shardcron.executors.redis_clients import ENQUEUED_PREFIX
from shardcron.executors.redis_stream import RedisStreamExecutor
from shardcron.executors.rq import RqExecutor
from shardcron.model import ExecutorSpec, Tick, TickContext, TickStatus
from shardcron.runtime.latch import Latch
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.tick_reads import list_ticks
from tests.support import sockets
from tests.support.processes import stop_process

REDIS_URL = os.environ.get("SHARDCRON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parents[3]
KINDS = ("rq", "arq", "redis-stream")


# -- one test's names in Redis, and how to read each kind's queue ------------------------


@dataclass
class Names:
    suffix: str
    slots: set[str] = field(default_factory=set)  # slot uuids used, for the clean-up

    def tick(
        self,
        kind: str,
        scheduled_at_ms: int = 1_700_000_000_000,
        *,
        attempt: int = 1,
        fence: int = 41,
        node_id: str = "n0",
    ) -> TickContext:
        return self.seen(TickContext(self.job(kind), scheduled_at_ms, attempt, fence, 0, node_id))

    def seen(self, tick: TickContext) -> TickContext:
        self.slots.add(slot_uuid(tick))
        return tick

    def queue(self, kind: str) -> str:  # an RQ queue, an arq queue (a sorted set) or a stream
        return f"sc-{kind}-{self.suffix}"

    def record(self, kind: str) -> str:  # the list a worker pushes what it ran onto
        return f"sc-rec-{kind}-{self.suffix}"

    def job(self, kind: str) -> str:
        return f"{kind}-{self.suffix}"

    def executor(self, kind: str, url: str = REDIS_URL) -> dict:
        """The job file's executor table for ``kind``, calling the test workers."""
        if kind == "rq":
            return {
                "kind": "rq",
                "url": url,
                "func": "tests.support.workers.rq_tasks.record",
                "queue": self.queue(kind),
                "args": [self.record(kind)],
            }
        if kind == "arq":
            return {
                "kind": "arq",
                "url": url,
                "function": "record",
                "queue": self.queue(kind),
                "args": [self.record(kind)],
                "tick_kwarg": "tick",
            }
        return {
            "kind": "redis-stream",
            "url": url,
            "stream": self.queue(kind),
            "fields": {"report": "daily"},
            "maxlen": 10_000,
        }

    def spec(self, kind: str, url: str = REDIS_URL) -> ExecutorSpec:
        return job_from_dict(
            {"id": self.job(kind), "every": "1s", "executor": self.executor(kind, url)}, require_executor=True
        ).executor


def queued(r: redis.Redis, names: Names, kind: str) -> list[dict]:
    """What waits in the queue (or stream): each entry's job id and tick fields."""
    if kind == "rq":
        ids = r.lrange(f"rq:queue:{names.queue(kind)}", 0, -1)
        return [{"id": i.decode(), **Job.fetch(i.decode(), connection=r).meta["shardcron"]} for i in ids]
    if kind == "arq":
        ids = r.zrange(names.queue(kind), 0, -1)
        return [{"id": i.decode(), **deserialize_job(r.get(b"arq:job:" + i)).kwargs["tick"]} for i in ids]
    return [
        {"id": entry_id.decode(), **{k.decode(): v.decode() for k, v in fields.items()}}
        for entry_id, fields in r.xrange(names.queue(kind))
    ]


def consume(r: redis.Redis, names: Names, kind: str) -> None:
    """Make the queue forget its jobs, as it does once a worker ran them and their results expired."""
    if kind == "rq":
        for i in r.lrange(f"rq:queue:{names.queue(kind)}", 0, -1):
            r.delete(b"rq:job:" + i)
        r.delete(f"rq:queue:{names.queue(kind)}")
    elif kind == "arq":
        for i in r.zrange(names.queue(kind), 0, -1):
            r.delete(b"arq:job:" + i, b"arq:result:" + i)
        r.delete(names.queue(kind))
    else:
        for entry_id, _ in r.xrange(names.queue(kind)):
            r.xdel(names.queue(kind), entry_id)


def received(r: redis.Redis, names: Names, kind: str) -> list[dict]:
    return [json.loads(x) for x in r.lrange(names.record(kind), 0, -1)]


@pytest.fixture
def rds() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
    try:
        client.ping()
    except redis.RedisError as e:
        pytest.fail(
            f"Redis at {REDIS_URL} does not answer ({e}); `make test` starts it "
            f"(scripts/ensure-services.sh), or set SHARDCRON_TEST_REDIS_URL",
            pytrace=False,
        )
    yield client
    client.close()


@pytest.fixture
def names(rds) -> Iterator[Names]:
    """Unique names for one test; everything under them, and its slots' keys, are deleted after it."""
    n = Names(uuid.uuid4().hex[:10])
    yield n
    doomed = list(rds.scan_iter(match=f"*{n.suffix}*", count=1000))
    for slot in n.slots:
        doomed += [
            f"{ENQUEUED_PREFIX}{slot}",
            f"rq:job:{slot}",
            f"rq:results:{slot}",
            f"arq:job:{slot}",
            f"arq:result:{slot}",
            f"arq:in-progress:{slot}",
            f"arq:retry:{slot}",
        ]
    for kind in KINDS:
        rds.srem("rq:queues", f"rq:queue:{n.queue(kind)}")
    rds.delete(*doomed)


EXECUTORS: dict[str, Callable[[Connections], object]] = {
    "rq": lambda c: RqExecutor(c, None),
    "arq": lambda c: ArqExecutor(c, None),
    "redis-stream": lambda c: RedisStreamExecutor(c, None),
}


@pytest.fixture
def pools() -> Iterator[Callable[[], Connections]]:
    """``pools()``: a node's client pool; two of them stand for two nodes."""
    made: list[Connections] = []

    def make() -> Connections:
        made.append(Connections())
        return made[-1]

    yield make
    for c in made:
        c.close()


# -- the executors alone ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_slot_is_enqueued_once_whoever_retries_it(kind, rds, names, pools):
    spec, first = names.spec(kind), names.tick(kind, fence=41)
    never = Latch()
    done = EXECUTORS[kind](pools()).run(spec, first, 10, never)
    assert done.ok, done.error
    assert done.output.startswith(("enqueued ", "added ")), done.output
    entries = queued(rds, names, kind)
    assert [(e["shardcron_scheduled_at_ms"], e["shardcron_fence"], e["shardcron_attempt"]) for e in entries] == [
        (str(first.scheduled_at_ms), "41", "1")
    ]

    # The next leader retries the slot: another node, a higher fence, attempt 2.
    retry = replace(first, attempt=2, fence=57, node_id="n1")
    again = EXECUTORS[kind](pools()).run(spec, retry, 10, never)
    assert again.ok, again.error
    assert again.output.startswith("duplicate: already "), again.output
    assert queued(rds, names, kind) == entries  # one entry, the first attempt's, not overwritten

    # Long after: the worker ran it and the queue forgot it (RQ's result_ttl, arq's keep_result).
    consume(rds, names, kind)
    late = EXECUTORS[kind](pools()).run(spec, replace(retry, attempt=3), 10, never)
    assert late.ok and late.output.startswith("duplicate: already "), (late.output, late.error)
    assert queued(rds, names, kind) == []

    # Another slot of the same job is a new entry.
    other = EXECUTORS[kind](pools()).run(spec, names.tick(kind, first.scheduled_at_ms + 1000), 10, never)
    assert other.ok and not other.output.startswith("duplicate"), (other.output, other.error)
    assert len(queued(rds, names, kind)) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_racing_attempts_of_one_slot_enqueue_it_once(kind, rds, names, pools):
    spec, tick = names.spec(kind), names.tick(kind)
    executors = [EXECUTORS[kind](pools()) for _ in range(6)]  # six nodes' worth of clients
    start = threading.Barrier(len(executors))
    results = []

    def attempt(i: int) -> None:
        start.wait(30)
        results.append(executors[i].run(spec, replace(tick, fence=100 + i), 20, Latch()))

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(executors))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r.ok for r in results), [r.error for r in results]
    assert sum(not r.output.startswith("duplicate") for r in results) == 1, [r.output for r in results]
    assert len(queued(rds, names, kind)) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_closed_port_fails_at_once_naming_the_masked_url(kind, names, pools):
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    began = time.monotonic()
    result = EXECUTORS[kind](pools()).run(names.spec(kind, url), names.tick(kind), 30, Latch())
    took = time.monotonic() - began
    assert not result.ok
    assert "s3cret-pw" not in result.error and "redis://:***@127.0.0.1:" in result.error, result.error
    assert "Connection refused" in result.error, result.error
    assert took < 15, f"a refused connection took {took:.1f}s of a 30 s timeout"  # generous: it is instant


@contextmanager
def silent_redis() -> Iterator[str]:
    """The URL of a Redis that accepts TCP connections and never answers."""
    with sockets.silent_server() as (port, _):
        yield f"redis://127.0.0.1:{port}/0"


def test_a_silent_redis_fails_within_the_socket_timeout_not_the_job_timeout(names, pools):
    with silent_redis() as url:
        began = time.monotonic()
        result = EXECUTORS["rq"](pools()).run(names.spec("rq", url), names.tick("rq"), 60, Latch())
        took = time.monotonic() - began
    assert not result.ok and "timed out" in result.error, result.error
    assert url in result.error, result.error
    assert took < 30, f"the socket timeout (5 s) did not bound a 60 s job: {took:.1f}s"


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_stops_the_enqueue(kind, rds, names, pools):
    spec, tick = names.spec(kind), names.tick(kind)
    cancelled = Latch()
    cancelled.set()
    before = EXECUTORS[kind](pools()).run(spec, tick, 10, cancelled)
    assert not before.ok and before.error.startswith("cancelled: "), before.error
    assert queued(rds, names, kind) == []

    # Mid-call: a silent Redis holds the call for its 5 s socket timeout; cancel must not wait for it.
    # (Were cancel ignored, the result would be that timeout's error, not "cancelled: ".)
    with silent_redis() as url:
        cancel = Latch()
        threading.Timer(0.3, cancel.set).start()
        during = EXECUTORS[kind](pools()).run(names.spec(kind, url), tick, 60, cancel)
    assert not during.ok and during.error.startswith("cancelled: "), during.error


# -- real nodes, real workers ------------------------------------------------------------


@contextmanager
def process(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """A worker process, logging to ``log_path``; SIGTERM (then SIGKILL) when the block ends."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})},
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        stop_process(proc, 15)


def start_worker(stack: ExitStack, kind: str, names: Names, log_dir: Path) -> subprocess.Popen:
    log = log_dir / f"worker-{kind}.log"
    if kind == "rq":
        command = [
            sys.executable,
            "-m",
            "rq.cli",
            "worker",
            "--url",
            REDIS_URL,
            "--path",
            str(ROOT),
            "--name",
            f"sc-{names.suffix}",
            names.queue(kind),
        ]
        return stack.enter_context(process(command, log))
    if kind == "arq":
        return stack.enter_context(
            process(
                [sys.executable, "-m", "arq", "tests.support.workers.arq_worker.WorkerSettings"],
                log,
                env={"SHARDCRON_TEST_REDIS_URL": REDIS_URL, "SHARDCRON_TEST_ARQ_QUEUE": names.queue(kind)},
            )
        )
    return stack.enter_context(
        process(
            [
                sys.executable,
                "-m",
                "tests.support.workers.stream_consumer",
                REDIS_URL,
                names.queue(kind),
                "sc-group",
                names.record(kind),
            ],
            log,
        )
    )


def job_dict(names: Names, kind: str, **extra) -> dict:
    return {"id": names.job(kind), "every": "1s", "timeout": "20s", "executor": names.executor(kind), **extra}


def final_ticks(engine, names: Names, job_id: str) -> list[Tick]:
    """The job's ticks once none is claimed or running any more (empty until then)."""
    ticks = list_ticks(engine, job_id, limit=1000)
    if any(not t.status.is_final for t in ticks):
        return []
    for t in ticks:
        names.seen(TickContext(t.job_id, t.scheduled_at_ms, t.attempt, t.fence, t.shard, t.node_id))
    return ticks


def succeeded(ticks: list[Tick]) -> dict[int, Tick]:
    return {t.scheduled_at_ms: t for t in ticks if t.status is TickStatus.SUCCEEDED}


def slots_received(rds: redis.Redis, names: Names, kind: str) -> Counter:
    return Counter(int(r["shardcron_scheduled_at_ms"]) for r in received(rds, names, kind))


def alive(procs: dict[str, subprocess.Popen], log_dir: Path) -> None:
    for kind, proc in procs.items():
        if proc.poll() is not None:
            tail = (log_dir / f"worker-{kind}.log").read_text(errors="replace")[-2000:]
            raise GaveUp(f"the {kind} worker exited ({proc.returncode}):\n{tail}")


def assert_sent_by(record: dict, tick: Tick) -> None:
    """The message carries its tick row's fence and attempt, or, when the row's last attempt found the slot
    already enqueued (a retry after a lost lease), an earlier attempt's under a lower or equal fence."""
    sent = (int(record["shardcron_fence"]), int(record["shardcron_attempt"]))
    if tick.output.startswith("duplicate: already "):
        assert sent[0] <= tick.fence and sent[1] < tick.attempt, (record, tick)
    else:
        assert sent == (tick.fence, tick.attempt), (record, tick)


def wait_consumed(rds, names: Names, kinds, expected: dict[str, dict[int, Tick]], procs, log_dir: Path) -> None:
    """Until every worker has received at least every slot the store recorded succeeded."""

    def caught_up() -> bool:
        alive(procs, log_dir)
        return all(set(expected[k]) <= set(slots_received(rds, names, k)) for k in kinds)

    wait_until(caught_up, 90, 0.2, what="the workers to receive every succeeded slot")


@pytest.mark.cluster
def test_every_succeeded_slot_reaches_its_worker_exactly_once(make_cluster, fresh_db_url, rds, names, tmp_path):
    db = fresh_db_url("postgresql")
    cluster = make_cluster(db, shards=1)
    node = cluster.add("n0")
    engine = make_engine(db)
    try:
        with ExitStack() as stack:
            procs = {kind: start_worker(stack, kind, names, tmp_path) for kind in KINDS}
            cluster.wait_all_led(60)
            with Client(node.address) as client:
                for kind in KINDS:
                    client.put_job(job_from_dict(job_dict(names, kind), require_executor=True))

                def thirty_each() -> bool:
                    alive(procs, tmp_path)
                    return all(len(succeeded(list_ticks(engine, names.job(k), limit=1000))) >= 30 for k in KINDS)

                wait_until(thirty_each, 150, 0.5, what="30 succeeded slots of each job")
                for kind in KINDS:
                    client.pause_job(names.job(kind))
            ticks = {
                k: wait_until(
                    lambda k=k: final_ticks(engine, names, names.job(k)), 60, 0.2, what=f"every tick of {k} to be final"
                )
                for k in KINDS
            }
            expected = {k: succeeded(ticks[k]) for k in KINDS}
            # A slot may be skipped (overlap policy) on a busy machine: never enqueued, it must not arrive either.
            failed = {
                k: [
                    (t.status.value, t.error)
                    for t in ticks[k]
                    if t.status not in (TickStatus.SUCCEEDED, TickStatus.SKIPPED)
                ]
                for k in KINDS
            }
            assert not any(failed.values()), failed
            wait_consumed(rds, names, KINDS, expected, procs, tmp_path)
            for kind in KINDS:
                records = received(rds, names, kind)
                counts = slots_received(rds, names, kind)
                assert {s: n for s, n in counts.items() if n != 1} == {}, f"{kind}: slots received more than once"
                assert set(counts) == set(expected[kind]), f"{kind}: received slots differ from the succeeded ones"
                for r in records:
                    tick = expected[kind][int(r["shardcron_scheduled_at_ms"])]
                    assert r["shardcron_job_id"] == names.job(kind)
                    assert_sent_by(r, tick)
                    if kind != "redis-stream":  # the queue's job id is the slot's uuid
                        assert r["queue_job_id"] == slot_uuid(names.tick(kind, tick.scheduled_at_ms))
    finally:
        engine.dispose()


@pytest.mark.cluster
@pytest.mark.parametrize("kind", KINDS)
def test_a_slot_retried_after_its_leader_died_mid_dispatch_runs_once(
    kind, make_cluster, fresh_db_url, rds, names, tmp_path
):
    db = fresh_db_url("postgresql")
    cluster = make_cluster(db, shards=1)
    n0 = cluster.add("n0", env={"SHARDCRON_TEST_CRASH_AFTER_DISPATCH": names.job(kind)})
    engine = make_engine(db)
    try:
        with ExitStack() as stack:
            procs = {kind: start_worker(stack, kind, names, tmp_path)}
            cluster.wait_all_led(60, by={"n0"})
            cluster.add("n1")
            cluster.wait_settled({"n0", "n1"}, 60)  # sticky placement: n0 keeps the shard
            job = job_from_dict(
                job_dict(names, kind, retry={"max_attempts": 3, "backoff": "200ms"}), require_executor=True
            )
            with Client(n0.address) as client:
                client.put_job(job)
            wait_until(lambda: not n0.alive(), 60, 0.1, what="n0 to kill itself after its first enqueue")

            def first_slot_done_and_more() -> bool:
                alive(procs, tmp_path)
                ticks = list_ticks(engine, job.id, limit=1000)
                done = [t for t in ticks if t.status is TickStatus.SUCCEEDED and t.node_id == "n1"]
                return bool(ticks) and ticks[-1].status.is_final and len(done) >= 6

            wait_until(first_slot_done_and_more, 90, 0.2, what="n1 to finish the orphaned slot and run on")
            with Client(cluster.nodes["n1"].address) as client:
                client.pause_job(job.id)
            ticks = wait_until(lambda: final_ticks(engine, names, job.id), 60, 0.2, what="every tick to be final")
            expected = succeeded(ticks)
            wait_consumed(rds, names, [kind], {kind: expected}, procs, tmp_path)

            records = received(rds, names, kind)
            counts = slots_received(rds, names, kind)
            assert {s: n for s, n in counts.items() if n != 1} == {}, "slots received more than once"
            assert set(counts) == set(expected), "received slots differ from the succeeded ones"

            # The crashed slot: enqueued once by n0 (attempt 1), retried by n1 and dropped as a duplicate.
            # (Attempt 2, unless a busy machine cost n1 its lease too and it took the slot up once more.)
            originals = [r for r in records if r["shardcron_node"] == "n0"]
            assert len(originals) == 1, originals
            original = originals[0]
            assert original["shardcron_attempt"] == "1"
            crashed = expected[int(original["shardcron_scheduled_at_ms"])]
            assert crashed.node_id == "n1" and crashed.attempt >= 2, crashed
            assert crashed.output.startswith("duplicate: already "), crashed.output
            assert crashed.fence > int(original["shardcron_fence"])
            for r in records:
                assert_sent_by(r, expected[int(r["shardcron_scheduled_at_ms"])])
    finally:
        engine.dispose()
