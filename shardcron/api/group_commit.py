"""Group commit of PutJob calls: concurrent calls that reach one leader share one transaction,
written with ``store.jobs.put_each``. Each put keeps its own answer: a version conflict or a
stale fence fails that call alone.

``put_async`` (a call's coroutine, on the API server's loop): the calls queue on the loop,
and one pool thread writes each batch, tells the scheduler (``written``) and answers the
whole batch with one wake-up of the loop. A call costs no thread of its own: under load, a
leader's thread switches per PutJob fell from about 30 (callers' threads taking turns, as
``shardcron.group_commit`` does) to 21 (``shardcron bench submit``).

States of a queued call (``put_async``): queued -> in the batch being written -> answered
(or cancelled by its caller: the write still happens, its answer is dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor

from sqlalchemy import Engine

from shardcron import clock
from shardcron.model import Job
from shardcron.store import jobs as job_store

MAX_BATCH = 256
# How long a batch waits for more calls once calls are seen to come together (the last batch
# or the queue held more than one), as PostgreSQL's commit_delay does with commit_siblings: a
# lone caller never waits. With 16 callers it makes batches of about six instead of one or two,
# and the transaction's share of a leader's CPU fell from about 0.2 to 0.07 ms per call (SQLite).
LINGER_S = 0.002


class GroupCommit:
    def __init__(self, engine: Engine, node_id: str, *, pool: Executor | None = None,
                 written: Callable[[int, Job], None] | None = None):
        """``pool`` runs ``put_async``'s batches (the loop's default executor if None); ``written(shard,
        job)`` is called for each job stored by ``put_async``, in the batch's thread, before it is answered."""
        self.engine = engine
        self.node_id = node_id
        self._pool = pool
        self._written = written
        self._queue: list[tuple[job_store.Put, asyncio.Future]] = []
        self._committer: asyncio.Task | None = None
        self._full: asyncio.Future | None = None  # set when a lingering batch is full
        self._together = False  # the last batch held more than one call

    async def put_async(self, put: job_store.Put) -> Job:
        """Write ``put`` with whatever else is queued: the stored job (``written`` already told),
        or the put's error raised."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self._queue.append((put, answer))
        if self._committer is None:
            self._committer = loop.create_task(self._commit_queued())
        elif self._full is not None and len(self._queue) >= MAX_BATCH and not self._full.done():
            self._full.set_result(None)
        return await answer

    @property
    def lingering(self) -> bool:
        """A batch is waiting for more calls (``LINGER_S``) before it is written."""
        return self._full is not None

    @property
    def queued(self) -> int:
        return len(self._queue)

    async def _commit_queued(self) -> None:
        """One batch at a time, until nothing is queued (as ``shardcron.group_commit`` does)."""
        loop = asyncio.get_running_loop()
        batch: list[tuple[job_store.Put, asyncio.Future]] = []
        try:
            while self._queue:
                if self._together or len(self._queue) > 1:
                    await self._linger(loop)
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                try:
                    answers = await loop.run_in_executor(self._pool, self._write_and_tell, [p for p, _ in batch])
                except Exception as e:  # noqa: BLE001 - the transaction failed: every put in it gets the error
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
            for _, future in batch + self._queue:  # cancelled (the server is stopping): nobody writes these
                future.cancel()
            self._queue = []

    async def _linger(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait ``LINGER_S`` for more calls, or until a full batch is queued."""
        if len(self._queue) >= MAX_BATCH:
            return
        self._full = loop.create_future()
        timer = loop.call_later(LINGER_S, _settle, self._full)
        try:
            await self._full
        finally:
            timer.cancel()
            self._full = None

    def _write_and_tell(self, puts: list[job_store.Put]) -> list:
        answers = self._write(puts)
        if self._written is not None:
            for i, (p, answer) in enumerate(zip(puts, answers, strict=True)):
                if isinstance(answer, Job):
                    try:
                        self._written(p.shard, answer)
                    except Exception as e:  # noqa: BLE001 - that call fails, as it would have alone
                        answers[i] = e
        return answers

    def _write(self, puts: list[job_store.Put]) -> list:
        return job_store.put_each(self.engine, puts, node_id=self.node_id, now_ms=clock.wall_ms())


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
