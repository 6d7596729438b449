"""The consumer's guard: run each slot's effect once, and refuse a deposed leader's messages.

shardcron sends every tick with its identity (``shardcron.executors.identity``):
the slot ``(job_id, scheduled_at_ms)``, the attempt, and the fence its leader
held. Brokers that deduplicate by message id (JetStream, RQ, arq) drop a
retried slot's second copy themselves; Celery and AMQP do not, and any broker
redelivers a message whose consumer died before acknowledging it. A consumer
admits each message here before acting on it::

    from shardcron.consumer.guard import RedisDeduper, TickInfo, Verdict

    deduper = RedisDeduper("redis://127.0.0.1:6379/0")

    def on_message(msg):                            # NATS, AMQP, anything with headers
        tick = TickInfo.from_mapping(msg.headers)   # NotATick if shardcron did not send it
        if deduper.admit(tick) is Verdict.FIRST:    # (in asyncio: await asyncio.to_thread(deduper.admit, tick))
            do_the_work(msg)
        msg.ack()                                   # a refused message is acknowledged too

``admit`` answers one of three verdicts:

* ``FIRST``: the first sight of this slot: act on it.
* ``DUPLICATE``: the slot was admitted before (a retry by the next leader, or
  a redelivery): skip it.
* ``STALE_FENCE``: the message carries a lower fence than one already seen for
  the job. Fences are etcd revisions, so they only grow, across every shard and
  every reshard: a lower one means a deposed leader's message arriving late.
  Skip it; the leader that replaced it owns the job now.

Exactly once, not merely at most once, needs the record and the effect to commit
together. ``SqlDeduper`` does that when given the consumer's own connection::

    deduper = SqlDeduper(engine)

    with engine.begin() as conn:                    # the consumer's transaction
        if deduper.admit(tick, connection=conn) is Verdict.FIRST:
            conn.execute(insert(reports).values(...))
    # A crash before the commit forgets both; the redelivery is FIRST again.

The ``dedupe`` decorator does the same for task functions (Celery, RQ, arq),
finding the tick wherever that framework carries it; see its docstring.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol

from sqlalchemy import BigInteger, Column, Connection, Engine, MetaData, Table, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from shardcron import clock
from shardcron.errors import ShardcronError
from shardcron.store.engine import make_engine, writing
from shardcron.store.schema import ID_LENGTH, exact_string
from shardcron.store.sql import insert_ignoring_duplicates
from shardcron.jobkey import DEFAULT_NAMESPACE, join_key, slot_idempotency_key

log = logging.getLogger("shardcron.consumer.guard")


class NotATick(ShardcronError):
    """A message or task call carries no shardcron tick, or a malformed one. ``field`` names the culprit."""

    def __init__(self, field: str | None, reason: str):
        super().__init__(f"not a shardcron tick: {field}: {reason}" if field else f"not a shardcron tick: {reason}")
        self.field = field
        self.reason = reason


class Verdict(StrEnum):
    FIRST = "first"
    DUPLICATE = "duplicate"
    STALE_FENCE = "stale-fence"


# field -> the names it travels under: identity.tick_fields, identity.tick_headers
# (matched lowercased: header names are case-insensitive), and the bare name,
# which a nested {"shardcron": {...}} mapping may use.
_NAMES: dict[str, tuple[str, ...]] = {
    "job_id": ("shardcron_job_id", "x-shardcron-job-id", "job_id"),
    "scheduled_at_ms": ("shardcron_scheduled_at_ms", "x-shardcron-scheduled-at-ms", "scheduled_at_ms"),
    "attempt": ("shardcron_attempt", "x-shardcron-attempt", "attempt"),
    "fence": ("shardcron_fence", "x-shardcron-fence", "fence"),
    "shard": ("shardcron_shard", "x-shardcron-shard", "shard"),
    "node_id": ("shardcron_node", "x-shardcron-node", "node_id", "node"),
    "namespace": ("shardcron_namespace", "x-shardcron-namespace", "namespace"),  # absent: default
}
_REQUIRED = ("job_id", "scheduled_at_ms", "attempt", "fence")
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class TickInfo:
    """What a consumer needs to know about the tick a message belongs to."""

    job_id: str
    scheduled_at_ms: int
    attempt: int
    fence: int
    shard: int | None = None
    node_id: str | None = None
    namespace: str | None = None  # None: default

    @property
    def key(self) -> str:
        """The job's key: unique across namespaces (what the dedupe stores are keyed by)."""
        return join_key(self.namespace or DEFAULT_NAMESPACE, self.job_id)

    @property
    def idempotency_key(self) -> str:
        return slot_idempotency_key(self.key, self.scheduled_at_ms)

    @classmethod
    def from_mapping(cls, m: Mapping[Any, Any]) -> TickInfo:
        """Read a tick from message headers, stream fields, task headers or RQ meta.

        Takes either spelling (``shardcron_fence`` or ``X-Shardcron-Fence``, any
        case), ``str``/``bytes``/``int`` values, and a nested ``{"shardcron": {...}}``.
        Raises ``NotATick`` naming the first field that is missing or malformed.
        """
        if isinstance(m, TickInfo):
            return m
        if not isinstance(m, Mapping):
            raise NotATick(None, f"expected a mapping of tick fields, got {type(m).__name__}")
        flat = _lowered(m)
        nested = flat.get("shardcron")
        if isinstance(nested, Mapping):
            flat = _lowered(nested)
        values: dict[str, Any] = {}
        for field, names in _NAMES.items():
            name, raw = next(((n, flat[n]) for n in names if n in flat), (names[0], None))
            if raw is None:
                if field in _REQUIRED:
                    raise NotATick(name, "missing")
                values[field] = None
                continue
            values[field] = _parse(field, name, raw)
        return cls(**values)


