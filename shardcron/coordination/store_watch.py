"""Keeping a node's copy of cluster-wide settings current: an etcd key each write bumps, and a slow reload as backstop.

The settings live in the store (calendars, namespaces, tokens); etcd only says
"they changed". A node that writes them bumps ``key`` after its commit; every
node watches that key and calls ``reload(cause)``, which reads the store and
applies what changed.

A lost watch is re-established on the next pass, and a pass every ``reload_s``
reloads anyway: a bump missed while etcd or the store was away costs at most
that long. Reloads run on a ``WatchThread``, never on etcd's callback thread;
one ``WatchThread`` serves every kind of settings of a node (each waits on the
store for a moment a few times a minute: a thread each would only idle). A
reload that fails with a ``ShardcronError`` (the store is away) is logged and
the copy loaded before is kept.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from shardcron.coordination.etcd import Etcd, WatchEvent
from shardcron.errors import ShardcronError
from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

log = logging.getLogger(__name__)

RELOAD_S = 30.0


class StoreWatch:
    """``what`` names the settings in log lines (and the thread, when it runs on one of its own). A subclass
    reads and applies them in ``reload(cause)``; cause is ``start``, ``watch`` (a bump, or a broken watch) or
    ``periodic``."""

    def __init__(self, etcd: Etcd, key: str, what: str, reload_s: float = RELOAD_S, lifeline: Lifeline = UNWATCHED):
        self._etcd = etcd
        self._key = key
        self._what = what
        self._reload_s = reload_s
        self._lifeline = lifeline
        self._lock = threading.Lock()  # _cause: set by etcd's callback thread, taken by the watch thread
        self._cause: str | None = "start"  # why the next pass reloads; None: only when the periodic one is due
        self._next_periodic = 0.0  # monotonic
        self._cancel: Callable[[], None] | None = None
        self._runner: WatchThread | None = None
        self._runs_own_thread = False

    def start(self, runner: WatchThread | None = None) -> None:
        """Watch and reload on ``runner``'s thread, shared with the node's other settings, or on one of its own."""
        if runner is None:
            runner, self._runs_own_thread = WatchThread(self._what, self._lifeline), True
        self._runner = runner
        runner.add(self)
        if self._runs_own_thread:
            runner.start()

    def stop(self) -> None:
        runner = self._runner
        if runner is not None:
            runner.remove(self)
            if self._runs_own_thread:
                runner.stop()
        if self._cancel:
            self._cancel()

    def bump(self, name: str, now_ms: int) -> None:
        """After this node wrote ``name``: every node (this one included, through the watch) reloads."""
        self._etcd.put(self._key, json.dumps({"name": name, "at_ms": now_ms}).encode())

    def reload(self, cause: str) -> None:
        """Read the settings from the store and apply what changed (raises a ``ShardcronError`` when the store
        is away: the copy loaded before is kept)."""
        raise NotImplementedError

    def pass_once(self, now: float) -> float:
        """On its ``WatchThread``: watch if not watching, reload if owed; returns when the next periodic reload is due."""
        if self._cancel is None:
            self._watch()
        with self._lock:
            cause, self._cause = self._cause, None
        if cause is None and now >= self._next_periodic:
            cause = "periodic"
        if cause is not None:
            self._reload(cause)
            self._next_periodic = now + self._reload_s
        return self._next_periodic

    def _owe_reload(self, cause: str) -> None:
        with self._lock:
            self._cause = cause
        if self._runner is not None:
            self._runner.wake()

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
            self._owe_reload("watch")

    def _on_error(self, why: str) -> None:
        log.warning("%s: watch on %s broke (%s); re-watching", self._what, self._key, why)
        self._cancel = None
        self._owe_reload("watch")

    def _reload(self, cause: str) -> None:
        try:
            self.reload(cause)
        except ShardcronError as e:
            log.warning("%s: reload failed (%s); keeping the ones loaded before", self._what, e)


class WatchThread:
    """One thread that runs any number of ``StoreWatch``es: each is watched, and reloaded when bumped and
    every ``reload_s``. It sleeps until a bump or the earliest periodic reload."""

    def __init__(self, name: str, lifeline: Lifeline = UNWATCHED):
        self._lock = threading.Lock()
        self._watches: list[StoreWatch] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = lifeline.thread(self._run, name)

    def add(self, watch: StoreWatch) -> None:
        with self._lock:
            self._watches.append(watch)
        self._wake.set()

    def remove(self, watch: StoreWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> WatchThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            crashpoints.fail_worker()
            # Cleared before the passes read what is owed: a bump arriving during them wakes the next wait.
            self._wake.clear()
            with self._lock:
                watches = list(self._watches)
            next_due = [w.pass_once(time.monotonic()) for w in watches]
            self._wake.wait(max(0.0, min(next_due) - time.monotonic()) if next_due else None)


__all__ = ["RELOAD_S", "StoreWatch", "WatchThread"]
