"""What the API layer needs from a running node. ``node.py`` implements it.

The servicer speaks only to this protocol, so the API can be tested against a
real node and reasoned about without the coordination internals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.engine import Engine

from shardcron.model import Job, SlotRef, TickStatus


@dataclass(frozen=True)
class TickEvent:
    """A tick's result as it is written: what WatchTicks streams."""

    job_id: str
    scheduled_at_ms: int
    shard: int
    fence: int
    node_id: str
    status: TickStatus
    attempt: int
    started_at_ms: int | None
    finished_at_ms: int | None
    error: str | None = None


class Backend(Protocol):
    node_id: str
    shard_count: int
    allow_shell: bool
    shell_allow: object  # re.Pattern a shell command must fully match, or None
    engine: Engine
    joined: threading.Event  # set while the node is a live member of the cluster (health: SERVING)

    def fence_if_leader(self, shard: int) -> int | None:
        """This node's fence for ``shard`` if it leads it right now, else None."""

    def leader_address(self, shard: int) -> str | None:
        """The advertised gRPC address of the shard's current leader (from the election key), if any."""

    def job_written(self, shard: int, job: Job) -> None:
        """Tell the scheduler a job of a led shard was created, replaced, paused or resumed."""

    def job_deleted(self, shard: int, job_id: str) -> None: ...

    def trigger_now(self, shard: int, job_id: str) -> SlotRef:
        """Claim and start an extra, manual tick now (on the shard's leader). KeyError if the job is unknown."""

    def shard_map(self) -> dict:
        """The same map ``shardcron shards --json`` prints (shards, nodes, shard_count)."""

    def subscribe_ticks(self, callback: Callable[[TickEvent], None]) -> Callable[[], None]:
        """Call ``callback`` for every tick result this node writes; returns an unsubscribe function."""