def _lowered(m: Mapping[Any, Any]) -> dict[str, Any]:
    out = {}
    for k, v in m.items():
        if isinstance(k, bytes):
            k = k.decode("utf-8", "replace")
        if isinstance(k, str):
            out[k.lower()] = v
    return out


def _parse(field: str, name: str, raw: Any) -> str | int:
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise NotATick(name, "not UTF-8") from None
    if field in ("job_id", "node_id", "namespace"):
        if not isinstance(raw, str) or not raw:
            raise NotATick(name, f"expected a non-empty string, got {raw!r}")
        return raw
    # bool is an int too, and never a tick number.
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str) and _DIGITS.fullmatch(raw.strip()):
        return int(raw)
    raise NotATick(name, f"expected a non-negative integer, got {raw!r}")


class Deduper(Protocol):
    """What ``dedupe`` needs: ``RedisDeduper``, ``SqlDeduper``, or your own."""

    def admit(self, tick: TickInfo) -> Verdict: ...

    def release(self, tick: TickInfo) -> None: ...


# --- Redis ----------------------------------------------------------------

# KEYS[1] the job's highest fence, KEYS[2] the slot; ARGV[1] the tick's fence, ARGV[2] the TTL in ms.
# One script, so the fence check, the slot record and the fence raise are one
# atomic step: two consumers of one slot cannot both see it unrecorded.
_ADMIT_LUA = """
local fence = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[1]) or '-1')
if fence < highest then
  return 'stale-fence'
end
local verdict = 'first'
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  verdict = 'duplicate'
end
-- A higher fence is news even on a duplicate: its leader deposed the older one.
-- (ARGV[1] itself, not the Lua number: a number would be printed as a float.)
if fence > highest then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif verdict == 'first' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return verdict
"""

_DEFAULT_TTL_S = 7 * 86400


class RedisDeduper:
    """Admits ticks against Redis: one Lua script per message.

    Keys (under ``prefix``): ``{<job>}:fence`` holds the highest fence seen for
    the job, ``{<job>}:slot:<scheduled_at_ms>`` marks a seen slot. Both expire
    ``ttl_s`` after the job's last admitted tick, so deleted jobs leave nothing
    behind; a redelivery older than that is admitted again. The braces are a
    Redis Cluster hash tag: a job's keys live on one node, as a script needs.
    """

    def __init__(self, url_or_client: Any, *, prefix: str = "shardcron:dedupe:", ttl_s: float = _DEFAULT_TTL_S):
        if isinstance(url_or_client, str):
            redis = _require("redis", "redis", "RedisDeduper")
            url_or_client = redis.Redis.from_url(url_or_client, socket_timeout=5, socket_connect_timeout=5)
        self.client = url_or_client
        self.prefix = prefix
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._admit = self.client.register_script(_ADMIT_LUA)

    def admit(self, tick: TickInfo) -> Verdict:
        fence_key, slot_key = self._keys(tick)
        answer = self._admit(keys=[fence_key, slot_key], args=[tick.fence, self.ttl_ms])
        return Verdict(answer.decode() if isinstance(answer, bytes) else answer)

    def release(self, tick: TickInfo) -> None:
        """Forget an admitted slot (its run failed), so a retry or redelivery is FIRST again."""
        self.client.delete(self._keys(tick)[1])

    def _keys(self, tick: TickInfo) -> tuple[str, str]:
        tag = f"{self.prefix}{{{tick.key}}}"
        return f"{tag}:fence", f"{tag}:slot:{tick.scheduled_at_ms}"


