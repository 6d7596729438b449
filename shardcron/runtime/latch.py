"""A latch: a ``threading.Event`` that is set once, never cleared, and tells its listeners when it is set.

It is what a waiter selects on, as on the channel etcd's ``Session.Done()``
closes: a thread blocks in ``wait()``, or registers ``on_set(callback)`` and
waits on something of its own that the callback wakes (its work's completion,
a selector, an asyncio loop). Nothing needs to look at it on a timer.

``on_set`` returns the way to take the callback back. A registration made for
one tick must be taken back when the tick ends, or a latch that lives for a
whole leadership (a session's, a shard's) would collect one per tick.
``listeners`` counts the callbacks registered and not yet run or taken back.

Callbacks run once, on the thread that sets the latch, after it is set and
outside its lock, so a callback may read it, set other latches or take
callbacks back. Each should be quick (it delays the ones after it) and must
not block. One that raises is logged and does not stop the others. A callback
registered on a latch already set runs at once, on the registering thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Latch(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self._listeners_lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._next_key = 0

    def set(self) -> None:
        """Set it (a no-op when it is set already) and run every registered callback, once."""
        with self._listeners_lock:
            if self.is_set():
                return
            super().set()  # before the callbacks are taken: a registration after this point runs at once
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - one failing listener must not keep the others from hearing it
                log.exception("a latch callback failed")

    def clear(self) -> None:
        raise RuntimeError("a latch is set once and never cleared: make a new one")

    def on_set(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` once when the latch is set (at once if it is). Returns what takes it back."""
        with self._listeners_lock:
            if not self.is_set():
                key = self._next_key
                self._next_key += 1
                self._callbacks[key] = callback
                return lambda: self._remove(key)
        callback()
        return _nothing

    @property
    def listeners(self) -> int:
        """Callbacks registered and not yet run nor taken back."""
        with self._listeners_lock:
            return len(self._callbacks)

    def _remove(self, key: int) -> None:
        with self._listeners_lock:
            self._callbacks.pop(key, None)


def _nothing() -> None:
    pass
