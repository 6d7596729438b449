"""The ``dispatch`` scenario: how fast one node hands ticks to a real broker, and whether each arrives once.

For each rate N, a fresh node leads every shard and runs N jobs of one kind,
each every second, all aimed at one new uuid-named queue (stream, subject) on
the local broker. No consumer runs, so once the node has stopped, what the
broker holds is exactly what was enqueued, and it is compared with the ticks
the store recorded succeeded: a succeeded tick missing at the broker is lost.

Two cases (issue 32). By default every slot falls on the same whole second, so
each second starts a burst of N ticks and the p99 is the burst's length. With
``--spread`` every job gets ``SPREAD_JITTER_MS`` of jitter, so the starts come
due spread over the second, N/s at an even pace, and the p99 says how late one
start is, not how long a burst takes.

Lateness here runs from the slot's due time to the broker's ack
(``finished_at_ms - due`` of succeeded ticks), not to the executor's start as
in ``precision``: for a dispatch job the enqueue is the whole run. The due time
is the slot itself (``scheduled_at_ms``), plus, with ``--spread``, the slot's
jitter offset (``rules.jitter.jitter_offset_ms``, the scheduler's own): the
row keeps the unjittered slot as its identity, while ``started_at_ms`` and
``finished_at_ms`` are the wall clock's. It is split in two, to say where the
time goes: due time to the executor's start (the dispatcher, the worker pool
and the fenced ``mark_running`` transaction before every start) and the
executor's start to the ack (the broker round trip).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from sqlalchemy import select

from shardcron.dev.bench.harness import (
    WARMUP_S,
    BenchEnv,
    db_kind,
    percentile,
    proc_cpu_seconds,
    read_store,
    window_start,
)
from shardcron.dev.bench.node_shape import COLUMNS, columns, node_shape
from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import GaveUp, wait_until
from shardcron.executors.identity import slot_uuid
from shardcron.model import TickContext
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.spec.headers import mask_url
from shardcron.store.schema import ticks

DEFAULT_BROKERS = {
    "redis": "redis://127.0.0.1:6379/0",
    "amqp": "amqp://guest:guest@127.0.0.1:5672/",
    "nats": "nats://127.0.0.1:4222",
}
# Issue 32's targets, one node: enqueues (requests answered) per second sustained, 0 lost, 0 duplicated;
# with --spread, also p99 due-to-ack lateness <= P99_TARGET_MS (slots on one second: the p99 is the burst's length).
TARGETS = {"nats": 5000, "redis-stream": 5000, "rq": 3000, "arq": 3000, "amqp": 3000, "celery": 2000, "http": 3000}
P99_TARGET_MS = 50
SPREAD_JITTER_MS = 900  # --spread: each job's jitter, shorter than its 1 s gap (as fairness's calm namespace)
SETTLE_S = 15  # after the window, how long the last slots may take to be recorded


# -- where the ticks go: one small class per kind -----------------------------------------------
#
# Each makes its queue (stream, subject) before the node starts, says how to aim a job at it,
# counts what the broker holds once the node has stopped, and removes everything it made.


class _Redis:
    """The Redis kinds: they share the per-slot markers (``shardcron:enqueued:<slot uuid>``) to remove."""

    def __init__(self, url: str, tag: str) -> None:
        import redis  # the redis extra

        self.url, self.name = url, f"shardcron-bench-{tag}"
        self.client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)

    def remove(self, slots: list[tuple[str, int]]) -> None:
        from shardcron.executors.redis_clients import ENQUEUED_PREFIX  # imports redis

        keys = [ENQUEUED_PREFIX + u for u in _slot_uuids(slots)] + self.own_keys(slots)
        for i in range(0, len(keys), 1000):
            self.client.delete(*keys[i : i + 1000])
        self.client.close()

    def own_keys(self, slots) -> list[str]:
        return [self.name]


class _RedisStream(_Redis):
    def executor(self) -> dict:
        return {"kind": "redis-stream", "url": self.url, "stream": self.name}

    def held(self) -> int:
        return self.client.xlen(self.name)  # type: ignore[return-value]  # redis-py's sync/async reply union


class _Celery(_Redis):
    # kombu's Redis transport keeps a queue as a list named after it, and the queue's bindings
    # in a set named after its exchange (a queue of its own name, for an undeclared queue).
    def executor(self) -> dict:
        return {"kind": "celery", "url": self.url, "task": "shardcron.bench.never_run", "queue": self.name}

    def held(self) -> int:
        return self.client.llen(self.name)  # type: ignore[return-value]  # redis-py's sync/async reply union

    def own_keys(self, slots) -> list[str]:
        return [self.name, f"_kombu.binding.{self.name}"]


class _Rq(_Redis):
    def executor(self) -> dict:
        return {"kind": "rq", "url": self.url, "func": "shardcron.bench.never_run", "queue": self.name}

    def held(self) -> int:
        from rq import Queue  # the redis extra

        q = Queue(self.name, connection=self.client)
        # No worker runs, so the registries stay empty; counted anyway, in case one picked a job up.
        return q.count + q.started_job_registry.count + q.finished_job_registry.count

    def remove(self, slots) -> None:
        from rq import Queue  # the redis extra

        Queue(self.name, connection=self.client).delete(delete_jobs=True)  # the jobs' hashes, and rq:queues
        super().remove(slots)


class _Arq(_Redis):
    def __init__(self, url: str, tag: str) -> None:
        super().__init__(url, tag)
        self.name = f"arq:shardcron-bench-{tag}"

    def executor(self) -> dict:
        return {"kind": "arq", "url": self.url, "function": "never_run", "queue": self.name}

    def held(self) -> int:
        return self.client.zcard(self.name)  # type: ignore[return-value]  # redis-py's sync/async reply union

    def own_keys(self, slots) -> list[str]:
        from arq.constants import job_key_prefix  # the redis extra

        return [self.name] + [job_key_prefix + u for u in _slot_uuids(slots)]  # arq's job id is the slot uuid


class _Nats:
    def __init__(self, url: str, tag: str) -> None:
        self.url, self.stream, self.subject = url, f"SHARDCRON_BENCH_{tag}", f"shardcron.bench.{tag}"
        self.name = self.stream
        self._js(lambda js: js.add_stream(name=self.stream, subjects=[self.subject]))

    def _js(self, action):
        import nats  # the nats extra

        async def quiet(e):  # nats-py's default error callback logs a traceback-like line per failed try
            pass

        async def go():
            # Tried twice at most (0 means "retry forever" to nats-py), and bounded as a whole.
            nc = await asyncio.wait_for(
                nats.connect(
                    self.url,
                    connect_timeout=5,
                    allow_reconnect=False,
                    max_reconnect_attempts=1,
                    reconnect_time_wait=0.1,
                    error_cb=quiet,
                ),
                15,
            )
            try:
                return await action(nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(go())

    def executor(self) -> dict:
        return {"kind": "nats", "url": self.url, "subject": self.subject, "jetstream": True}

    def held(self) -> int:
        async def count(js):
            return (await js.stream_info(self.stream)).state.messages

        return self._js(count)

    def remove(self, slots) -> None:
        self._js(lambda js: js.delete_stream(self.stream))


class _Amqp:
    def __init__(self, url: str, tag: str) -> None:
        from kombu import Connection  # the celery extra

        self.url, self.name = url, f"shardcron-bench-{tag}"
        self.conn = Connection(url, connect_timeout=5)
        self.conn.default_channel.queue_declare(queue=self.name, durable=True, auto_delete=False)

    def executor(self) -> dict:
        return {"kind": "amqp", "url": self.url, "routing_key": self.name}  # the default exchange

    def held(self) -> int:
        return self.conn.default_channel.queue_declare(queue=self.name, passive=True).message_count

    def remove(self, slots) -> None:
        self.conn.default_channel.queue_delete(self.name)
        self.conn.release()


class _Http:
    """The dev sink, in this process: HTTP/1.1 keep-alive, a thread per connection, a listen backlog of 1024.

    It counts what it received (every request, answered 200), as a broker counts what it holds.
    """

    def __init__(self, url: str, tag: str) -> None:  # url: none, the sink is in this process
        self.sink = Sink()
        self.sink.start()
        self.name = self.sink.url

    def executor(self) -> dict:
        return {"kind": "http", "url": self.sink.url + "/bench"}

    def held(self) -> int:
        return len(self.sink.requests())

    def remove(self, slots) -> None:
        self.sink.stop()


class Destination(Protocol):
    """What a step needs of where its ticks go (the classes above)."""

    name: str

    def executor(self) -> dict: ...

    def held(self) -> int: ...

    def remove(self, slots: list[tuple[str, int]]) -> None: ...


DESTINATIONS: dict[str, Callable[[str, str], Destination]] = {
    "redis-stream": _RedisStream,
    "celery": _Celery,
    "rq": _Rq,
    "arq": _Arq,
    "nats": _Nats,
    "amqp": _Amqp,
    "http": _Http,
}


def default_broker(kind: str) -> str | None:
    if kind == "http":
        return None
    return DEFAULT_BROKERS[{"nats": "nats", "amqp": "amqp"}.get(kind, "redis")]


def _slot_uuids(slots: list[tuple[str, int]]) -> list[str]:
    return [slot_uuid(TickContext(job_id, at, 1, 0, 0, "")) for job_id, at in slots]  # the key only


# -- the scenario -------------------------------------------------------------------------------------


def run(make_env, kind: str, rates: list[int], seconds: int, broker: str | None, spread: bool = False) -> dict:
    """One step per rate, each on a fresh node (and a fresh store unless ``--db``); ``spread``: jittered slots."""
    broker = broker or default_broker(kind)
    jitter_ms = SPREAD_JITTER_MS if spread else 0
    steps = []
    db = None
    for rate in rates:
        with make_env() as env:
            db = db_kind(env.db)
            try:
                steps.append(step(env, kind, rate, seconds, broker, jitter_ms))
            except (TimeoutError, GaveUp) as e:
                # Keep the steps already measured; a higher rate would not fare better.
                tail = " | ".join(
                    line for n in env.cluster.nodes.values() for line in n.log_text().strip().splitlines()[-2:]
                )
                steps.append({"rate": rate, "error": f"{e}; node log: {tail}"[:1000]})
                break
    target = TARGETS[kind]
    p99_target = P99_TARGET_MS if spread else None
    return {
        "scenario": "dispatch",
        "kind": kind,
        "broker": mask_url(broker) if broker else "dev sink",
        "db": db,
        "seconds": seconds,
        "spread": spread,
        "jitter_ms": jitter_ms,
        "target_per_s": target,
        "target_p99_ms": p99_target,
        "target_met": any(meets(s, target, p99_target) for s in steps),
        "steps": steps,
    }


def meets(s: dict, target_per_s: int, p99_target_ms: int | None) -> bool:
    """Whether one step meets issue 32's target: the rate sustained, 0 lost, 0 duplicated, and the p99 if judged."""
    if "error" in s:
        return False
    p99 = s["lateness_ms"]["p99"]
    return (
        s["rate"] >= target_per_s
        and s["enqueues_per_s"] >= target_per_s
        and not s["lost"]
        and not s["duplicated"]
        and (p99_target_ms is None or (p99 is not None and p99 <= p99_target_ms))
    )


