"""A tick as a consumer reads it: ``TickInfo`` parsed from whatever carries it, or ``NotATick``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shardcron.consumer.tick_names import TICK_NAMES, TRACE_CONTEXT_NAMES
from shardcron.errors import ShardcronError
from shardcron.jobkey import DEFAULT_NAMESPACE, join_key, slot_idempotency_key


class NotATick(ShardcronError):
    """A message or task call carries no shardcron tick, or a malformed one. ``field`` names the culprit."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(f"not a shardcron tick: {field}: {reason}" if field else f"not a shardcron tick: {reason}")
        self.field = field
        self.reason = reason


# TickInfo field -> the plain name of the identity value it holds (``tick_names.TICK_NAMES``).
_PLAIN = {
    "job_id": "job_id",
    "scheduled_at_ms": "scheduled_at_ms",
    "attempt": "attempt",
    "fence": "fence",
    "shard": "shard",
    "node_id": "node",
    "namespace": "namespace",
}  # namespace absent: default


def _spellings(field: str, plain: str) -> tuple[str, ...]:
    # The field name, the header name (matched lowercased: header names are case-insensitive), and the bare
    # names, which a nested {"shardcron": {...}} mapping may use.
    name = TICK_NAMES[plain]
    bare = (field,) if field == plain else (field, plain)
    return (name.field, name.header.lower(), *bare)


# TickInfo field -> the names it travels under, in order of preference.
_NAMES: dict[str, tuple[str, ...]] = {field: _spellings(field, plain) for field, plain in _PLAIN.items()}
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
    trace: tuple[tuple[str, str], ...] = ()  # the leader's W3C trace context (traceparent, tracestate), if sent

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
        return cls(**values, trace=_trace_context(flat))


def _lowered(m: Mapping[Any, Any]) -> dict[str, Any]:
    out = {}
    for k, v in m.items():
        if isinstance(k, bytes):
            k = k.decode("utf-8", "replace")
        if isinstance(k, str):
            out[k.lower()] = v
    return out


def _trace_context(flat: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    # Not checked here: a malformed traceparent is the propagator's to ignore, never a reason to refuse a tick.
    found = ((name, flat.get(name)) for name in TRACE_CONTEXT_NAMES)
    return tuple(
        (name, value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
        for name, value in found
        if isinstance(value, str | bytes) and value
    )


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


def mentions_tick(m: Mapping[Any, Any]) -> bool:
    """Whether ``m`` carries a tick at all (its job id, or a nested ``shardcron`` mapping): then it must parse."""
    keys = _lowered(m)
    return "shardcron" in keys or any(n in keys for n in _NAMES["job_id"][:2])


__all__ = ["NotATick", "TickInfo", "mentions_tick"]
