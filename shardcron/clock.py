"""Wall-clock and monotonic time, in one place.

``wall_ms`` is what slots are compared against. ``SHARDCRON_TEST_CLOCK_OFFSET_MS``
shifts it: a test-only hook (the clock-skew fault test starts one node 2 s
ahead) that must never be set in production. Lease validity is judged on the
monotonic clock, which no offset touches.
"""

import os
import time

_OFFSET_MS = int(os.environ.get("SHARDCRON_TEST_CLOCK_OFFSET_MS", "0") or 0)


def wall_ms() -> int:
    return int(time.time() * 1000) + _OFFSET_MS


def monotonic() -> float:
    return time.monotonic()