def step(env: BenchEnv, kind: str, rate: int, seconds: int, broker: str | None, jitter_ms: int = 0) -> dict:
    tag = uuid.uuid4().hex[:12]
    prefix = f"dsp{rate}x{tag[:6]}"  # unique, so steps and runs sharing one store never see each other's ticks
    try:
        dest = DESTINATIONS[kind](broker or "", tag)  # no broker: the dev sink
    except Exception as e:  # noqa: BLE001 - a broker that does not answer: say which, without a traceback
        raise RuntimeError(
            f"cannot prepare the {kind} destination at {mask_url(broker or '')}: {type(e).__name__}: {e}"
        ) from None
    slots: list[tuple[str, int]] = []
    try:
        jobs_file = os.path.join(env.workdir, f"jobs-{prefix}.json")
        jitter = {"jitter": f"{jitter_ms}ms"} if jitter_ms else {}
        with open(jobs_file, "w") as f:
            json.dump(
                {
                    "jobs": [
                        {"id": f"{prefix}-{i:06d}", "every": "1s", **jitter, "executor": dest.executor()}
                        for i in range(rate)
                    ]
                },
                f,
            )
        try:
            env.start_nodes(jobs_file)
            env.wait_jobs_loaded(rate)
            pids = env.pids()
            from_ms = window_start(WARMUP_S)
            to_ms = from_ms + seconds * 1000
            wait_until(lambda: time.time() * 1000 >= from_ms, WARMUP_S + 5, 0.05, "the window to open")
            with node_shape(env) as shape:
                cpu0 = {n: proc_cpu_seconds(p) for n, p in pids.items()}
                wait_until(lambda: time.time() * 1000 >= to_ms, seconds + 5, 0.1, "the window to close")
                cpu = sum(proc_cpu_seconds(p) - cpu0[n] for n, p in pids.items())
            _wait_settled(env.db, prefix, from_ms, to_ms, rate * seconds)
        finally:
            # Stopped before counting: nothing is sent while the broker is counted.
            env.cluster.stop_all()
            env.forget_jobs(prefix)
        rows = _rows(env.db, prefix)
        slots = sorted({(r.job_id, r.scheduled_at_ms) for r in rows})
        out = figures(rows, rate, seconds, from_ms, dest.held(), jitter_ms)
        out["destination"] = dest.name
        out["node"] = shape
        out["cpu_ms_per_1000_ticks"] = round(1000 * cpu / out["succeeded"] * 1000, 1) if out["succeeded"] else None
        return out
    finally:
        dest.remove(slots)


