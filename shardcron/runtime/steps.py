"""A long-lived worker's steps, watched from another thread: a step that outlasts its budget is a stall.

Every call a node's coordinator makes has a deadline of its own (etcd's client timeout, the store's connect
and statement timeouts), but a call can still wait on something no deadline covers: a connection that
neither answers nor ends. While such a worker is stuck, the rest of the node looks alive. So the worker says
where it is, ``with watch.step(what):`` around each unit of work, and another thread that wakes anyway asks
``stalled(...)`` of ``watch.current``.

A step's clock starts when it begins, and again whenever a step inside it ends: what is judged is how long
the worker has gone without beginning or finishing any step while it is inside one. So a step made of many
smaller ones (a pass over every shard) is judged by the longest stretch between them, not by its total.
Between steps (waiting for work) the worker is idle, and idle is never a stall.

The worker writes its steps and another thread reads ``current``: it is one immutable ``Step`` replaced
whole, so the reader needs no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from shardcron import clock


@dataclass(frozen=True)
class Step:
    what: str
    started_at: float  # monotonic: when it began, or when the last step inside it ended


def stalled(started_at: float | None, now: float, budget_s: float) -> bool:
    """Whether the step under way since ``started_at`` (None: the worker is idle) has lasted past ``budget_s``
    at ``now``. Pure. A step that began after ``now`` was read has not stalled."""
    return started_at is not None and now - started_at > budget_s


class WorkerStalled(RuntimeError):
    """What the lifeline is told when a worker is stuck in one step (``Lifeline.report``)."""

    def __init__(self, worker: str, step: Step, now: float, budget_s: float):
        self.worker, self.step, self.budget_s = worker, step, budget_s
        self.lasted_s = now - step.started_at
        super().__init__(
            f"the {worker} has been in one step ({step.what}) for {self.lasted_s:.0f}s, "
            f"past its budget of {budget_s:.0f}s"
        )


class StepWatch:
    """Where one worker is in its steps. Only that worker calls ``step``; any thread may read ``current``.
    ``monotonic`` is the clock the steps are timed by (a test's own, in the tests)."""

    def __init__(self, monotonic: Callable[[], float] = clock.monotonic) -> None:
        self._monotonic = monotonic
        self._outer: list[str] = []  # the steps the current one is inside, outermost first
        self.current: Step | None = None  # None: idle

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """The block is step ``what``; when it ends, the step it is inside (if any) goes on with a fresh clock."""
        if self.current is not None:
            self._outer.append(self.current.what)
        self.current = Step(what, self._monotonic())
        try:
            yield
        finally:
            self.current = Step(self._outer.pop(), self._monotonic()) if self._outer else None

    def stall(self, worker: str, now: float, budget_s: float) -> WorkerStalled | None:
        """The stall to report if the step under way has lasted past ``budget_s`` at ``now``, else None."""
        step = self.current
        if step is None or not stalled(step.started_at, now, budget_s):
            return None
        return WorkerStalled(worker, step, now, budget_s)


__all__ = ["Step", "StepWatch", "WorkerStalled", "stalled"]
