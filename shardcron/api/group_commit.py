"""Group commit: concurrent PutJob calls that reach one leader share one transaction.

Each unary PutJob is a fenced transaction, and on PostgreSQL or MariaDB a
commit waits for the log to reach the disk, so sixteen callers writing one
job each would wait for sixteen flushes in turn. Here they wait for about one.

Leader/follower, without a thread of its own: the first caller that finds no
commit in progress becomes the committer. It takes everything queued (up to
MAX_BATCH), writes it with ``store.jobs.put_each``, answers every caller of
that batch, and passes the committer's role to the first caller still
queued. A caller therefore waits for at most the commit in progress and the
one that carries its own put. Each put keeps its own answer: a version
conflict or a stale fence fails that call alone.

States of a waiter: queued -> (committer ->) answered.
"""

from __future__ import annotations

import threading

from sqlalchemy import Engine

from shardcron import clock
from shardcron.model import Job
from shardcron.store import jobs as job_store

MAX_BATCH = 256
_PENDING = object()


class _Waiter:
    __slots__ = ("put", "answer", "commit", "wake")

    def __init__(self, put: job_store.Put):
        self.put = put
        self.answer: object = _PENDING
        self.commit = False  # this caller's thread is to write the next batch
        self.wake = threading.Event()


class GroupCommit:
    def __init__(self, engine: Engine, node_id: str):
        self.engine = engine
        self.node_id = node_id
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._committing = False

    def put(self, put: job_store.Put) -> Job:
        """Write ``put`` (with whatever else is queued); the stored job, or the put's error raised."""
        w = _Waiter(put)
        with self._lock:
            self._queue.append(w)
            if not self._committing:
                self._committing = True
                w.commit = True
                w.wake.set()
        while True:
            w.wake.wait()
            if w.answer is not _PENDING:
                break
            w.wake.clear()
            if w.commit:
                w.commit = False
                self._commit_batch()  # w is first in the queue: the batch answers it
        if isinstance(w.answer, BaseException):
            raise w.answer
        return w.answer  # type: ignore[return-value]

    def _commit_batch(self) -> None:
        with self._lock:
            batch = self._queue[:MAX_BATCH]
            del self._queue[:MAX_BATCH]
        try:
            answers: list = job_store.put_each(self.engine, [w.put for w in batch], node_id=self.node_id,
                                               now_ms=clock.wall_ms())
        except Exception as e:  # noqa: BLE001 - the transaction failed: every put in it gets the error
            answers = [e] * len(batch)
        with self._lock:
            if self._queue:
                nxt = self._queue[0]
                nxt.commit = True
                nxt.wake.set()
            else:
                self._committing = False
        for w, answer in zip(batch, answers, strict=True):
            w.answer = answer
            w.wake.set()
