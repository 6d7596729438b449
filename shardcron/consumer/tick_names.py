"""The one table of the names a tick's identity travels under: written by the executors, read by the guard.

Each value of the identity has a plain name (``executors.identity.tick_values``
and a nested ``{"shardcron": {...}}`` mapping use it), a header name for
transports with headers (HTTP, NATS, AMQP), a field name for identifier-style
carriers (Celery headers, Redis stream fields, RQ meta, arq keyword arguments)
and an environment variable for a shell command. The table lives here, below
the executors, because the consumer must read back exactly what they write and
may not import them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
# The W3C trace context of the leader's span for the attempt (with tracing on): under these names in every
# carrier, headers and fields alike, as OpenTelemetry's propagators and instrumentations expect them.
TRACE_CONTEXT_NAMES = ("traceparent", "tracestate")
HEADER_PREFIX = "X-Shardcron-"  # every header of the identity but the idempotency key: reserved to shardcron
FIELD_PREFIX = "shardcron_"  # every field of the identity: reserved to shardcron


@dataclass(frozen=True)
class TickName:
    """The spellings of one value of a tick's identity."""

    plain: str
    header: str
    env: str

    @property
    def field(self) -> str:
        """The identifier-style name: ``shardcron_<plain>``."""
        return FIELD_PREFIX + self.plain


# plain name -> its spellings, in the order tick_values writes them.
TICK_NAMES: Mapping[str, TickName] = {
    n.plain: n
    for n in (
        TickName("job_id", "X-Shardcron-Job-Id", "SHARDCRON_JOB_ID"),
        TickName("namespace", "X-Shardcron-Namespace", "SHARDCRON_NAMESPACE"),  # only outside the default namespace
        TickName("scheduled_at", "X-Shardcron-Scheduled-At", "SHARDCRON_SCHEDULED_AT"),
        TickName("scheduled_at_ms", "X-Shardcron-Scheduled-At-Ms", "SHARDCRON_SCHEDULED_AT_MS"),
        TickName("attempt", "X-Shardcron-Attempt", "SHARDCRON_ATTEMPT"),
        TickName("fence", "X-Shardcron-Fence", "SHARDCRON_FENCE"),
        TickName("shard", "X-Shardcron-Shard", "SHARDCRON_SHARD"),
        TickName("node", "X-Shardcron-Node", "SHARDCRON_NODE_ID"),
        TickName("idempotency_key", IDEMPOTENCY_KEY_HEADER, "SHARDCRON_IDEMPOTENCY_KEY"),
        TickName("notification", "X-Shardcron-Notification", "SHARDCRON_NOTIFICATION"),  # only for a notification
    )
}

__all__ = ["FIELD_PREFIX", "HEADER_PREFIX", "IDEMPOTENCY_KEY_HEADER", "TICK_NAMES", "TRACE_CONTEXT_NAMES", "TickName"]
