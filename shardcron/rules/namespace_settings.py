"""What a node needs to know of each namespace while it runs ticks: its weight and its quota.

The store's ``namespaces`` rows are the source; each node keeps a copy (refreshed when
a namespace changes) and hands it to its scheduler with
``Scheduler.set_namespace_settings``. A namespace without a row of its own (none
yet, or just deleted) runs with ``DEFAULT_SETTINGS``: weight 1, no limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shardcron.errors import InvalidJob
from shardcron.rules.fair_queue import DEFAULT_WEIGHT
from shardcron.rules.quotas import Quota, Usage

MAX_WEIGHT = 1_000_000.0  # a share a million times another's is already "all of it"


@dataclass(frozen=True)
class NamespaceSettings:
    weight: float = DEFAULT_WEIGHT
    quota: Quota = field(default_factory=Quota)


DEFAULT_SETTINGS = NamespaceSettings()


@dataclass(frozen=True)
class StoredNamespace:
    """A namespace as the store holds it and the API answers it: its settings and its usage."""

    name: str
    settings: NamespaceSettings
    usage: Usage  # jobs and slots_per_second; running is a node's, not the store's
    created_at_ms: int
    updated_at_ms: int


def check_weight(weight: float, field_name: str = "weight") -> float:
    """A namespace's weight: a finite number above 0 (its share of a saturated node's executors)."""
    if (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not math.isfinite(weight)
        or not 0 < weight <= MAX_WEIGHT
    ):
        raise InvalidJob(field_name, f"must be a number above 0 and at most {MAX_WEIGHT:g}, got {weight!r}")
    return float(weight)


__all__ = ["DEFAULT_SETTINGS", "MAX_WEIGHT", "NamespaceSettings", "StoredNamespace", "check_weight"]
