"""Group commit of PutJob calls: concurrent calls that reach one leader share one transaction
(``shardcron.group_commit``), written with ``store.jobs.put_each``. Each put keeps its own
answer: a version conflict or a stale fence fails that call alone."""

from __future__ import annotations

from sqlalchemy import Engine

from shardcron import clock
from shardcron.group_commit import GroupCommit as _Batches
from shardcron.model import Job
from shardcron.store import jobs as job_store

MAX_BATCH = 256


class GroupCommit:
    def __init__(self, engine: Engine, node_id: str):
        self.engine = engine
        self.node_id = node_id
        self._batches: _Batches[job_store.Put, Job] = _Batches(self._write, max_batch=MAX_BATCH)

    def put(self, put: job_store.Put) -> Job:
        """Write ``put`` (with whatever else is queued); the stored job, or the put's error raised."""
        return self._batches.submit(put)

    @property
    def queued(self) -> int:
        return self._batches.queued

    def _write(self, puts: list[job_store.Put]) -> list:
        return job_store.put_each(self.engine, puts, node_id=self.node_id, now_ms=clock.wall_ms())
