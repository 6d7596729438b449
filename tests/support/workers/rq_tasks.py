"""An RQ task for the dispatch tests: records the job it ran as, run by a real ``rq worker``.

``record(key)`` pushes one JSON line onto the Redis list ``key``: the RQ job id
and the tick shardcron put in ``job.meta["shardcron"]`` (slot, attempt, fence),
so a test can check that every slot arrived exactly once and from which leader.
"""

from __future__ import annotations

import json

from rq import get_current_job


def record(key: str) -> None:
    job = get_current_job()
    tick = job.meta.get("shardcron", {})
    job.connection.rpush(key, json.dumps({"queue_job_id": job.id, **tick}))
