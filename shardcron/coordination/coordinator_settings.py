"""The coordinator's settings for this node: who it is, where it listens, and its timings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CoordinatorSettings:
    node_id: str
    address: str
    shard_count: int
    ttl_s: int = 10
    settle_s: float = 1.0  # membership changes inside this window are handled as one
    resign_grace_s: float = 5.0  # how long a resigning leader waits for running ticks
    started_at_ms: int = 0
    fence_offset: int = 0  # added to election revisions (see store/epoch.py)
