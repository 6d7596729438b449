"""Keeping a node's copy of cluster-wide settings current: an etcd key each write bumps, and a slow reload as backstop.

The settings live in the store (calendars, namespaces, tokens); etcd only says
"they changed". A node that writes them bumps ``key`` after its commit; every
node watches that key and calls ``reload(cause)``, which reads the store and
applies what changed.

A lost watch is re-established on the next pass, and a pass every ``reload_s``
reloads anyway: a bump missed while etcd or the store was away costs at most
that long. A reload that fails with a ``ShardcronError`` (the store is away) is
logged and the copy loaded before is kept.

Why a task and not a thread: what every kind of settings of a node does is a
short store read every 30 s (the tokens' every 2 s) or when a bump says so,
and between those only waiting. One ``WatchTask`` on the node's event loop
(a ``runtime.pass_task.PassTask``) does the waiting for all of them, for no
thread of its own; each pass (etcd's watch set-up and the store's reads, which
block) runs on the pool it is given (a node's: its background passes' turn on
the API's workers): never on the loop, and never on etcd's callback thread,
which only wakes the task.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor

from shardcron.coordination.etcd import Etcd, WatchEvent
from shardcron.errors import ShardcronError
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.node_loop import NodeLoop
from shardcron.runtime.pass_task import PassTask

log = logging.getLogger(__name__)

RELOAD_S = 30.0


class StoreWatch:
    """``what`` names the settings in log lines (and the task, when it runs on one of its own). A subclass
    reads and applies them in ``reload(cause)``; cause is ``start``, ``watch`` (a bump, or a broken watch) or
    ``periodic``."""

    def __init__(self, etcd: Etcd, key: str, what: str, reload_s: float = RELOAD_S, lifeline: Lifeline = UNWATCHED):
        self._etcd = etcd
        self._key = key
        self._what = what
        self._reload_s = reload_s
        self._lifeline = lifeline
        self._lock = threading.Lock()  # _cause: set by etcd's callback thread, taken by the pass
        self._cause: str | None = "start"  # why the next pass reloads; None: only when the periodic one is due
        self._next_periodic = 0.0  # monotonic
        self._cancel: Callable[[], None] | None = None
        self._runner: WatchTask | None = None
        self._runs_own_task = False

    def start(self, runner: WatchTask | None = None) -> None:
        """Watch and reload on ``runner``, the node's task for all its settings, or on a task and loop of its
        own (a test, a tool)."""
        if runner is None:
            runner, self._runs_own_task = WatchTask(self._what, lifeline=self._lifeline), True
        self._runner = runner
        runner.add(self)
        if self._runs_own_task:
            runner.start()

    def stop(self) -> None:
        runner = self._runner
        if runner is not None:
            runner.remove(self)
            if self._runs_own_task:
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
        """On its ``WatchTask``'s pool: watch if not watching, reload if owed; returns when the next periodic
        reload is due."""
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


class WatchTask:
    """Any number of ``StoreWatch``es on one ``PassTask`` named ``name``, on ``loop`` (the node's; None: a loop
    of its own, closed by ``stop()``): each is watched, and reloaded when bumped and every ``reload_s``. A
    pass of them all runs at each bump and when the earliest periodic reload is due."""

    def __init__(self, name: str, loop: NodeLoop | None = None, lifeline: Lifeline = UNWATCHED):
        self._owns_loop = loop is None
        self._loop = NodeLoop(f"{name}-loop", lifeline) if loop is None else loop
        self._lock = threading.Lock()
        self._watches: list[StoreWatch] = []
        self._passes = PassTask(name, self._loop, self._pass_all, lifeline=lifeline)

    def add(self, watch: StoreWatch) -> None:
        with self._lock:
            self._watches.append(watch)
        self.wake()

    def remove(self, watch: StoreWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def wake(self) -> None:
        """From any thread (etcd's callback thread among them): a pass soon."""
        self._passes.wake()

    def start(self, pool: Executor | None = None) -> WatchTask:
        """Start the task; its passes run on ``pool`` (a node's background lane; None: the loop's default
        executor)."""
        self._passes.start(pool)
        return self

    def stop(self) -> None:
        """End the task, once a pass under way has ended (it could otherwise watch again what its caller stops
        next); a second call does nothing."""
        self._passes.stop()
        if self._owns_loop:
            self._loop.close()

    def _pass_all(self) -> float | None:
        """On the pool: one pass of every watch; the seconds until the earliest periodic reload (None: no watch)."""
        with self._lock:
            watches = list(self._watches)
        next_due = min((w.pass_once(time.monotonic()) for w in watches), default=None)
        return None if next_due is None else next_due - time.monotonic()


__all__ = ["RELOAD_S", "StoreWatch", "WatchTask"]
