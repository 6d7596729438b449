"""Executors run one attempt of one tick: an HTTP request, a shell command, an enqueue onto a
task queue or a publish to a broker, a Python call, or nothing.

``Executors`` is a node's set of them: it hands out one shared instance per
kind, made on first use (so a broker kind's optional client is imported only
when a job of that kind runs), and owns what they share: one client per broker
URL (``connections.Connections``), one pooled HTTP client (inside the http
executor), the way onto the node's event loop (``aio.LoopThread``) where every
tick's coroutine and the asyncio clients run, and the worker threads of the
blocking executors. ``close()`` at node stop closes them all but the node's
loop, which the API and the dashboard share and the node closes last. Made
without the node's loop (a test, a tool), they start a loop of their own and
``close()`` closes it too.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from concurrent.futures import ThreadPoolExecutor

from shardcron.abc import Cancel, Executor
from shardcron.errors import InvalidJob
from shardcron.executors.aio import LoopThread
from shardcron.executors.connections import Connections
from shardcron.executors.describe import describe
from shardcron.executors.extras import require_extra
from shardcron.executors.noop import NoopExecutor
from shardcron.executors.shell import ShellExecutor
from shardcron.model import ExecutionResult, ExecutorKind, ExecutorSpec, TickContext
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.runtime.node_loop import NodeLoop

_SHARED: dict[ExecutorKind, Executor] = {
    ExecutorKind.NOOP: NoopExecutor(),
    ExecutorKind.SHELL: ShellExecutor(),
}

# kind -> "module:class"; the class takes (connections, loop).
_BROKER_EXECUTORS = {
    ExecutorKind.CELERY: "shardcron.executors.celery:CeleryExecutor",
    ExecutorKind.RQ: "shardcron.executors.rq:RqExecutor",
    ExecutorKind.ARQ: "shardcron.executors.arq:ArqExecutor",
    ExecutorKind.NATS: "shardcron.executors.nats:NatsExecutor",
    ExecutorKind.AMQP: "shardcron.executors.amqp:AmqpExecutor",
    ExecutorKind.REDIS_STREAM: "shardcron.executors.redis_stream:RedisStreamExecutor",
}


def executor_for(kind: ExecutorKind, *, allow_shell: bool) -> Executor:
    """The shared executor for a stateless kind (shell, noop); shell ones only with --allow-shell.

    The others, http included (it keeps a pooled client on the node's loop), belong to a node's ``Executors``.
    """
    try:
        kind = ExecutorKind(kind)
    except ValueError:
        raise InvalidJob("executor.kind", f"no executor for {kind!r}") from None
    if kind is ExecutorKind.SHELL and not allow_shell:
        raise InvalidJob("executor.kind", "shell jobs are refused: this node runs without --allow-shell")
    if kind not in _SHARED:
        raise InvalidJob("executor.kind", f"{kind.value} executors belong to a node's Executors")
    return _SHARED[kind]


class Executors:
    """A node's executors. ``engine``: the store, for Python jobs that take a fenced session;
    ``workers``: the threads that run blocking executors (shell, Python, the sync broker clients),
    so at most that many of those run at once; ``http_pool``: requests in flight to one host (None: the http
    executor's default). A node passes its ``--executor-slots``: its gate bounds executions already, and a
    smaller pool would queue the gate's starts again, first come, below the fair queue. ``loop``: the node's
    event loop (None: a loop of their own)."""

    def __init__(
        self,
        *,
        engine=None,
        allow_shell: bool = False,
        allow_python: tuple[str, ...] = (),
        workers: int = 64,
        http_pool: int | None = None,
        lifeline: Lifeline = UNWATCHED,
        loop: NodeLoop | None = None,
    ):
        self.engine = engine
        self.http_pool = http_pool
        self.allow_shell = allow_shell
        self.allow_python = tuple(allow_python)
        self.connections = Connections()
        self.loop = LoopThread(lifeline=lifeline, shared=loop)
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tick")
        self._lock = threading.Lock()
        self._made: dict[ExecutorKind, Executor] = {}

    async def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        """One attempt, awaited on ``self.loop``: natively for an executor with ``run_async``, on a
        worker thread for the others. ``cancel``: an ``abc.Cancel``, which they wait on (see ``aio``)."""
        executor = self.for_kind(spec.kind)
        run_async = getattr(executor, "run_async", None)
        if run_async is not None:
            return await run_async(spec, ctx, timeout_s, cancel)
        return await asyncio.get_running_loop().run_in_executor(
            self._workers, executor.run, spec, ctx, timeout_s, cancel
        )

    def for_kind(self, kind: ExecutorKind) -> Executor:
        kind = ExecutorKind(kind)
        if kind in _SHARED:
            return executor_for(kind, allow_shell=self.allow_shell)
        with self._lock:
            made = self._made.get(kind)
            if made is None:
                made = self._made[kind] = self._make(kind)
            return made

    def _make(self, kind: ExecutorKind) -> Executor:
        if kind is ExecutorKind.HTTP:
            from shardcron.executors.http import HttpExecutor  # httpx, heavy: imported on the first http job

            return (
                HttpExecutor(self.loop)
                if self.http_pool is None
                else HttpExecutor(self.loop, max_per_host=self.http_pool)
            )
        if kind is ExecutorKind.PYTHON:
            from shardcron.executors.python import (
                PythonExecutor,  # SQLAlchemy sessions: imported on the first python job
            )

            return PythonExecutor(engine=self.engine, allow_python=self.allow_python)
        require_extra(kind)
        module, _, name = _BROKER_EXECUTORS[kind].partition(":")
        return getattr(importlib.import_module(module), name)(self.connections, self.loop)

    def close(self) -> None:
        with self._lock:
            made = list(self._made.values())
        for executor in made:  # the ones that own something of their own (the HTTP client, a Python job's session pool)
            close = getattr(executor, "close", None)
            if close is not None:
                close()
        self._workers.shutdown(wait=False, cancel_futures=True)
        self.connections.close()
        self.loop.close()


def __getattr__(name: str):
    # httpx is imported with the http executor, not with this package: the CLI reads describe() without it.
    if name == "HttpExecutor":
        from shardcron.executors.http import HttpExecutor  # httpx, heavy: imported on the first http job

        return HttpExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Executor", "Executors", "HttpExecutor", "NoopExecutor", "ShellExecutor", "describe", "executor_for"]
