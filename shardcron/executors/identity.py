"""A tick's identity as every executor hands it downstream: one way to build it, for every kind.

The identity of a slot is ``(job_id, scheduled_at_ms)``, the job's key holding its
namespace; its idempotency key is ``"<job_id>:<scheduled_at_ms>"`` in ``default``
and ``"<namespace>/<uuid>"`` elsewhere (``jobkey.slot_idempotency_key``) and its
message or task id a UUID derived from that key (``slot_uuid``). Both are the
same on every leader and every attempt, so a successor that retries a slot
re-sends the same id, and a broker or queue that deduplicates by id (JetStream's
``Nats-Msg-Id``, arq's ``_job_id``, RQ's job id, a Celery task id, an AMQP
``message_id``) drops the second copy.

The attempt and the fence travel beside it, so a consumer can refuse work
from a deposed leader (``shardcron.consumer``). The names each value travels
under are ``shardcron.consumer.tick_names.TICK_NAMES``, which the guard reads too.

With tracing on, the attempt's W3C trace context (``TickContext.trace``: ``traceparent``, and
``tracestate`` when the trace has one) travels beside it under its standard names in every carrier
(headers, Celery headers, fields, RQ meta, arq's tick argument) and as ``TRACEPARENT``/``TRACESTATE`` in a
shell command's environment, so an OpenTelemetry-instrumented receiver continues the tick's trace.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from shardcron.clock import rfc3339_ms
from shardcron.consumer.tick_names import FIELD_PREFIX, HEADER_PREFIX, IDEMPOTENCY_KEY_HEADER, TICK_NAMES
from shardcron.jobkey import DEFAULT_NAMESPACE, SLOT_NAMESPACE, split_key
from shardcron.model import TickContext

RESERVED_PREFIX = HEADER_PREFIX.lower()


def slot_uuid(ctx: TickContext) -> str:
    """The slot's UUID: the same for every leader and attempt of one ``(job_id, scheduled_at_ms)``."""
    return str(uuid.uuid5(SLOT_NAMESPACE, ctx.idempotency_key))


def tick_values(ctx: TickContext) -> dict[str, str]:
    """The tick's identity, as strings, under plain names: every spelling below is made from it.

    ``job_id`` is the id within its namespace; ``namespace`` is sent only for a job outside
    ``default``, so the keyword arguments an existing task function receives do not change."""
    key = split_key(ctx.job_id)
    notification: str | None = getattr(ctx, "notification", None)
    return {
        "job_id": key.id,
        **({"namespace": key.namespace} if key.namespace != DEFAULT_NAMESPACE else {}),
        "scheduled_at": rfc3339_ms(ctx.scheduled_at_ms),
        "scheduled_at_ms": str(ctx.scheduled_at_ms),
        "attempt": str(ctx.attempt),
        "fence": str(ctx.fence),
        "shard": str(ctx.shard),
        "node": ctx.node_id,
        "idempotency_key": ctx.idempotency_key,
        # A notification about the slot (leader/notification_context.py), not the slot's own run.
        **({"notification": notification} if notification else {}),
    }


def tick_headers(ctx: TickContext) -> dict[str, str]:
    """Header-style names, for transports with headers (HTTP, NATS, AMQP)."""
    headers = {TICK_NAMES[name].header: value for name, value in tick_values(ctx).items()}
    if ctx.trace:
        headers.update(ctx.trace)
    return headers


def tick_fields(ctx: TickContext) -> dict[str, str]:
    """Identifier-style names, for Celery headers, Redis stream fields, RQ meta and arq keyword arguments.

    Values are strings, so they survive any serialiser; ``shardcron.consumer.TickInfo`` reads them back.
    """
    fields = {TICK_NAMES[name].field: value for name, value in tick_values(ctx).items()}
    if ctx.trace:  # under the W3C names: where Celery's OpenTelemetry instrumentation looks for them
        fields.update(ctx.trace)
    return fields


def tick_environment(ctx: TickContext) -> dict[str, str]:
    """Environment variables, for a shell command: which tick, attempt and fence it serves."""
    env = {TICK_NAMES[name].env: value for name, value in tick_values(ctx).items()}
    if ctx.trace:  # OpenTelemetry's environment carrier: the names upper-cased
        env.update((name.upper(), value) for name, value in ctx.trace)
    return env


def with_tick_fields(user_fields: Iterable[tuple[str, str]], ctx: TickContext) -> dict[str, str]:
    """A job's own fields, minus any named ``shardcron_*``, plus the tick's (``tick_fields``): so a job cannot
    forge the tick it carries."""
    fields = {name: value for name, value in user_fields if not name.startswith(FIELD_PREFIX)}
    fields.update(tick_fields(ctx))
    return fields


def with_tick_headers(
    user_headers: Iterable[tuple[str, str]], ctx: TickContext, *, also_reserved: frozenset[str] = frozenset()
) -> dict[str, str]:
    """A job's own headers, minus any that would shadow shardcron's, plus shardcron's: so a job cannot
    forge the tick it carries. ``also_reserved``: lower-case names a transport keeps for itself (NATS's
    ``Nats-Msg-Id``)."""
    reserved = {IDEMPOTENCY_KEY_HEADER.lower(), *also_reserved}
    headers = {
        name: value
        for name, value in user_headers
        if not name.lower().startswith(RESERVED_PREFIX) and name.lower() not in reserved
    }
    headers.update(tick_headers(ctx))
    return headers
