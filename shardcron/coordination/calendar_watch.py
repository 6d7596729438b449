"""Keeping a node's calendars current (a ``StoreWatch`` on ``<prefix>/calendars``).

The calendars live in the store (``store/calendars.py``). After a reload the
scheduler is told which ones changed, so each job naming one is rescheduled at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import Engine

from shardcron import metrics
from shardcron.coordination.calendar_book import CalendarBook
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.store_watch import RELOAD_S, StoreWatch
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.store import calendars as calendar_store

log = logging.getLogger(__name__)


class CalendarWatch(StoreWatch):
    def __init__(
        self,
        etcd: Etcd,
        layout: KeyLayout,
        engine: Engine,
        book: CalendarBook,
        on_change: Callable[[set[str]], None],
        reload_s: float = RELOAD_S,
        lifeline: Lifeline = UNWATCHED,
    ):
        super().__init__(etcd, layout.calendars, "calendars", reload_s=reload_s, lifeline=lifeline)
        self._engine = engine
        self._book = book
        self._on_change = on_change

    def load_now(self) -> None:
        """The first load, before the scheduler takes any shard (raises when the store is down)."""
        self._book.replace(c.calendar for c in calendar_store.list_calendars(self._engine))

    def reload(self, cause: str) -> None:
        changed = self._book.replace(s.calendar for s in calendar_store.list_calendars(self._engine))
        metrics.calendar_reloads.labels(cause).inc()
        if changed:
            log.info("calendars changed: %s", ", ".join(sorted(changed)))
            self._on_change(changed)


__all__ = ["RELOAD_S", "CalendarWatch"]
