"""Crash points for the fault tests: a node kills itself with SIGKILL at a named point.

``SHARDCRON_TEST_CRASH_AFTER_DISPATCH=<job id>`` makes a node die the first
time an attempt of that job has been handed to its executor and succeeded
(the broker acked the enqueue), before its result is recorded. The tick's row
stays ``running`` under the dead leader's fence, and the next leader retries
the slot: exactly the window in which a scheduler without end-to-end
idempotency enqueues a slot twice. Test-only, like ``SHARDCRON_TEST_CLOCK_OFFSET_MS``:
never set it in production. Unset, the check is one comparison with None.
"""

from __future__ import annotations

import os
import signal
import sys

_CRASH_AFTER_DISPATCH = os.environ.get("SHARDCRON_TEST_CRASH_AFTER_DISPATCH") or None


def after_dispatch(job_id: str, ok: bool) -> None:
    if _CRASH_AFTER_DISPATCH is None or job_id != _CRASH_AFTER_DISPATCH or not ok:
        return
    print(f"crash point: after_dispatch of {job_id}: SIGKILL", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


# ``SHARDCRON_TEST_CRASH_NOTIFY=<point>:<job id>``: die at a notification's crash point (notifications/notifier.py):
# ``before_claim`` once a failed result of the job has landed and before its notification is claimed (the
# successor's sweep must claim it), ``after_send`` once one was sent and before it is recorded sent (the successor
# must send it again, with the same idempotency key).
_CRASH_NOTIFY = os.environ.get("SHARDCRON_TEST_CRASH_NOTIFY") or None


def notify(point: str, job_id: str) -> None:
    if _CRASH_NOTIFY is None or _CRASH_NOTIFY != f"{point}:{job_id}":
        return
    print(f"crash point: notify {point} of {job_id}: SIGKILL", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
