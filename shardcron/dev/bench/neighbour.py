"""A busy neighbour for ``bench precision --neighbour cpu``: one spinning process per CPU the nodes may run on.

Most people run the scheduler beside their workers, so its precision must hold
when something else wants the same cores. The neighbour is a plain ``python -c``
loop at normal priority, pinned to each CPU the nodes' affinity allows, so the
kernel must share every one of those cores between the node and the spinner.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

# Spins, and every ~10 ms of spinning checks that the bench that started it is still alive: a bench killed
# with SIGKILL cannot run its finally, and an orphaned spinner would otherwise eat a core until reboot.
_SPIN = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(200_000): pass\n"


def neighbour_cpus(pids: Iterable[int]) -> list[int]:
    """The CPUs any of ``pids`` may run on (all of this machine's where affinity cannot be read)."""
    cpus: set[int] = set()
    for pid in pids:
        try:
            cpus |= os.sched_getaffinity(pid)
        except (AttributeError, OSError):  # not Linux, or the process is gone
            return sorted(range(os.cpu_count() or 1))
    return sorted(cpus) or sorted(range(os.cpu_count() or 1))


@contextmanager
def cpu_neighbour(cpus: list[int]) -> Iterator[list[int]]:
    """Start one spinner per CPU in ``cpus``, pinned there when the OS allows; yield their pids; always kill them."""
    procs: list[subprocess.Popen] = []
    try:
        for cpu in cpus:
            p = subprocess.Popen(
                [sys.executable, "-c", _SPIN],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(p)
            try:
                os.sched_setaffinity(p.pid, {cpu})
            except (AttributeError, OSError):
                pass  # unpinned, it still competes for the same cores
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
