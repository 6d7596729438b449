"""Keeping a node's copy of the namespaces' weights and quotas current (a ``StoreWatch`` on ``<prefix>/namespaces``).

The namespaces live in the store (``store/namespaces.py``); the node's scheduler
runs ticks with their weights (fair queuing) and ``max_running`` quotas, handed to
it whole with ``apply`` (``Scheduler.set_namespace_settings``) whenever a reload
finds them changed. A namespace without a row runs with ``tenancy.settings.DEFAULT_SETTINGS``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import Engine

from shardcron import metrics
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.store_watch import RELOAD_S, StoreWatch
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.store.namespaces import namespace_settings

log = logging.getLogger(__name__)

Settings = dict[str, NamespaceSettings]


class NamespaceWatch(StoreWatch):
    def __init__(
        self,
        etcd: Etcd,
        layout: KeyLayout,
        engine: Engine,
        apply: Callable[[Settings], None],
        reload_s: float = RELOAD_S,
        lifeline: Lifeline = UNWATCHED,
    ):
        super().__init__(etcd, layout.namespaces, "namespaces", reload_s=reload_s, lifeline=lifeline)
        self._engine = engine
        self._apply = apply
        self._current: Settings | None = None
        self.reloads = 0  # reads of the store so far (whether or not they found a change)

    @property
    def current(self) -> Settings:
        """The settings as last applied (empty before the first load)."""
        return dict(self._current or {})

    def load_now(self) -> None:
        """The first load, before the scheduler takes any shard (raises when the store is down)."""
        self.reload("start")

    def reload(self, cause: str) -> None:
        settings = namespace_settings(self._engine)
        self.reloads += 1
        metrics.namespace_reloads.labels(cause).inc()
        if settings == self._current:
            return
        changed = changed_namespaces(self._current or {}, settings)
        self._current = settings
        if changed:
            log.info("namespaces changed: %s", ", ".join(changed))
        self._apply(dict(settings))


def changed_namespaces(before: Settings, after: Settings) -> list[str]:
    """The names whose settings differ (added, removed or changed), in order."""
    return sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))


__all__ = ["NamespaceWatch", "changed_namespaces"]
