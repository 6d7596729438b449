"""Executors run one attempt of one tick: an HTTP request, a shell command, or nothing.

``executor_for(kind, allow_shell=...)`` hands out shared, stateless instances
that any number of worker threads may call at once.
"""

from __future__ import annotations

from shardcron.errors import InvalidJob
from shardcron.abc import Executor
from shardcron.executors.describe import describe
from shardcron.executors.http import HttpExecutor
from shardcron.executors.noop import NoopExecutor
from shardcron.executors.shell import ShellExecutor
from shardcron.model import ExecutorKind

_SHARED: dict[ExecutorKind, Executor] = {
    ExecutorKind.NOOP: NoopExecutor(),
    ExecutorKind.HTTP: HttpExecutor(),
    ExecutorKind.SHELL: ShellExecutor(),
}


def executor_for(kind: ExecutorKind, *, allow_shell: bool) -> Executor:
    """The shared executor for ``kind``; shell ones only on nodes started with --allow-shell."""
    try:
        kind = ExecutorKind(kind)
    except ValueError:
        raise InvalidJob("executor.kind", f"no executor for {kind!r}") from None
    if kind is ExecutorKind.SHELL and not allow_shell:
        raise InvalidJob("executor.kind", "shell jobs are refused: this node runs without --allow-shell")
    return _SHARED[kind]


__all__ = ["Executor", "HttpExecutor", "NoopExecutor", "ShellExecutor", "describe", "executor_for"]
