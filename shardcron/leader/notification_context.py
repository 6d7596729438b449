"""A notification's identity and what it says, as the executors hand it downstream.

A notification is sent through the same executors as a tick, with the failed (or recovered) slot's
identity (job, scheduled time, fence, shard, node: ``executors/identity.py``) plus its kind
(``X-Shardcron-Notification: on_failure``, ``shardcron_notification``), and an idempotency key of
its own, the slot's key (``tenancy.keys.slot_idempotency_key``) and ``:<kind>``: the same from every
leader and every send, and never
the slot's own key, so a receiver that drops repeated keys drops a resent notification and never
mistakes it for the slot's run.

A webhook, NATS or AMQP notification without a body of its own gets the event as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from shardcron.clock import rfc3339_ms
from shardcron.jobkey import DEFAULT_NAMESPACE, slot_idempotency_key, split_key
from shardcron.model import ExecutorKind, ExecutorSpec, Tick, TickContext

ERROR_EXCERPT_CHARS = 2000  # of the tick's error, in the event: enough to tell why, small enough for any chat hook


@dataclass(frozen=True)
class NotificationContext(TickContext):
    notification: str = ""  # on_failure | on_recovery

    @property
    def idempotency_key(self) -> str:
        return f"{slot_idempotency_key(self.job_id, self.scheduled_at_ms)}:{self.notification}"


def event(kind: str, job_id: str, scheduled_at_ms: int, tick: Tick | None) -> dict:
    """What the notification says about the slot (``tick``: its row, None if it is gone)."""
    key = split_key(job_id)
    out = {
        "notification": kind,
        "job_id": key.id,
        "scheduled_at": rfc3339_ms(scheduled_at_ms),
        "scheduled_at_ms": scheduled_at_ms,
    }
    if key.namespace != DEFAULT_NAMESPACE:  # a default job's event is what it was before namespaces
        out["namespace"] = key.namespace
    if tick is not None:
        out.update(
            status=tick.status.value,
            attempts=tick.attempt,
            exit_code=tick.exit_code,
            http_status=tick.http_status,
            error=(tick.error or "")[:ERROR_EXCERPT_CHARS] or None,
        )
    return out


def with_event_body(spec: ExecutorSpec, body: dict) -> ExecutorSpec:
    """``spec`` with the event as its JSON body, when it is a kind with a body and has none of its own."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    http, nats, amqp = spec.http, spec.nats, spec.amqp  # the one its kind names is set
    if spec.kind is ExecutorKind.HTTP and http is not None and not http.body:
        headers = http.headers
        if not any(name.lower() == "content-type" for name, _ in headers):
            headers = (*headers, ("Content-Type", "application/json"))
        return replace(spec, http=replace(http, body=text, headers=headers))
    if spec.kind is ExecutorKind.NATS and nats is not None and not nats.body:
        return replace(spec, nats=replace(nats, body=text))
    if spec.kind is ExecutorKind.AMQP and amqp is not None and not amqp.body:
        return replace(spec, amqp=replace(amqp, body=text))
    return spec
