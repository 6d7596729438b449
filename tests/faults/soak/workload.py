"""The soak's static workload: the jobs of the nodes' jobs file, the session job's effects, the stream consumer.

Static jobs (never changed by the operation generator; a node's restart
re-imports the file): a 1 s noop job on every shard, a 6-field cron job, a
jittered job, a job under a calendar whose excluded ranges cut short windows
into the run, the SESSION job (a python call writing one ``user_effects`` row
per run in the tick's fenced transaction: ``tests/support/soak_target.py``) and
the STREAM job (an XADD per slot to a per-run Redis stream, read back by
``StreamConsumer`` through ``shardcron.consumer``). All of them: catch-up "all",
overlap "allow", a catch-up window longer than the run.

The calendar lives in the jobs file (``[calendars.<name>]``): a node imports
it before it leads any shard, so the calendar job never names an unknown one.

Nodes sit in network namespaces and reach Redis, which listens on 127.0.0.1,
through a ``TcpForwarder`` on the lab bridge, as they reach PostgreSQL.

``Workload`` puts it together for one run; see its docstring for the order of calls.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime
from typing import NamedTuple

import redis
from sqlalchemy import select
from sqlalchemy.engine import Connection, Engine

from shardcron.consumer import NotATick, RedisDeduper, TickInfo
from shardcron.dev.testing.cluster import wait_until
from shardcron.sharding import shard_for
from shardcron.store.schema import fence_log, jobs, ticks
from tests.faults import harness
from tests.faults.netns import NetLab, TcpForwarder
from tests.faults.soak.history import Delivery, Effect, FenceRaise, History, StaticJob, TickRow
from tests.support import soak_target

REDIS_URL = "redis://127.0.0.1:6379/0"
SESSION_JOB = "session"
CALENDAR_JOB = "cal-1s"
CALENDAR = "soak-cal"
# Excluded ranges of the calendar: EXCLUDED_S long, one every EXCLUDED_EVERY_S, from CALENDAR_LEAD_S after the
# workload is made (past the cluster's start, which waits for every static job to run once) until
# CALENDAR_TAIL_S past the run (the heal, the schedule followed after it, the waits for final rows).
EXCLUDED_S = 3
EXCLUDED_EVERY_S = 20
CALENDAR_LEAD_S = 30
CALENDAR_TAIL_S = 600
# The effect jobs retry a run whose leader died mid-call: the successor's retry is the exactly-once path
# (the session's writes rolled back with the dead run; the stream's message id dropped by the dedupe).
RETRY = {"max_attempts": 3, "backoff": "100ms", "backoff_max": "1s"}
CATCHUP_MARGIN_S = 3600  # the static jobs' catch-up window: the run plus this
DELIVERY_TTL_S = 6 * 3600  # the consumer's dedupe records outlive any run

_COMMON = {"catchup": "all", "overlap": "allow"}


# -- the static jobs (pure) ---------------------------------------------------------------------


def noop_ids(shards: int) -> list[str]:
    """One id per shard, ``noop-<shard>-<n>`` with the first n that lands the id on that shard."""
    out = []
    for k in range(shards):
        n = 0
        while shard_for(f"noop-{k:02d}-{n}", shards) != k:
            n += 1
        out.append(f"noop-{k:02d}-{n}")
    return out


def static_jobs(
    *, shards: int, run_s: float, stream_url: str, stream_key: str, stream_job: str, calendar: str = CALENDAR
) -> list[harness.JobDef]:
    """The static jobs; ``stream_url`` is Redis as the nodes reach it (the forwarder on the bridge)."""
    window = {"catchup_window": f"{int(run_s) + CATCHUP_MARGIN_S}s"}

    def job(job_id: str, interval_ms: int, schedule: dict, executor: dict, **extra) -> harness.JobDef:
        return harness.JobDef(
            job_id, interval_ms, {"id": job_id, **schedule, **_COMMON, **window, **extra, "executor": executor}
        )

    noop = {"kind": "noop"}
    out = [job(i, 1000, {"every": "1s"}, noop) for i in noop_ids(shards)]
    out.append(job("cron-2s", 2000, {"cron": "*/2 * * * * *"}, noop))
    out.append(job("jitter-2s", 2000, {"every": "2s", "jitter": "700ms"}, noop))
    out.append(job(CALENDAR_JOB, 1000, {"every": "1s"}, noop, calendars=[calendar]))
    out.append(
        job(
            SESSION_JOB,
            1000,
            {"every": "1s"},
            {"kind": "python", "target": soak_target.TARGET, "session": True},
            timeout="10s",
            retry=RETRY,
        )
    )
    out.append(
        job(
            stream_job,
            1000,
            {"every": "1s"},
            {
                "kind": "redis-stream",
                "url": stream_url,
                "stream": stream_key,
                "fields": {"source": "soak"},
                "dedupe_ttl": f"{int(run_s) + CATCHUP_MARGIN_S}s",
            },
            timeout="10s",
            retry=RETRY,
        )
    )
    return out


def exclusion_calendar(
    from_ms: int, until_ms: int, *, every_s: int = EXCLUDED_EVERY_S, length_s: int = EXCLUDED_S
) -> dict:
    """A calendar excluding ``[t, t + length_s)`` every ``every_s`` from ``from_ms`` (on whole seconds)
    through ``until_ms``, in the form ``parse_calendar`` reads."""
    start = -(-from_ms // 1000) * 1000
    ranges = [{"from": _iso(t), "to": _iso(t + length_s * 1000)} for t in range(start, until_ms, every_s * 1000)]
    return {"exclude_ranges": ranges}


def calendars_toml(calendars: dict[str, dict]) -> str:
    """``[calendars.<name>]`` tables of ``exclude_ranges`` calendars, to append to a jobs file."""
    lines = []
    for name, body in calendars.items():
        lines.append(f"[calendars.{name}]")
        ranges = ", ".join(
            f"{{ from = {json.dumps(r['from'])}, to = {json.dumps(r['to'])} }}" for r in body.get("exclude_ranges", [])
        )
        lines.append(f"exclude_ranges = [{ranges}]")
        lines.append("")
    return "\n".join(lines)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


# -- the store --------------------------------------------------------------------------------


class StoreHistory(NamedTuple):
    ticks: list[TickRow]
    fences: list[FenceRaise]
    effects: list[Effect]
    active_since: dict[str, int]  # job id -> active_since_ms, for the jobs the store holds now


def create_effects_table(engine: Engine) -> None:
    soak_target.metadata.create_all(engine)


def read_effects(engine: Engine) -> list[Effect]:
    with engine.connect() as c:
        return _effects(c)


def read_ticks(engine: Engine) -> list[TickRow]:
    with engine.connect() as c:
        return _ticks(c)


def read_fences(engine: Engine) -> list[FenceRaise]:
    with engine.connect() as c:
        return _fences(c)


def read_active_since(engine: Engine) -> dict[str, int]:
    with engine.connect() as c:
        return _active_since(c)


def collect_store(engine: Engine) -> StoreHistory:
    """Every tick row, fence raise and effect, and the stored jobs' activation, from one snapshot (REPEATABLE
    READ: an effect commits with its tick's result, so the two agree even while jobs still run)."""
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as c, c.begin():
        return StoreHistory(_ticks(c), _fences(c), _effects(c), _active_since(c))