# --- SQL ------------------------------------------------------------------


class SqlDeduper:
    """Admits ticks against a SQL database (PostgreSQL, MariaDB, SQLite).

    Two tables, created if missing: ``<table_prefix>_slots`` (one row per
    admitted slot) and ``<table_prefix>_fences`` (each job's highest fence).
    Each admission locks the job's fence row first, so two consumers of one job
    take turns and exactly one of them records a slot. Pass ``connection=`` (a
    Connection or Session in the consumer's own transaction) to commit the
    record with the consumer's writes; the lock is then held until that commit.
    """

    def __init__(self, engine_or_url: Engine | str, *, table_prefix: str = "shardcron_dedupe"):
        self.engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        md = MetaData()
        opts = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}
        self.slots = Table(
            f"{table_prefix}_slots", md,
            Column("job_id", exact_string(ID_LENGTH), primary_key=True),
            Column("scheduled_at_ms", BigInteger, primary_key=True, autoincrement=False),
            Column("fence", BigInteger, nullable=False),
            Column("seen_at_ms", BigInteger, nullable=False),
            **opts,
        )
        self.fences = Table(
            f"{table_prefix}_fences", md,
            Column("job_id", exact_string(ID_LENGTH), primary_key=True),
            Column("fence", BigInteger, nullable=False),
            **opts,
        )
        try:
            md.create_all(self.engine, checkfirst=True)
        except sa_exc.DBAPIError:
            # Another consumer created them between our check and our CREATE.
            md.create_all(self.engine, checkfirst=True)

    def admit(self, tick: TickInfo, *, connection: Connection | Session | None = None) -> Verdict:
        if connection is None:
            with writing(self.engine) as conn:
                return self._admit(conn, tick)
        if isinstance(connection, Session):
            connection = connection.connection()
        return self._admit(connection, tick)

    def release(self, tick: TickInfo, *, connection: Connection | Session | None = None) -> None:
        """Forget an admitted slot (its run failed), so a retry or redelivery is FIRST again."""
        stmt = self.slots.delete().where(
            self.slots.c.job_id == tick.key, self.slots.c.scheduled_at_ms == tick.scheduled_at_ms
        )
        if connection is None:
            with writing(self.engine) as conn:
                conn.execute(stmt)
            return
        if isinstance(connection, Session):
            connection = connection.connection()
        connection.execute(stmt)

    def _admit(self, conn: Connection, tick: TickInfo) -> Verdict:
        f = self.fences.c
        # 1. The job's fence row exists (a no-op if it does) and is locked: every
        #    admission of the job waits here for the one before it to commit.
        #    On SQLite this write takes the database's write lock instead.
        insert_ignoring_duplicates(conn, self.fences, [{"job_id": tick.key, "fence": tick.fence}])
        highest = conn.execute(select(f.fence).where(f.job_id == tick.key).with_for_update()).scalar_one()
        if tick.fence < highest:
            return Verdict.STALE_FENCE
        # 2. Record the slot. The unique violation, not a prior SELECT, decides:
        #    under REPEATABLE READ a SELECT could read an old snapshot. The
        #    savepoint keeps the caller's transaction usable after it.
        verdict = Verdict.FIRST
        try:
            with conn.begin_nested():
                conn.execute(self.slots.insert().values(
                    job_id=tick.key, scheduled_at_ms=tick.scheduled_at_ms,
                    fence=tick.fence, seen_at_ms=clock.wall_ms(),
                ))
        except sa_exc.IntegrityError:
            verdict = Verdict.DUPLICATE
        # 3. A higher fence is news even on a duplicate: its leader deposed the older one.
        if tick.fence > highest:
            conn.execute(update(self.fences).where(f.job_id == tick.key).values(fence=tick.fence))
        return verdict


# --- the decorator ----------------------------------------------------------