def figures(rows: list, rate: int, seconds: int, from_ms: int, held: int, jitter_ms: int = 0) -> dict:
    """The step's figures from its tick rows (every slot, warm-up and tail included) and the broker's count.

    A slot belongs to the window by its identity (``scheduled_at_ms``); its lateness runs from its due
    time, the slot plus its offset under the jobs' ``jitter_ms`` (0: the slot itself).
    """
    to_ms = from_ms + seconds * 1000
    window = [r for r in rows if from_ms <= r.scheduled_at_ms < to_ms and not r.manual]
    per_slot = Counter((r.job_id, r.scheduled_at_ms) for r in window)
    ok = [r for r in window if r.status == "succeeded"]
    due = [r.scheduled_at_ms + jitter_offset_ms(r.job_id, r.scheduled_at_ms, jitter_ms) for r in ok]
    lateness = sorted(r.finished_at_ms - d for r, d in zip(ok, due, strict=True))
    to_start = sorted(r.started_at_ms - d for r, d in zip(ok, due, strict=True))
    round_trip = sorted(r.finished_at_ms - r.started_at_ms for r in ok)
    failed = [r for r in window if r.status == "failed"]
    # Every slot the node ran, in the window or not, counts against the broker: it holds all of them.
    succeeded_total = sum(1 for r in rows if r.status == "succeeded")
    expected = rate * seconds
    return {
        "rate": rate,
        "expected": expected,
        "succeeded": len({(r.job_id, r.scheduled_at_ms) for r in ok}),
        "enqueues_per_s": round(len(ok) / seconds, 1),
        "missed": expected - len({(r.job_id, r.scheduled_at_ms) for r in ok}),
        "duplicated": sum(c - 1 for c in per_slot.values() if c > 1),
        "failed": len(failed),
        # Neither succeeded nor failed (skipped, abandoned, still running): says what "missed" was.
        "other": dict(Counter(r.status for r in window if r.status not in ("succeeded", "failed"))),
        "first_error": (failed[0].error or "")[:300] if failed else None,
        "lateness_ms": {
            "p50": percentile(lateness, 50),
            "p99": percentile(lateness, 99),
            "max": lateness[-1] if lateness else None,
        },
        "to_start_ms": {"p50": percentile(to_start, 50), "p99": percentile(to_start, 99)},
        "round_trip_ms": {"p50": percentile(round_trip, 50), "p99": percentile(round_trip, 99)},
        "succeeded_all_slots": succeeded_total,
        "at_broker": held,
        # Recorded succeeded (the broker acked) but not at the broker: lost.
        "lost": max(0, succeeded_total - held),
        # At the broker but not recorded succeeded: sent, then the attempt failed, was cancelled by
        # the node's stop, or (without a broker-side dedupe) was sent twice.
        "unrecorded": max(0, held - succeeded_total),
    }


