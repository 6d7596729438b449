"""Stopping the subprocesses tests start (workers, consumers)."""

from __future__ import annotations

import signal
import subprocess

# How long to wait for a process to be reaped after its SIGKILL.
KILL_WAIT_S = 10.0


def stop_process(proc: subprocess.Popen, grace_s: float) -> int | None:
    """SIGTERM ``proc``, wait up to ``grace_s`` for it to exit, then SIGKILL it; returns its exit code.

    A process that already exited is only reaped.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(KILL_WAIT_S)
    return proc.returncode
