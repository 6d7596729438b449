"""One led shard's cancel: set when the shard stops or the session's lease is lost, whichever comes first.

It is what a leadership's ticks are given as ``cancel`` (``abc.Cancel``), one
per led shard, shared by its ticks. It is a real event, derived from two:

    unset --(the shard's ``stop`` latch is set: the ownership state machine, a release)--> set
    unset --(the session's ``done`` latch is set: the lease's deadline, or etcd said so)---> set

Whichever is set first sets it, on that thread, and it then lets go of both
sources: the session outlives many leaderships, and a leadership that is over
must leave no callback behind on it. Waiters block on it (``wait``) or
register a callback (``on_set``) that wakes their own wait, and take the
callback back when their tick ends; nobody looks at it on a timer.

``is_set()`` is also the point check right before a start: it is true as well
when the session can no longer prove its lease on the monotonic clock
(``Lease.can_act``). After a stop-the-world pause the clock is past the
deadline before the session's keep-alive thread has run to set ``done``, and a
start in that moment must be refused all the same. That check never wakes a
waiter; the session's own event does, at the same deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shardcron.abc import Lease
from shardcron.runtime.latch import Latch


class StopOrLeaseLost:
    def __init__(self, stop: Latch, session: Lease):
        self._session = session
        self._fired = Latch()
        self._lock = threading.Lock()
        self._sources: list[Callable[[], None]] = []
        # Registered under the lock, so that a source set while the other is being registered
        # lets go of both: ``_let_go`` takes the list only once it is complete.
        with self._lock:
            self._sources.append(stop.on_set(self._fire))
            self._sources.append(session.done.on_set(self._fire))
        if self._fired.is_set():
            self._let_go()

    def is_set(self) -> bool:
        """Set, or the lease no longer provable on the clock: the point check right before a start."""
        return self._fired.is_set() or not self._session.can_act()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set (or ``timeout``); True if set, or the lease no longer provable, by then."""
        return self._fired.wait(timeout) or self.is_set()

    def on_set(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` once when set (at once if it is). Returns what takes it back."""
        return self._fired.on_set(callback)

    @property
    def listeners(self) -> int:
        """Callbacks registered on it and not yet run nor taken back: what the ticks in flight hold."""
        return self._fired.listeners

    def _fire(self) -> None:
        self._fired.set()
        self._let_go()

    def _let_go(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # still registering: the constructor lets go once it has both
        try:
            sources, self._sources = self._sources, []
        finally:
            self._lock.release()
        for remove in sources:
            remove()
