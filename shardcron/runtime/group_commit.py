"""Group commit: concurrent writers that each wait for their own write share one transaction.

On PostgreSQL or MariaDB a commit waits for the log to reach the disk, and on
SQLite every writer of a file takes its turn on one lock, so a thousand ticks
writing one row each would wait for a thousand commits in turn. Here they wait
for about one. Used for PutJob calls (``api/job_puts.py``); the running
marks are group-committed by the tick writer (``leader/marks.py``).

The writers are coroutines on one asyncio loop. The first item queued while no
batch is being written starts the committer task. It takes what is queued (up
to ``max_batch``), writes it with ``write_batch`` on a ``pool`` thread (the
database call blocks; the loop must not), answers every caller of that batch,
and goes on while anything is queued. A caller therefore waits for at most the
batch in progress and the one that carries its own item. Each item keeps its
own answer: ``write_batch`` returns one per item, and an answer that is an
exception is raised in that caller alone; an exception from ``write_batch``
itself is every caller's answer.

``linger_s``: how long a batch waits for more items once items are seen to come
together (the last batch, or the queue, held more than one), as PostgreSQL's
commit_delay does with commit_siblings: a lone caller never waits.

States of a queued item: queued -> in the batch being written -> answered (or
cancelled by its caller: the write still happens, its answer is dropped; or
cancelled with the committer, when the loop is stopping: nobody writes it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Generic, TypeVar

from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """``pool`` runs the batches (the loop's default executor if None). ``name`` names the committer task,
    which reports through ``lifeline`` if it dies (it ends, as it should, whenever the queue is empty)."""

    def __init__(
        self,
        write_batch: Callable[[list[T]], Sequence[R | BaseException]],
        *,
        max_batch: int = 256,
        linger_s: float = 0.0,
        pool: Executor | None = None,
        name: str = "group-commit",
        lifeline: Lifeline = UNWATCHED,
    ):
        self._write_batch = write_batch
        self._name = name
        self._lifeline = lifeline
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._pool = pool
        self._queue: list[tuple[T, asyncio.Future]] = []
        self._committer: asyncio.Task | None = None
        self._full: asyncio.Future | None = None  # set when a lingering batch is full
        self._together = False  # the last batch held more than one item

    @property
    def lingering(self) -> bool:
        """A batch is waiting for more items (``linger_s``) before it is written."""
        return self._full is not None

    @property
    def queued(self) -> int:
        """Items waiting for a batch that will carry them (not the one being written)."""
        return len(self._queue)

    async def submit(self, item: T) -> R:
        """Write ``item`` with whatever else is queued: its answer, or its error raised."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self._queue.append((item, answer))
        if self._committer is None:
            self._committer = self._lifeline.task(loop, self._commit_queued(), self._name, may_end=True)
        elif self._full is not None and len(self._queue) >= self._max_batch and not self._full.done():
            self._full.set_result(None)
        return await answer

    async def _commit_queued(self) -> None:
        loop = asyncio.get_running_loop()
        batch: list[tuple[T, asyncio.Future]] = []
        try:
            while self._queue:
                crashpoints.fail_worker(self._name)
                if self._linger_s > 0 and (self._together or len(self._queue) > 1):
                    await self._linger(loop)
                batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
                try:
                    answers = await loop.run_in_executor(self._pool, self._write_batch, [i for i, _ in batch])
                except Exception as e:  # noqa: BLE001 - the transaction failed: every item in it gets the error
                    answers = [e] * len(batch)
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future.done():  # its caller went away
                        continue
                    if isinstance(answer, BaseException):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
                self._together, batch = len(batch) > 1, []
        finally:
            self._committer = None
            for _, future in batch + self._queue:  # cancelled (the loop is stopping): nobody writes these
                future.cancel()
            self._queue = []

    async def _linger(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait ``linger_s`` for more items, or until a full batch is queued."""
        if len(self._queue) >= self._max_batch:
            return
        self._full = loop.create_future()
        timer = loop.call_later(self._linger_s, _settle, self._full)
        try:
            await self._full
        finally:
            timer.cancel()
            self._full = None


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
