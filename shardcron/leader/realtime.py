"""The dispatcher under the real-time scheduling policy (``--dispatcher-priority realtime``).

The dispatcher sleeps until the next due start and must then run at once. On a
busy machine the operating system may wake it late; under ``SCHED_FIFO`` it
preempts every normal thread the moment its timer fires. Beside ``bench
fairness``'s flood on a 2-core machine this helped a little (calm's p99 on
PostgreSQL 5 -> 4 ms), but ``perf sched`` later showed the kernel waking the
dispatcher on time anyway: what made it late was the GIL, which
``gil_lead.py`` takes care of. So this stays opt-in.

At priority 1, the lowest real-time one: above every normal thread, below the
kernel's own. The kernel's real-time throttling (``sched_rt_runtime_us``, 95% of
each second by default) keeps even a runaway real-time thread from taking a core
whole; the dispatcher sleeps between starts and a burst of 10,000 takes tens of ms.
Only the dispatcher: the node's other threads stay normal.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from shardcron.errors import ConfigError

PRIORITIES = ("normal", "realtime")
REALTIME_PRIORITY = 1


def make_realtime(thread_id: int, set_scheduler: Callable | None = None) -> None:
    """Put the thread ``thread_id`` (a native id) under SCHED_FIFO; a clear ``ConfigError`` when it may not."""
    set_scheduler = set_scheduler or getattr(os, "sched_setscheduler", None)
    if set_scheduler is None or not hasattr(os, "SCHED_FIFO"):
        raise ConfigError("--dispatcher-priority realtime: this platform has no SCHED_FIFO (Linux only)")
    try:
        set_scheduler(thread_id, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except PermissionError as e:
        raise ConfigError(
            "--dispatcher-priority realtime: the node may not use SCHED_FIFO "
            f"({e.strerror}); it needs CAP_SYS_NICE (root, or AmbientCapabilities=CAP_SYS_NICE "
            "in its systemd unit), or run with --dispatcher-priority normal"
        ) from e
    except OSError as e:
        raise ConfigError(f"--dispatcher-priority realtime: SCHED_FIFO refused ({e.strerror or e})") from e


def check_realtime_allowed() -> None:
    """Make a short-lived thread real-time, so a node that may not is refused before it joins the cluster
    (the same ``ConfigError`` as ``make_realtime``), not after it has started serving."""
    failure: list[ConfigError] = []

    def probe() -> None:
        try:
            make_realtime(threading.get_native_id())
        except ConfigError as e:
            failure.append(e)

    t = threading.Thread(target=probe, name="realtime-probe")
    t.start()
    t.join()
    if failure:
        raise failure[0]


__all__ = ["PRIORITIES", "REALTIME_PRIORITY", "check_realtime_allowed", "make_realtime"]
