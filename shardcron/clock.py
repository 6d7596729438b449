"""Wall-clock and monotonic time, in one place.

``wall_ms`` is what slots are compared against. ``SHARDCRON_TEST_CLOCK_OFFSET_MS``
shifts it: a test-only hook (the clock-skew fault test starts one node 2 s
ahead) that must never be set in production. Lease validity is judged on the
monotonic clock, which no offset touches.

``Clock`` is what the scheduling loop reads the wall time from: ``SYSTEM_CLOCK``
(this module's ``wall_ms``) on every node, a test's own clock in the tests
that step the loop through time.
"""

import os
import time
from datetime import datetime, timedelta
from typing import Protocol

_OFFSET_MS = int(os.environ.get("SHARDCRON_TEST_CLOCK_OFFSET_MS", "0") or 0)


def wall_ms() -> int:
    return int(time.time() * 1000) + _OFFSET_MS


def wall_ms_exact() -> float:
    """``wall_ms`` with its fraction: for aiming a wait at a millisecond, not past it."""
    return time.time() * 1000 + _OFFSET_MS


def monotonic() -> float:
    return time.monotonic()


class Clock(Protocol):
    def wall_ms(self) -> int: ...


class _SystemClock:
    wall_ms = staticmethod(wall_ms)


SYSTEM_CLOCK: Clock = _SystemClock()


def rfc3339_ms(epoch_ms: int) -> str:
    """``1767225605000`` -> ``"2026-01-01T00:00:05.000Z"``: how shardcron prints and sends an
    instant (reports, the CLI, executors' slot headers). Exact: no float rounding.

    Total: an instant outside years 1-9999 (a job stored before the spec bounded its times)
    reads ``"(out of range: N ms)"``, so a listing shows it instead of failing."""
    seconds, millis = divmod(epoch_ms, 1000)
    try:
        return (_EPOCH + timedelta(seconds=seconds)).isoformat(timespec="seconds") + f".{millis:03d}Z"
    except OverflowError:
        return f"(out of range: {epoch_ms} ms)"


_EPOCH = datetime(1970, 1, 1)  # naive UTC: its isoformat has no offset to strip
