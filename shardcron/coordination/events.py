"""What the coordinator's loop reacts to: one small frozen dataclass per kind of event.

They arrive on one queue from several threads (the watch thread, the session's
keepalive thread, release threads, the scheduler's writers, signal handlers)
and are handled one at a time by the control thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcron.coordination.etcd import WatchEvent


@dataclass(frozen=True)
class Stop:
    """The node is stopping: hand every shard over, then leave. ``grace_s``: how long a resigning shard
    waits for its running ticks (None: the configured grace; 0 when a worker died and nothing may wait)."""

    grace_s: float | None = None


@dataclass(frozen=True)
class Wake:
    """Nothing arrived before the loop's deadline (settle windows, periodic proclaims)."""


@dataclass(frozen=True)
class SessionLostEvent:
    reason: str


@dataclass(frozen=True)
class WatchChanges:
    revision: int
    events: list[WatchEvent]


@dataclass(frozen=True)
class WatchBroken:
    reason: str


@dataclass(frozen=True)
class Drained:
    """A resigning shard's running ticks are done (or its grace ran out)."""

    shard: int


@dataclass(frozen=True)
class Fenced:
    """A write under ``fence`` on ``shard`` was rejected: a newer leader exists."""

    shard: int
    fence: int


Event = Stop | Wake | SessionLostEvent | WatchChanges | WatchBroken | Drained | Fenced
