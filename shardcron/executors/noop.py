"""The executor that does nothing and succeeds: for benchmarks and smoke tests."""

from __future__ import annotations

from shardcron.abc import Cancel
from shardcron.executors.base import now_ms
from shardcron.model import ExecutionResult, ExecutorSpec, TickContext


class NoopExecutor:
    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        t = now_ms()
        return ExecutionResult(ok=True, started_at_ms=t, finished_at_ms=t)
