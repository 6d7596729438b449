"""A node's threads carry their Python names to the OS.

``top -H``, ``ps -L``, ``/proc/<pid>/task/*/comm`` and ``shardcron bench``
then show which part of a node each thread is (Linux keeps a name's first 15
bytes, written to the thread's ``comm``; elsewhere nothing is named). Without this every thread is "python", or worse, the name of the
thread that started it, which Linux copies to the new one: the etcd client's
watch threads would read as whichever of ours first watched.

``threading.setprofile`` is the one hook that runs in every thread the
``threading`` module starts, ours and the libraries', before its target: it
names the thread and takes itself out at its first call, so it costs a thread
one call and leaves no profile function behind.
"""

from __future__ import annotations

import sys
import threading


def name_os_threads() -> None:
    """From now on, every thread started through ``threading`` gives its OS thread its Python name; the
    calling thread and those already running are named now."""
    threading.setprofile(_name_at_first_call)
    for thread in threading.enumerate():
        if thread.native_id is not None:
            _write_comm(thread.native_id, thread.name)


def _name_at_first_call(_frame, _event, _arg) -> None:
    sys.setprofile(None)
    thread = threading.current_thread()
    if thread.native_id is not None:
        _write_comm(thread.native_id, thread.name)


def _write_comm(native_id: int, name: str) -> None:
    try:
        with open(f"/proc/self/task/{native_id}/comm", "w") as f:
            f.write(name[:15])
    except OSError:  # not Linux, or the thread has just ended: its name is only for show
        pass


__all__ = ["name_os_threads"]