def _effects(c: Connection) -> list[Effect]:
    e = soak_target.effects
    rows = c.execute(select(e.c.job_id, e.c.slot, e.c.node_id, e.c.fence).order_by(e.c.id)).all()
    return [Effect(r.job_id, r.slot, r.node_id, r.fence) for r in rows]


def _ticks(c: Connection) -> list[TickRow]:
    t = ticks.c
    rows = c.execute(
        select(
            t.job_id,
            t.scheduled_at_ms,
            t.status,
            t.manual,
            t.shard,
            t.fence,
            t.node_id,
            t.attempt,
            t.claimed_at_ms,
            t.started_at_ms,
            t.finished_at_ms,
            t.error,
        ).order_by(t.job_id, t.scheduled_at_ms)
    ).all()
    return [
        TickRow(
            r.job_id,
            r.scheduled_at_ms,
            r.status,
            bool(r.manual),
            r.shard,
            r.fence,
            r.node_id,
            r.attempt,
            r.claimed_at_ms,
            r.started_at_ms,
            r.finished_at_ms,
            r.error,
        )
        for r in rows
    ]


def _fences(c: Connection) -> list[FenceRaise]:
    f = fence_log.c
    rows = c.execute(select(f.shard, f.fence, f.node_id, f.raised_at_ms).order_by(f.shard, f.fence)).all()
    return [FenceRaise(r.shard, r.fence, r.node_id, r.raised_at_ms) for r in rows]


