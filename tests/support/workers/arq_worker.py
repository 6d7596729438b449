"""An arq worker for the dispatch tests: ``arq tests.support.workers.arq_worker.WorkerSettings``.

Its Redis and queue come from the environment (arq reads WorkerSettings at
import): ``SHARDCRON_TEST_REDIS_URL`` and ``SHARDCRON_TEST_ARQ_QUEUE``.
``record(key, tick=...)`` pushes one JSON line onto the Redis list ``key``: the
arq job id and the tick shardcron passed as ``tick`` (slot, attempt, fence).

``keep_result = 0``: no result is kept, so arq's own job-id dedupe ends the
moment a job finishes, and a later retry of the slot is stopped by shardcron's
marker alone: the tests see that guard work, not arq's.
"""

from __future__ import annotations

import json
import os

from arq.connections import RedisSettings


async def record(ctx, key: str, tick: dict | None = None) -> None:
    await ctx["redis"].rpush(
        key, json.dumps({"queue_job_id": ctx["job_id"], "job_try": ctx["job_try"], **(tick or {})})
    )


class WorkerSettings:
    functions = [record]
    redis_settings = RedisSettings.from_dsn(os.environ.get("SHARDCRON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    queue_name = os.environ.get("SHARDCRON_TEST_ARQ_QUEUE", "arq:queue")
    keep_result = 0
    poll_delay = 0.1
    health_check_interval = 3600  # no health-check key to clean up after a test
