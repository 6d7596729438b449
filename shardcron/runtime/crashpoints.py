"""Crash points for the fault tests: a node kills itself with SIGKILL at a named point, or one of its
workers fails (``fail_worker``). Test-only, every one of them: never set these variables in production.

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
import threading

_CRASH_AFTER_DISPATCH = os.environ.get("SHARDCRON_TEST_CRASH_AFTER_DISPATCH") or None


def after_dispatch(job_id: str, ok: bool) -> None:
    if _CRASH_AFTER_DISPATCH is None or job_id != _CRASH_AFTER_DISPATCH or not ok:
        return
    print(f"crash point: after_dispatch of {job_id}: SIGKILL", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


# ``SHARDCRON_TEST_CRASH_NOTIFY=<point>:<job id>``: die at a notification's crash point (leader/notifier.py):
# ``before_claim`` once a failed result of the job has landed and before its notification is claimed (the
# successor's sweep must claim it), ``after_send`` once one was sent and before it is recorded sent (the successor
# must send it again, with the same idempotency key).
_CRASH_NOTIFY = os.environ.get("SHARDCRON_TEST_CRASH_NOTIFY") or None


def notify(point: str, job_id: str) -> None:
    if _CRASH_NOTIFY is None or _CRASH_NOTIFY != f"{point}:{job_id}":
        return
    print(f"crash point: notify {point} of {job_id}: SIGKILL", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


# ``SHARDCRON_TEST_FAIL_THREAD=<worker name>``: the node's long-lived worker of that name (a thread's name, as
# ``tick-writer``, ``n1-keepalive`` or ``node-loop``; a step of the tick writer's, as ``claimer``, ``recorder``,
# ``pruner`` or ``marks-commit``) raises a RuntimeError at the top of its loop (or step), as a bug would, to
# show that the node then stops loudly (``lifeline.py``). With
# ``SHARDCRON_TEST_FAIL_WHEN=<path>`` it does so only once that file exists, so a test lets the node lead
# shards first. An event loop's thread ends instead (its loop stops: ``fail_loop``), since nothing raised
# inside a loop's callback reaches its thread.
# With ``SHARDCRON_TEST_FAIL_HOW=hang`` the worker hangs there instead, as one stuck in a call would.
_FAIL_WORKER = os.environ.get("SHARDCRON_TEST_FAIL_THREAD") or None
_FAIL_WHEN = os.environ.get("SHARDCRON_TEST_FAIL_WHEN") or None
_FAIL_HOW = os.environ.get("SHARDCRON_TEST_FAIL_HOW") or "raise"


class InjectedFailure(RuntimeError):
    """The failure ``SHARDCRON_TEST_FAIL_THREAD`` asks for."""


def fail_worker(name: str | None = None) -> None:
    """At the top of a long-lived worker's loop; ``name`` defaults to the current thread's."""
    if _FAIL_WORKER is None:
        return
    if _fail_armed(name or threading.current_thread().name):
        if _FAIL_HOW == "hang":
            print(f"crash point: worker {_FAIL_WORKER!r} hangs", file=sys.stderr, flush=True)
            threading.Event().wait()
        raise InjectedFailure(f"injected failure of worker {_FAIL_WORKER!r} (SHARDCRON_TEST_FAIL_THREAD)")


def fail_loop(loop) -> None:
    """In an event loop's thread, before it runs the loop: stops that loop once its failure is armed."""
    if _FAIL_WORKER is None or threading.current_thread().name != _FAIL_WORKER:
        return

    def check() -> None:
        if _fail_armed(_FAIL_WORKER):
            print(f"crash point: the event loop of {_FAIL_WORKER!r} is stopped", file=sys.stderr, flush=True)
            loop.stop()
        else:
            loop.call_later(0.1, check)

    loop.call_soon(check)


def _fail_armed(name: str) -> bool:
    return name == _FAIL_WORKER and _armed()


def _armed() -> bool:
    return _FAIL_WHEN is None or os.path.exists(_FAIL_WHEN)


# ``SHARDCRON_TEST_HANG_IN_ACTION=<action>``: the coordinator hangs inside its step of that action on a shard
# (``ownership.Action``'s value, as ``acquire``), while the node runs, as one waiting in the fence's raise for a
# store's answer that never comes would. Armed by ``SHARDCRON_TEST_FAIL_WHEN`` as above, if it is set. The
# session's keep-alive must then see the step stall (``runtime.steps``).
_HANG_IN_ACTION = os.environ.get("SHARDCRON_TEST_HANG_IN_ACTION") or None


def hang_in_action(action: str) -> None:
    """Inside the coordinator's step of ``action`` on one shard."""
    if _HANG_IN_ACTION is None or action != _HANG_IN_ACTION or not _armed():
        return
    print(f"crash point: the coordinator hangs in its step of {action!r}", file=sys.stderr, flush=True)
    threading.Event().wait()