def _rows(db: str, prefix: str, from_ms: int = 0, to_ms: int = 2**62) -> list:
    with read_store(db) as c:
        return c.execute(
            select(
                ticks.c.job_id,
                ticks.c.scheduled_at_ms,
                ticks.c.started_at_ms,
                ticks.c.finished_at_ms,
                ticks.c.status,
                ticks.c.manual,
                ticks.c.error,
            ).where(
                ticks.c.job_id.like(f"{prefix}-%"), ticks.c.scheduled_at_ms >= from_ms, ticks.c.scheduled_at_ms < to_ms
            )
        ).all()


def _wait_settled(db: str, prefix: str, from_ms: int, to_ms: int, expected: int) -> None:
    """Until every slot of the window has a final status (results are written in batches), or SETTLE_S pass."""
    deadline = time.time() + SETTLE_S
    while time.time() < deadline:
        done = [r for r in _rows(db, prefix, from_ms, to_ms) if r.status not in ("claimed", "running")]
        if len(done) >= expected:
            return
        time.sleep(0.5)


def render(f: dict) -> list[list]:
    """Rows for the table: one per rate."""
    return [
        [
            s["rate"],
            s["expected"],
            s["enqueues_per_s"],
            s["lateness_ms"]["p50"],
            s["lateness_ms"]["p99"],
            s["lateness_ms"]["max"],
            s["to_start_ms"]["p99"],
            s["round_trip_ms"]["p99"],
            s["missed"],
            s["duplicated"],
            s["failed"],
            s["at_broker"],
            s["lost"],
            s["unrecorded"],
            s["cpu_ms_per_1000_ticks"],
            *columns(s.get("node")),
        ]
        for s in f["steps"]
        if "error" not in s
    ]


