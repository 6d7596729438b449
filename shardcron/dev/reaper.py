"""A watchman that stops ``shardcron dev``'s children if ``dev`` dies without stopping them itself.

``dev`` starts etcd and the nodes each in a session of its own (so that a
Ctrl-C reaches ``dev`` alone, which then stops them in order). The price is that
they outlive a ``dev`` that cannot clean up: one killed with SIGKILL, or one
whose cleanup failed. The reaper closes that gap. It is a small process of its
own session, started first; ``dev`` tells it each child's pid on a pipe as the
child starts (``+pid``), and each child it has reaped itself (``-pid``). When
the pipe reaches its end, whichever way ``dev`` went, the reaper stops every
process group still listed: SIGTERM, then SIGKILL after a grace period.

A pipe's end is noticed by any exit of its writer, which ``prctl(PR_SET_PDEATHSIG)``
would give only to processes ``dev`` spawns itself, from the thread that stays alive.

Run as ``python -m shardcron.dev.reaper``; ``Reaper`` is the side ``dev`` holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

GRACE_S = 10.0  # a node resigns its shards and revokes its lease on SIGTERM: give it time to
POLL_S = 0.1


def group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` is still there (a zombie counts until reaped)."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # the id was reused by someone else's group: not ours to stop
        return False


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_groups(
    pgids: Iterable[int], grace_s: float = GRACE_S, *, alive: Callable[[int], bool] = group_alive
) -> list[int]:
    """SIGTERM every group of ``pgids``, SIGKILL those still there after ``grace_s``; the ones killed."""
    left = [g for g in pgids if alive(g)]
    for g in left:
        signal_group(g, signal.SIGCONT)  # a stopped (SIGSTOPped) process acts on SIGTERM only once continued
        signal_group(g, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        left = [g for g in left if alive(g)]
    for g in left:
        signal_group(g, signal.SIGKILL)
    return left


def watched(lines: Iterable[str]) -> list[int]:
    """The pids a stream of ``+pid`` / ``-pid`` lines leaves listed, in the order they were added."""
    listed: dict[int, None] = {}
    for line in lines:
        line = line.strip()
        if line[:1] in ("+", "-") and line[1:].isdigit():
            if line[0] == "+":
                listed[int(line[1:])] = None
            else:
                listed.pop(int(line[1:]), None)
    return list(listed)


def main() -> int:
    # The terminal's Ctrl-C and hang-up are dev's to handle; the reaper acts on the pipe alone.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    stop_groups(watched(sys.stdin))
    return 0


class Reaper:
    """``dev``'s end of the pipe to the reaper process."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "shardcron.dev.reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            close_fds=True,
        )
        if self._proc.stdin is None:  # never with stdin=PIPE, which typeshed's Popen cannot express
            raise RuntimeError("the reaper's stdin is not a pipe")
        self._stdin = self._proc.stdin

    def watch(self, pid: int) -> None:
        """Stop ``pid``'s process group (its session: each child leads one) if dev dies first."""
        self._say(f"+{pid}")

    def forget(self, pid: int) -> None:
        """``pid`` was reaped: its number may be reused, so it must not be signalled any more."""
        self._say(f"-{pid}")

    def close(self) -> bool:
        """Let the reaper go: it stops what is still listed (nothing, after a clean stop) and exits.
        Whether it has exited (it goes on by itself if not)."""
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(GRACE_S + 5)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _say(self, line: str) -> None:
        try:
            self._stdin.write(line + "\n")
            self._stdin.flush()
        except OSError:  # the reaper is gone: dev's own cleanup still runs
            pass


if __name__ == "__main__":
    raise SystemExit(main())