def _active_since(c: Connection) -> dict[str, int]:
    return dict(c.execute(select(jobs.c.id, jobs.c.active_since_ms)).all())


def read_static_jobs(engine: Engine, job_defs: list[harness.JobDef]) -> list[StaticJob]:
    """The static jobs with their activation from the store (KeyError naming a job the store lacks)."""
    since = read_active_since(engine)
    missing = [j.id for j in job_defs if j.id not in since]
    if missing:
        raise KeyError(f"static jobs not in the store's jobs table: {missing}")
    return [StaticJob(j.id, dict(j.spec), since[j.id]) for j in job_defs]


# -- the stream consumer --------------------------------------------------------------------------


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _redis_address(url: str) -> tuple[str, int, int]:
    """(host, port, db) of the Redis at ``url``, which must answer: a clear error now rather than a
    stream job failing every slot."""
    r = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        r.ping()
        kw = r.connection_pool.connection_kwargs
        return kw.get("host", "127.0.0.1"), int(kw.get("port", 6379)), int(kw.get("db", 0))
    except redis.RedisError as e:
        raise RuntimeError(f"the soak's stream job needs Redis at {url}: {e}") from e
    finally:
        r.close()


class StreamConsumer:
    """A thread reading ``stream_key`` from its start (XREAD), admitting each entry through a
    ``RedisDeduper`` under ``dedupe_prefix`` (default ``<stream_key>:dedupe:``) and appending a
    ``Delivery`` to ``history.deliveries``.

    It never dies of a Redis error (logged, retried after a pause). ``drain`` waits until every entry
    the stream held when it was called has been read; ``stop`` ends the thread.
    """

    def __init__(
        self, redis_url: str, stream_key: str, history: History, *, dedupe_prefix: str | None = None, log=print
    ):
        self.stream_key = stream_key
        self.history = history
        self.log = log
        self._client = redis.Redis.from_url(
            redis_url, decode_responses=True, socket_timeout=5, socket_connect_timeout=5
        )
        self._deduper = RedisDeduper(
            self._client, prefix=dedupe_prefix or f"{stream_key}:dedupe:", ttl_s=DELIVERY_TTL_S
        )
        self._last = "0-0"  # the last entry handled
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-stream-consumer", daemon=True)

    def start(self) -> StreamConsumer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.close()

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self.history.deliveries)

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Until the consumer has read every entry the stream holds now; False if it has not within ``timeout_s``."""
        target: list[str] = []  # the newest entry when first read

        def caught_up() -> bool:
            try:
                if not target:
                    newest = self._client.xrevrange(self.stream_key, count=1)
                    target.append(newest[0][0] if newest else "0-0")
                return _entry_order(self._last) >= _entry_order(target[0])
            except redis.RedisError as e:
                self.log(f"stream consumer: drain cannot read {self.stream_key}: {e}")
                return False

        try:
            wait_until(caught_up, timeout_s, 0.1, f"the consumer to read {self.stream_key} to its end")
            return True
        except TimeoutError:
            self.log(
                f"stream consumer: {self.stream_key} not drained within {timeout_s:.0f}s "
                f"(read up to {self._last}, newest {target[:1]})"
            )
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for _, entries in self._client.xread({self.stream_key: self._last}, count=200, block=500) or []:
                    for entry_id, fields in entries:
                        self._handle(fields)
                        self._last = entry_id
            except redis.RedisError as e:
                self.log(f"stream consumer: reading {self.stream_key} failed, retrying: {e}")
                self._stop.wait(0.5)
            except Exception as e:  # noqa: BLE001 - the soak's consumer must outlive anything; say what
                self.log(f"stream consumer: unexpected {type(e).__name__} reading {self.stream_key}: {e}")
                self._stop.wait(0.5)

    def _handle(self, fields: dict) -> None:
        try:
            tick = TickInfo.from_mapping(fields)
        except NotATick as e:
            self.log(f"stream consumer: skipping an entry of {self.stream_key}: {e}")
            return
        verdict = self._deduper.admit(tick)  # a Redis error leaves the entry unread: read again after the pause
        d = Delivery(
            job=tick.job_id,
            slot_ms=tick.scheduled_at_ms,
            attempt=tick.attempt,
            fence=tick.fence,
            verdict=verdict.value.replace("-", "_"),
            at_ms=harness.now_ms(),
        )
        with self._lock:
            self.history.deliveries.append(d)


# -- one run's workload ---------------------------------------------------------------------------


class Workload:
    """The static workload of one soak run. In this order::

        with Workload(fault_lab, history) as wl:        # Redis forwarder; history.calendars, session_job, stream_job
            fc = fault_cluster(ttl=..., job_defs=wl.job_defs, extra_args=wl.node_args)
            wl.prepare(fc)                              # calendars into the jobs file, user_effects, consumer
            fc.start()
            history.static_jobs = wl.static_history(fc.engine)
            ...                                         # operations, faults, heal, wait for final rows
            wl.drain()                                  # the consumer has read the whole stream
            store = collect_store(fc.engine)            # ticks, fences, effects
        # on exit: the consumer stops, the forwarder closes, the run's Redis keys are deleted

    The consumer appends to ``history.deliveries`` as it reads.
    """

    def __init__(self, lab: NetLab, history: History, *, redis_url: str = REDIS_URL, log=print):
        self.lab = lab
        self.history = history
        self.redis_url = redis_url
        self.log = log
        tag = uuid.uuid4().hex[:8]
        # Per run: the executor's once-per-slot markers are keyed by job id and slot, so two runs sharing
        # this Redis at once (their slots coincide) must not share a stream job's id.
        self.stream_job = f"stream-{tag}"
        self.stream_key = f"soak:{tag}:stream"
        self.dedupe_prefix = f"soak:{tag}:dedupe:"
        self.forwarder: TcpForwarder | None = None
        self.consumer: StreamConsumer | None = None
        self.job_defs: list[harness.JobDef] = []
        self.calendars: dict[str, dict] = {}

    @property
    def node_args(self) -> list[str]:
        return ["--allow-python", soak_target.ALLOW_PYTHON]

    def __enter__(self) -> Workload:
        host, port, db = _redis_address(self.redis_url)
        self.forwarder = TcpForwarder(self.lab.gateway, (host, port)).start()
        node_url = f"redis://{self.lab.gateway}:{self.forwarder.port}/{db}"
        now = harness.now_ms()
        self.calendars = {
            CALENDAR: exclusion_calendar(
                now + CALENDAR_LEAD_S * 1000, now + int((self.history.seconds + CALENDAR_TAIL_S) * 1000)
            )
        }
        self.job_defs = static_jobs(
            shards=self.history.shards,
            run_s=self.history.seconds,
            stream_url=node_url,
            stream_key=self.stream_key,
            stream_job=self.stream_job,
        )
        self.history.calendars = dict(self.calendars)
        self.history.session_job = SESSION_JOB
        self.history.stream_job = self.stream_job
        return self

    def prepare(self, fc: harness.FaultCluster) -> None:
        """Before ``fc.start()``: the calendars into its jobs file, the effects table, the consumer started."""
        with open(fc.jobs_file, "a") as f:
            f.write("\n" + calendars_toml(self.calendars))
        create_effects_table(fc.engine)
        self.consumer = StreamConsumer(
            self.redis_url, self.stream_key, self.history, dedupe_prefix=self.dedupe_prefix, log=self.log
        ).start()

    def static_history(self, engine: Engine) -> list[StaticJob]:
        """After ``fc.start()`` (every static job ran once, so the store holds each)."""
        return read_static_jobs(engine, self.job_defs)

    def drain(self, timeout_s: float = 60.0) -> bool:
        return self.consumer.drain(timeout_s) if self.consumer else True

    def deliveries(self) -> list[Delivery]:
        return self.consumer.deliveries() if self.consumer else []

    def __exit__(self, *exc) -> None:
        try:
            if self.consumer:
                self.consumer.stop()
        finally:
            if self.forwarder:
                self.forwarder.stop()
            self._delete_keys()

    def _delete_keys(self) -> None:
        r = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        try:
            r.delete(self.stream_key)
            for key in r.scan_iter(match=self.dedupe_prefix + "*", count=500):
                r.delete(key)
        except redis.RedisError as e:
            self.log(f"workload: could not delete the run's Redis keys ({self.stream_key}, {self.dedupe_prefix}*): {e}")
        finally:
            r.close()