HEADERS = [
    "jobs/s",
    "expected",
    "enqueues/s",
    "p50 ms",
    "p99 ms",
    "max ms",
    "to start p99",
    "round trip p99",
    "missed",
    "duplicated",
    "failed",
    "at broker",
    "lost",
    "unrecorded",
    "CPU ms/1k",
    *COLUMNS,
]


def case(f: dict) -> str:
    """Which case ran: every slot on the same second, or spread by jitter."""
    return f"slots spread by {f['jitter_ms']} ms of jitter" if f["spread"] else "slots on one second"


def heading(f: dict) -> str:
    return f"dispatch to {f['kind']} at {f['broker']}, store {f['db']}, {f['seconds']} s per rate, {case(f)}"


def verdict(f: dict) -> str:
    """Issue 32's target for the case that ran; the one-second case's p99 is not judged."""
    outcome = f"{'met' if f['target_met'] else 'NOT met'} on {f['db']}"
    if f["spread"]:
        return (
            f"target (issue 32, {case(f)}): >= {f['target_per_s']}/s to {f['kind']} with p99 <= "
            f"{f['target_p99_ms']} ms, 0 lost, 0 duplicated: {outcome}"
        )
    return (
        f"target (issue 32, {case(f)}): >= {f['target_per_s']}/s to {f['kind']}, 0 lost, 0 duplicated: {outcome}; "
        f"the p99 here is the burst's length, judged against {P99_TARGET_MS} ms only with --spread"
    )