def dedupe(deduper: Deduper, *, tick_kwarg: str = "tick", missing: Literal["raise", "run"] = "raise"):
    """Run a task function only for a slot's first admitted delivery.

    Where the tick is found, in order:

    * the keyword argument ``tick_kwarg`` (arq: ``enqueue_job(..., tick=tick_fields)``;
      any direct caller). The wrapper pops it: the function does not receive it.
    * Celery: the current task's request, where ``send_task(headers=tick_fields)``
      puts them (as attributes of ``task.request`` and in ``task.request.headers``).
    * RQ: ``rq.get_current_job().meta["shardcron"]``.

    Put it under the framework's own decorator, on the plain function::

        @app.task
        @dedupe(deduper)
        def send_report(customer_id): ...

    A refused delivery (duplicate or stale fence) does not call the function:
    it logs one INFO line and returns None. If the function raises, the slot is
    released, so the framework's retry or redelivery runs it again. A worker
    that dies mid-run leaves the slot admitted: its redelivery is refused.
    (For effects that must not be lost that way, use ``SqlDeduper.admit`` with
    ``connection=`` inside the function's own transaction instead.)

    A call without a tick (not sent by shardcron) raises ``NotATick``, unless
    ``missing="run"``, which runs it unguarded. A malformed tick always raises.
    """
    if missing not in ("raise", "run"):
        raise ValueError(f"missing must be 'raise' or 'run', not {missing!r}")

    def decorate(fn: Callable) -> Callable:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                tick = _find_tick(kwargs, tick_kwarg, fn, missing)
                if tick is None:
                    return await fn(*args, **kwargs)
                # The deduper's client is blocking: keep the event loop free meanwhile.
                if not _admitted(await asyncio.to_thread(deduper.admit, tick), tick, fn):
                    return None
                try:
                    return await fn(*args, **kwargs)
                except BaseException:
                    await asyncio.to_thread(_release, deduper, tick)
                    raise
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            tick = _find_tick(kwargs, tick_kwarg, fn, missing)
            if tick is None:
                return fn(*args, **kwargs)
            if not _admitted(deduper.admit(tick), tick, fn):
                return None
            try:
                return fn(*args, **kwargs)
            except BaseException:
                _release(deduper, tick)
                raise
        return wrapper

    return decorate


def _find_tick(kwargs: dict, tick_kwarg: str, fn: Callable, missing: str) -> TickInfo | None:
    if tick_kwarg in kwargs:
        return TickInfo.from_mapping(kwargs.pop(tick_kwarg))
    for source in (_celery_request, _rq_meta):
        m = source()
        if m is not None and _mentions_tick(m):
            return TickInfo.from_mapping(m)
    if missing == "run":
        return None
    raise NotATick(None, f"{fn.__qualname__} was called without one (no {tick_kwarg!r} keyword argument, "
                         "no Celery task headers, no RQ meta); pass missing='run' to run such calls unguarded")


def _celery_request() -> dict | None:
    # Only a process that runs Celery tasks has imported celery; others never pay for it.
    celery = sys.modules.get("celery")
    task = getattr(celery, "current_task", None) if celery else None
    request = getattr(task, "request", None) if task else None
    if request is None or getattr(request, "id", None) is None:
        return None
    # A worker (Celery 5.4) sets send_task(headers=...) both as attributes and in
    # request.headers; eager apply(headers=...) and the old nested workaround,
    # send_task(headers={"headers": {...}}), only in request.headers.
    found = dict(vars(request))
    headers = getattr(request, "headers", None)
    if isinstance(headers, Mapping):
        found.update(headers)
    return found


def _rq_meta() -> Mapping | None:
    if "rq" not in sys.modules:
        return None
    from rq import get_current_job
    job = get_current_job()
    return job.meta if job is not None else None


def _mentions_tick(m: Mapping) -> bool:
    keys = _lowered(m)
    return "shardcron" in keys or any(n in keys for n in _NAMES["job_id"][:2])


def _admitted(verdict: Verdict, tick: TickInfo, fn: Callable) -> bool:
    if verdict is Verdict.FIRST:
        return True
    log.info("%s not run: job %s slot %d fence %d attempt %d: %s", fn.__qualname__, tick.job_id,
             tick.scheduled_at_ms, tick.fence, tick.attempt, verdict.value,
             extra={"job": tick.job_id, "tick": tick.scheduled_at_ms, "fence": tick.fence})
    return False


def _release(deduper: Deduper, tick: TickInfo) -> None:
    # The function's own error is the one to report; a failed release only costs a retry.
    try:
        deduper.release(tick)
    except Exception:  # noqa: BLE001
        log.warning("could not release job %s slot %d after its run failed; a retry will be refused as a duplicate",
                    tick.job_id, tick.scheduled_at_ms, exc_info=True,
                    extra={"job": tick.job_id, "tick": tick.scheduled_at_ms, "fence": tick.fence})


def _require(module: str, extra: str, who: str):
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"{who} needs the {extra!r} extra: pip install 'shardcron[{extra}]'") from None


__all__ = ["NotATick", "RedisDeduper", "SqlDeduper", "TickInfo", "Verdict", "dedupe"]
