"""The scheduler's counters: added to from the claimer, the dispatcher, the coordinator,
the recorder and every worker, so each change is made under one lock (``+=`` on a
shared attribute is a read and a write that two threads can interleave)."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field, fields

from shardcron.model import TickStatus


@dataclass
class Stats:
    claimed: int = 0
    started: int = 0
    skipped: int = 0
    abandoned: int = 0
    caught_up: int = 0
    fenced_rejections: int = 0
    not_started: int = 0
    by_status: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """``add(claimed=3, started=1)``: each named counter grows by its count."""
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def add_status(self, status: TickStatus, n: int = 1) -> None:
        with self._lock:
            self.by_status[status.value] += n

    def snapshot(self) -> dict:
        """A consistent copy: every counter, and ``by_status`` as a plain dict."""
        with self._lock:
            out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
            out["by_status"] = dict(self.by_status)
            return out
