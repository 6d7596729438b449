"""What a node needs to know of each namespace while it runs ticks: its weight and its quota.

The store's ``namespaces`` rows are the source; each node keeps a copy (refreshed when
a namespace changes) and hands it to its scheduler with
``Scheduler.set_namespace_settings``. A namespace without a row of its own (none
yet, or just deleted) runs with ``DEFAULT_SETTINGS``: weight 1, no limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardcron.rules.fair_queue import DEFAULT_WEIGHT
from shardcron.rules.quotas import Quota


@dataclass(frozen=True)
class NamespaceSettings:
    weight: float = DEFAULT_WEIGHT
    quota: Quota = field(default_factory=Quota)


DEFAULT_SETTINGS = NamespaceSettings()

__all__ = ["DEFAULT_SETTINGS", "NamespaceSettings"]
