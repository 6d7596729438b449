"""PutJob calls that reach one leader share one transaction: the PutJob user of ``runtime.group_commit``.

Each batch is written with ``store.jobs.put_each`` on a pool thread, which then
tells the scheduler (``written``) about every stored job before the batch is
answered. Each put keeps its own answer: a version conflict, a stale fence or
a scheduler that refuses the job fails that call alone. A call costs no thread
of its own: under load, a leader's thread switches per PutJob fell from about
30 (callers' threads taking turns) to 21 (``shardcron bench submit``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor

from sqlalchemy import Engine

from shardcron import clock
from shardcron.model import Job
from shardcron.runtime.group_commit import GroupCommit
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.store import jobs as job_store

MAX_BATCH = 256
# How long a batch waits for more calls once calls are seen to come together (the last batch
# or the queue held more than one), as PostgreSQL's commit_delay does with commit_siblings: a
# lone caller never waits. With 16 callers it makes batches of about six instead of one or two,
# and the transaction's share of a leader's CPU fell from about 0.2 to 0.07 ms per call (SQLite).
LINGER_S = 0.002


class JobPuts(GroupCommit[job_store.Put, Job]):
    """``submit(put)``: the stored job (``written`` already told), or the put's error raised."""

    def __init__(
        self,
        engine: Engine,
        node_id: str,
        *,
        pool: Executor | None = None,
        written: Callable[[int, Job], None] | None = None,
        lifeline: Lifeline = UNWATCHED,
    ):
        """``pool`` runs the batches (the loop's default executor if None); ``written(shard, job)`` is
        called for each job stored, in the batch's thread, before its call is answered."""
        super().__init__(
            self._write_and_tell,
            max_batch=MAX_BATCH,
            linger_s=LINGER_S,
            pool=pool,
            name="putjob-commit",
            lifeline=lifeline,
        )
        self.engine = engine
        self.node_id = node_id
        self._written = written

    def _write_and_tell(self, puts: list[job_store.Put]) -> Sequence[Job | BaseException]:
        answers: list[Job | BaseException] = list(
            job_store.put_each(self.engine, puts, node_id=self.node_id, now_ms=clock.wall_ms())
        )
        if self._written is not None:
            for i, (p, answer) in enumerate(zip(puts, answers, strict=True)):
                if isinstance(answer, Job):
                    try:
                        self._written(p.shard, answer)
                    except Exception as e:  # noqa: BLE001 - that call fails, as it would have alone
                        answers[i] = e
        return answers


__all__ = ["LINGER_S", "MAX_BATCH", "JobPuts"]
