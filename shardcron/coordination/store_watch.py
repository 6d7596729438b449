"""Keeping a node's copy of cluster-wide settings current: an etcd key each write bumps, and a slow reload as backstop.

The settings live in the store (calendars, namespaces); etcd only says "they
changed". A node that writes them bumps ``key`` after its commit; every node
watches that key and calls ``reload(cause)``, which reads the store and applies
what changed.

A lost watch is re-established on the next periodic pass, and that pass (every
``reload_s``) reloads anyway: a bump missed while etcd or the store was away costs
at most that long. Reloads run on the watcher's own thread, never on etcd's
callback thread. A reload that fails with a ``ShardcronError`` (the store is away)
is logged and the copy loaded before is kept.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from shardcron.coordination.etcd import Etcd, WatchEvent
from shardcron.errors import ShardcronError
from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

log = logging.getLogger(__name__)

RELOAD_S = 30.0


class StoreWatch:
    """``what`` names the settings in log lines and the thread. A subclass reads and applies them in
    ``reload(cause)``; cause is ``start``, ``watch`` (a bump, or a broken watch) or ``periodic``."""

    def __init__(self, etcd: Etcd, key: str, what: str, reload_s: float = RELOAD_S, lifeline: Lifeline = UNWATCHED):
        self._etcd = etcd
        self._key = key
        self._what = what
        self._reload_s = reload_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cause = "start"
        self._cancel: Callable[[], None] | None = None
        self._thread = lifeline.thread(self._run, what)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if self._cancel:
            self._cancel()

    def bump(self, name: str, now_ms: int) -> None:
        """After this node wrote ``name``: every node (this one included, through the watch) reloads."""
        self._etcd.put(self._key, json.dumps({"name": name, "at_ms": now_ms}).encode())

    def reload(self, cause: str) -> None:
        """Read the settings from the store and apply what changed (raises a ``ShardcronError`` when the store
        is away: the copy loaded before is kept)."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            crashpoints.fail_worker()
            if self._cancel is None:
                self._watch()
            self._reload()
            self._wake.wait(self._reload_s)
            if not self._wake.is_set():
                self._cause = "periodic"
            self._wake.clear()

    def _watch(self) -> None:
        try:
            # From the revision read now: the reload that follows covers every change before it.
            revision = self._etcd.get_prefix(self._key)[0]
            self._cancel = self._etcd.watch_prefix(self._key, revision + 1, self._on_events, self._on_error)
        except ShardcronError as e:
            log.warning(
                "%s: cannot watch %s (%s); reloading every %.0f s until it can",
                self._what,
                self._key,
                e,
                self._reload_s,
            )

    def _on_events(self, _revision: int, events: list[WatchEvent]) -> None:
        if any(ev.kv.key == self._key for ev in events):
            self._cause = "watch"
            self._wake.set()

    def _on_error(self, why: str) -> None:
        log.warning("%s: watch on %s broke (%s); re-watching", self._what, self._key, why)
        self._cancel = None
        self._cause = "watch"
        self._wake.set()

    def _reload(self) -> None:
        try:
            self.reload(self._cause)
        except ShardcronError as e:
            log.warning("%s: reload failed (%s); keeping the ones loaded before", self._what, e)


__all__ = ["RELOAD_S", "StoreWatch"]
