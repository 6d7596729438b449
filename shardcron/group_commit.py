"""Group commit: concurrent writers that each wait for their own write share one transaction.

On PostgreSQL or MariaDB a commit waits for the log to reach the disk, and on
SQLite every writer of a file takes its turn on one lock, so sixty-four threads
writing one row each would wait for sixty-four commits in turn. Here they wait
for about one. Used for PutJob calls (``api/group_commit.py``) and for the
running mark every tick writes before its executor starts
(``scheduling/marks.py``).

Leader/follower, without a thread of its own: the first caller that finds no
commit in progress becomes the committer. It takes everything queued (up to
``max_batch``), writes it with ``write_batch``, answers every caller of that
batch, and passes the committer's role to the first caller still queued. A
caller therefore waits for at most the commit in progress and the one that
carries its own item. Each item keeps its own answer: ``write_batch`` returns
one per item, and an answer that is an exception is raised in that caller
alone; an exception from ``write_batch`` itself is every caller's answer.

States of a waiter: queued -> (committer ->) answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_PENDING = object()


class _Waiter:
    __slots__ = ("item", "answer", "commit", "wake")

    def __init__(self, item):
        self.item = item
        self.answer: object = _PENDING
        self.commit = False  # this caller's thread is to write the next batch
        self.wake = threading.Event()


class GroupCommit(Generic[T, R]):
    def __init__(self, write_batch: Callable[[list[T]], Sequence[R | BaseException]], *, max_batch: int = 256):
        self._write_batch = write_batch
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._committing = False

    @property
    def queued(self) -> int:
        """Callers waiting for a commit that will carry their item (not the one in progress)."""
        with self._lock:
            return len(self._queue)

    def submit(self, item: T) -> R:
        """Write ``item`` (with whatever else is queued); its answer, or its error raised."""
        w = _Waiter(item)
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
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        try:
            answers: Sequence = self._write_batch([w.item for w in batch])
        except Exception as e:  # noqa: BLE001 - the transaction failed: every item in it gets the error
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
