"""The consumer's guard: the verdicts, the ``Deduper`` interface its stores implement, and the ``dedupe`` decorator.

It runs each slot's effect once, and refuses a deposed leader's messages.

shardcron sends every tick with its identity (``shardcron.executors.identity``):
the slot ``(job_id, scheduled_at_ms)``, the attempt, and the fence its leader
held. Brokers that deduplicate by message id (JetStream, RQ, arq) drop a
retried slot's second copy themselves; Celery and AMQP do not, and any broker
redelivers a message whose consumer died before acknowledging it. A consumer
admits each message here before acting on it::

    from shardcron.consumer import RedisDeduper, TickInfo, Verdict

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
together. ``SqlDeduper`` (``consumer/sql.py``) does that when given the consumer's own connection::

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
import sys
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Literal, Protocol

from shardcron.consumer.tick import NotATick, TickInfo, mentions_tick
from shardcron.tracing.verdicts import record_verdict

log = logging.getLogger("shardcron.consumer.guard")


class Verdict(StrEnum):
    FIRST = "first"
    DUPLICATE = "duplicate"
    STALE_FENCE = "stale-fence"

    @property
    def event(self) -> str:
        """Its span event's name, on a traced consumer: first, duplicate, stale fence."""
        return self.value.replace("-", " ")


class Deduper(Protocol):
    """What ``dedupe`` needs: ``RedisDeduper``, ``SqlDeduper``, or your own."""

    def admit(self, tick: TickInfo) -> Verdict: ...

    def release(self, tick: TickInfo) -> None: ...


def dedupe(
    deduper: Deduper, *, tick_kwarg: str = "tick", missing: Literal["raise", "run"] = "raise"
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
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

    In a process that traces with OpenTelemetry, each verdict is also a span event (``first``,
    ``duplicate``, ``stale fence``) on the tick's trace (``tracing/verdicts.py``).
    """
    if missing not in ("raise", "run"):
        raise ValueError(f"missing must be 'raise' or 'run', not {missing!r}")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
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
        def wrapper(*args: Any, **kwargs: Any) -> Any:
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


def _find_tick(kwargs: dict[str, Any], tick_kwarg: str, fn: Callable[..., Any], missing: str) -> TickInfo | None:
    if tick_kwarg in kwargs:
        return TickInfo.from_mapping(kwargs.pop(tick_kwarg))
    for source in (_celery_request, _rq_meta):
        m = source()
        if m is not None and mentions_tick(m):
            return TickInfo.from_mapping(m)
    if missing == "run":
        return None
    raise NotATick(
        None,
        f"{fn.__qualname__} was called without one (no {tick_kwarg!r} keyword argument, "
        "no Celery task headers, no RQ meta); pass missing='run' to run such calls unguarded",
    )


def _celery_request() -> dict[str, Any] | None:
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


def _rq_meta() -> Mapping[str, Any] | None:
    if "rq" not in sys.modules:
        return None
    from rq import get_current_job  # an optional extra, already imported by the RQ worker running this task

    job = get_current_job()
    return job.meta if job is not None else None


def _admitted(verdict: Verdict, tick: TickInfo, fn: Callable[..., Any]) -> bool:
    record_verdict(
        verdict.event,
        tick.trace,
        {
            "shardcron.verdict": verdict.value,
            "shardcron.job": tick.job_id,
            "shardcron.slot.scheduled_at_ms": tick.scheduled_at_ms,
            "shardcron.attempt": tick.attempt,
            "shardcron.fence": tick.fence,
        },
    )
    if verdict is Verdict.FIRST:
        return True
    log.info(
        "%s not run: job %s slot %d fence %d attempt %d: %s",
        fn.__qualname__,
        tick.job_id,
        tick.scheduled_at_ms,
        tick.fence,
        tick.attempt,
        verdict.value,
        extra={"job": tick.job_id, "tick": tick.scheduled_at_ms, "fence": tick.fence},
    )
    return False


def _release(deduper: Deduper, tick: TickInfo) -> None:
    # The function's own error is the one to report; a failed release only costs a retry.
    try:
        deduper.release(tick)
    except Exception:  # noqa: BLE001
        log.warning(
            "could not release job %s slot %d after its run failed; a retry will be refused as a duplicate",
            tick.job_id,
            tick.scheduled_at_ms,
            exc_info=True,
            extra={"job": tick.job_id, "tick": tick.scheduled_at_ms, "fence": tick.fence},
        )


__all__ = ["Deduper", "Verdict", "dedupe"]
