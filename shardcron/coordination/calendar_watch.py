"""Keeping a node's calendars current: an etcd key every calendar write bumps, and a slow reload as the backstop.

The calendars live in the store (``store/calendars.py``); etcd only says "they
changed". A node that writes one bumps ``<prefix>/calendars`` after its commit;
every node watches that key and reloads them all from the store, then tells the
scheduler which ones changed, so each job naming one is rescheduled at once.

A lost watch is re-established on the next periodic pass, and that pass
(every ``RELOAD_S``) reloads anyway: a bump missed while etcd or the store was
away costs at most that long. Reloads run on the watcher's own thread, never on
etcd's callback thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from sqlalchemy import Engine

from shardcron import metrics
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.errors import ShardcronError
from shardcron.scheduling.calendar_book import CalendarBook
from shardcron.store import calendars as calendar_store

log = logging.getLogger(__name__)

RELOAD_S = 30.0


class CalendarWatch:
    def __init__(self, etcd: Etcd, layout: KeyLayout, engine: Engine, book: CalendarBook,
                 on_change: Callable[[set[str]], None], reload_s: float = RELOAD_S):
        self._etcd = etcd
        self._key = layout.calendars
        self._engine = engine
        self._book = book
        self._on_change = on_change
        self._reload_s = reload_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cause = "start"
        self._cancel: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name="calendars", daemon=True)

    def load_now(self) -> None:
        """The first load, before the scheduler takes any shard (raises when the store is down)."""
        self._book.replace(c.calendar for c in calendar_store.list_calendars(self._engine))

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
        """After this node wrote calendar ``name``: every node (this one included, through the watch) reloads."""
        self._etcd.put(self._key, json.dumps({"name": name, "at_ms": now_ms}).encode())

    def _run(self) -> None:
        while not self._stop.is_set():
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
            log.warning("calendars: cannot watch %s (%s); reloading every %.0f s until it can", self._key, e,
                        self._reload_s)

    def _on_events(self, _revision: int, events) -> None:
        if any(ev.kv.key == self._key for ev in events):
            self._cause = "watch"
            self._wake.set()

    def _on_error(self, why: str) -> None:
        log.warning("calendars: watch on %s broke (%s); re-watching", self._key, why)
        self._cancel = None
        self._cause = "watch"
        self._wake.set()

    def _reload(self) -> None:
        try:
            stored = calendar_store.list_calendars(self._engine)
        except ShardcronError as e:
            log.warning("calendars: reload failed (%s); keeping the ones loaded before", e)
            return
        changed = self._book.replace(s.calendar for s in stored)
        metrics.calendar_reloads.labels(self._cause).inc()
        if changed:
            log.info("calendars changed: %s", ", ".join(sorted(changed)))
            self._on_change(changed)


__all__ = ["RELOAD_S", "CalendarWatch"]
