"""Runs a tick as ``/bin/sh -c <command>`` in a process group of its own.

One thread does everything, with no reader thread: one selector waits, until
the deadline, on the output pipe, the shell's exit (a pidfd, where the kernel
has them) and ``cancel`` (its callback writes to a pipe of the watch's own).
Where there are no pidfds the exit has nothing to wait on, so the wait is cut
into ``EXIT_POLL_S`` slices to look for it; that is about the process, never
the lease, which wakes the wait itself. Output (stdout and stderr merged) is
read as it comes, so the command can never block on a full pipe: the first
64 KiB are kept, the rest is read and dropped.

Stopping (timeout or cancel): SIGTERM to the whole group, up to
``KILL_GRACE_S`` for the shell to exit and the output to close, then SIGKILL to
the group. The shell is not reaped until the group has had its SIGKILL: an
unreaped shell keeps its pid, which is the group id, from being reused, so the
signals can never reach an unrelated group.

When the shell exits on its own, the attempt is over. Background processes it
left behind are not waited for nor killed (as with cron); if they still hold
the output pipe, reading stops ``EXIT_DRAIN_S`` after the shell exited.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from typing import IO

from shardcron.abc import Cancel
from shardcron.executors.base import now_ms, truncate_output
from shardcron.executors.identity import tick_environment
from shardcron.model import OUTPUT_LIMIT_BYTES, ExecutionResult, ExecutorSpec, TickContext

SHELL = "/bin/sh"
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL
EXIT_DRAIN_S = 1.0  # how long to keep reading output after the shell exited
# Without a pidfd, how often to look whether the shell has exited (while its output is open; once the output has
# closed, the exit follows at once, so then every _EXIT_SOON_POLL_S). Only the exit is looked for this way.
EXIT_POLL_S = 0.05
_EXIT_SOON_POLL_S = 0.005
_READ_CHUNK = 64 * 1024


class ShellExecutor:
    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        started = now_ms()
        if spec.shell is None:
            return ExecutionResult(
                ok=False,
                started_at_ms=started,
                finished_at_ms=now_ms(),
                error="invalid job: a shell executor needs a command",
            )
        if cancel.is_set():
            return ExecutionResult(
                ok=False, started_at_ms=started, finished_at_ms=now_ms(), error="cancelled: before the command started"
            )
        deadline = time.monotonic() + timeout_s
        try:
            proc = subprocess.Popen(
                [SHELL, "-c", spec.shell.command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **tick_environment(ctx)},
                start_new_session=True,
            )
        except OSError as e:
            return ExecutionResult(
                ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=f"could not start {SHELL}: {e}"
            )

        watch = _Watch(proc)
        stopped_by = None
        try:
            if not watch.until_done(deadline, cancel):
                if not watch.exited:
                    stopped_by = "cancel" if cancel.is_set() else "timeout"
                # else the shell exited in time; only the drain of the output was cut short
            if stopped_by:
                _signal_group(proc.pid, signal.SIGTERM)
                watch.until_done(time.monotonic() + KILL_GRACE_S, cancel=None)
                _signal_group(proc.pid, signal.SIGKILL)
        except BaseException:  # a bug here must not leave the command running
            _signal_group(proc.pid, signal.SIGKILL)
            raise
        finally:
            watch.close()
            code: int | None
            try:
                code = proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:  # only if the SIGKILL itself is stuck (uninterruptible sleep)
                code = None

        finished, output = now_ms(), truncate_output(watch.output)
        if stopped_by == "cancel":
            error: str | None = "cancelled: killed the process group (this node lost the shard or is stopping)"
        elif stopped_by == "timeout":
            error = f"timed out after {timeout_s:g}s: killed the process group"
        else:
            error = None if code == 0 else _describe_exit(code)
        return ExecutionResult(
            ok=error is None, started_at_ms=started, finished_at_ms=finished, exit_code=code, output=output, error=error
        )


class _Watch:
    """Waits for a shell to exit and its output to close, reading the output meanwhile, or for ``cancel``."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.stdout is None:
            raise ValueError("the shell's output must be a pipe")
        self._proc = proc
        self._stdout: IO[bytes] = proc.stdout
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stdout, selectors.EVENT_READ, "output")
        # ``cancel``'s callback runs on the thread that sets it: it wakes the select through this pipe.
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        self._wake_w: int | None = wake_w
        self._wake_lock = threading.Lock()  # a callback still running as the watch closes must not write to a reused fd
        self._selector.register(self._wake_r, selectors.EVENT_READ, "cancel")
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(proc.pid)
            self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):  # no pidfds: poll for the exit instead
            pass
        self.output = bytearray()
        self.output_closed = False
        self.exited = False
        self._drain_until = 0.0

    def until_done(self, until: float, cancel: Cancel | None) -> bool:
        """True once the shell exited and its output closed (or EXIT_DRAIN_S passed
        since the exit); False at ``until`` or when ``cancel`` is set."""
        # Asked once, on entry (a start right after a pause is refused); after that only the callback tells.
        cancelled = cancel is not None and cancel.is_set()
        take_back = cancel.on_set(self._wake) if cancel is not None else _nothing
        try:
            while True:
                if not self.exited and _has_exited(self._proc.pid):
                    self._note_exit()
                if self.exited and (self.output_closed or time.monotonic() >= self._drain_until):
                    return True
                if cancelled:
                    return False
                now = time.monotonic()
                if now >= until:
                    return False
                remaining = max(0.0, (min(until, self._drain_until) if self.exited else until) - now)
                if self._pidfd is None and not self.exited:
                    remaining = min(remaining, EXIT_POLL_S if not self.output_closed else _EXIT_SOON_POLL_S)
                for key, _ in self._selector.select(remaining):
                    if key.data == "output":
                        self._read()
                    elif key.data == "exit":
                        self._note_exit()
                    else:  # cancel was set; drained, so that a later wait is not woken by it
                        os.read(self._wake_r, 64)
                        cancelled = cancel is not None
        finally:
            take_back()

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_w is not None:
                try:
                    os.write(self._wake_w, b"\0")
                except BlockingIOError:  # the pipe is full of wake-ups already
                    pass

    def _note_exit(self) -> None:
        if not self.exited:
            self.exited = True
            self._drain_until = time.monotonic() + EXIT_DRAIN_S
        if self._pidfd is not None and self._pidfd in self._selector.get_map():
            self._selector.unregister(self._pidfd)  # stays readable: would wake every select

    def _read(self) -> None:
        chunk = os.read(self._stdout.fileno(), _READ_CHUNK)
        if not chunk:
            self.output_closed = True
            self._selector.unregister(self._stdout)
        elif len(self.output) < OUTPUT_LIMIT_BYTES:
            self.output += chunk[: OUTPUT_LIMIT_BYTES - len(self.output)]

    def close(self) -> None:
        self._selector.close()
        with self._wake_lock:
            if self._wake_w is not None:
                os.close(self._wake_w)
                self._wake_w = None
        os.close(self._wake_r)
        if self._pidfd is not None:
            os.close(self._pidfd)
        self._stdout.close()


def _nothing() -> None:
    pass


def _has_exited(pid: int) -> bool:
    # WNOWAIT: look without reaping, so the pid (the group id) stays reserved.
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the shell did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with code {code}"
