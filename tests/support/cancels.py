"""A cancel (``abc.Cancel``) that counts how often it is asked ``is_set()``.

A waiter that polls its cancel asks on every turn, so the count grows with
the time it waits; one that waits on the event asks a few times in all: the
point checks before it starts, and once more when it is woken.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shardcron.leader.shard_cancel import StopOrLeaseLost
from shardcron.runtime.latch import Latch

# The most ``is_set()`` calls an attempt makes, whatever it waited: its point checks before it
# starts (each layer it crosses asks once: the thread, the loop, the request's slot) and after it
# is woken.
MOST_CHECKS = 8
# The slowest poll of its cancel these tests must tell from a wait on it.
SLOWEST_POLL_S = 0.05
# How long an attempt waits, under way, before its cancel is set: the window in which a wait on the event
# asks ``is_set()`` nothing more, while a poll every SLOWEST_POLL_S would ask more often than two attempts
# sharing one cancel may in all (2 * MOST_CHECKS). A fixed sleep on purpose: what it tells apart is how often
# the cancel is asked over time, which no condition marks.
WAITED_S = (2 * MOST_CHECKS + 4) * SLOWEST_POLL_S


class CountingCancel:
    def __init__(self, inner: Latch | StopOrLeaseLost | None = None) -> None:
        self.inner = inner if inner is not None else Latch()
        self._lock = threading.Lock()
        self.asked = 0

    def is_set(self) -> bool:
        with self._lock:
            self.asked += 1
        return self.inner.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.inner.wait(timeout)

    def on_set(self, callback: Callable[[], object]) -> Callable[[], None]:
        return self.inner.on_set(callback)

    @property
    def listeners(self) -> int:
        return self.inner.listeners

    def set(self) -> None:
        assert isinstance(self.inner, Latch), "only a plain latch is set by hand; a shard's cancel by its sources"
        self.inner.set()
