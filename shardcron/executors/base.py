"""The few helpers every executor shares (the interface is ``shardcron.abc.Executor``).

An executor runs one attempt of one tick, called by the scheduling loop from a
worker thread. It never raises for a job failure: connection refused, a DNS
error, a timeout, a non-zero exit, a non-2xx answer all come back as
``ExecutionResult(ok=False, error=...)``. When ``cancel`` is set (the node lost
the shard or its lease, or is stopping) it stops as soon as it can and reports
an error that starts with ``"cancelled: "``.

``cancel`` (``abc.Cancel``) is an event: an executor asks ``is_set()`` once
right before it starts something, and otherwise waits on it, through
``on_set``, together with whatever it waits for (``wait_done_or_cancelled``).
No executor looks at it on a timer.
"""

from __future__ import annotations

import codecs
import threading
import time

from shardcron.abc import Cancel
from shardcron.model import OUTPUT_LIMIT_BYTES
from shardcron.runtime.latch import Latch


def wait_done_or_cancelled(done: Latch, cancel: Cancel, timeout_s: float) -> None:
    """Block until ``done`` or ``cancel`` is set, or ``timeout_s`` has passed: one wait, woken by either event.

    The caller then looks at which: ``done`` first (finished work is reported as finished), then ``cancel``."""
    wake = threading.Event()
    take_back = (done.on_set(wake.set), cancel.on_set(wake.set))
    try:
        wake.wait(max(timeout_s, 0.0))
    finally:
        for remove in take_back:
            remove()


def now_ms() -> int:
    """Wall-clock epoch milliseconds, the unit of ``started_at_ms`` and ``finished_at_ms``."""
    return int(time.time() * 1000)


def truncate_output(data: bytes | bytearray, limit: int = OUTPUT_LIMIT_BYTES) -> str:
    """At most ``limit`` bytes of UTF-8, cut on a character boundary, with nothing added.

    Invalid bytes become U+FFFD. Since that takes 3 bytes where the bad byte
    took 1, the decoded text is measured again and cut again if it grew past
    the limit.
    """
    if len(data) <= limit:
        text = bytes(data).decode("utf-8", "replace")
        if len(text.encode("utf-8")) <= limit:
            return text
    text = _decode_whole_chars(bytes(data[:limit]))
    encoded = text.encode("utf-8")
    if len(encoded) > limit:
        text = _decode_whole_chars(encoded[:limit])
    return text


def _decode_whole_chars(data: bytes) -> str:
    # final=False leaves an incomplete trailing sequence in the decoder's
    # buffer instead of replacing it: exactly "cut on a character boundary".
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)
