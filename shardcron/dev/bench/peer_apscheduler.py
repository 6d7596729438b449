"""The same workload on APScheduler 3.x, in this process: M interval jobs, no-op, for N seconds.

APScheduler comes in through the optional ``bench`` extra and is never needed
at run time. Lateness is the job's start minus its scheduled run time, as
APScheduler reports it; a missed run is one that never started.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from shardcron.dev.bench.harness import percentile
from shardcron.errors import ShardcronError


def noop() -> None:
    """The job every peer run executes."""


def run(jobs: int, seconds: int, store: str = "memory", workdir: str = "/tmp") -> dict:
    try:
        from apscheduler.executors.pool import ThreadPoolExecutor  # the bench extra
        from apscheduler.jobstores.memory import MemoryJobStore  # the bench extra
        from apscheduler.schedulers.background import BackgroundScheduler  # the bench extra
    except ImportError:
        raise ShardcronError("--peer apscheduler needs APScheduler: pip install 'shardcron[bench]'") from None

    lateness: list[float] = []
    lock = threading.Lock()
    start = datetime.fromtimestamp(int(time.time()) + 3, UTC)
    window_end = start + timedelta(seconds=seconds)

    if store == "sqlite":
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # the bench extra

        jobstore = SQLAlchemyJobStore(url=f"sqlite:///{workdir}/apscheduler-{time.time_ns()}.db")
    else:
        jobstore = MemoryJobStore()
    sched = BackgroundScheduler(
        jobstores={"default": jobstore},
        executors={"default": ThreadPoolExecutor(20)},
        timezone=UTC,
        job_defaults={"coalesce": False, "max_instances": 3, "misfire_grace_time": 1},
    )

    from apscheduler.events import EVENT_JOB_EXECUTED, EVENT_JOB_MISSED  # the bench extra

    missed = [0]

    def listener(ev) -> None:
        if ev.scheduled_run_time < start or ev.scheduled_run_time >= window_end:
            return
        with lock:
            if ev.code == EVENT_JOB_MISSED:
                missed[0] += 1
            else:
                lateness.append((datetime.now(UTC) - ev.scheduled_run_time).total_seconds() * 1000)

    sched.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_MISSED)
    for i in range(jobs):
        # By textual reference: a persistent job store pickles the job, and a closure cannot be.
        sched.add_job(f"{__name__}:noop", "interval", seconds=1, start_date=start, id=f"j{i}")
    sched.start()
    try:
        while datetime.now(UTC) < window_end + timedelta(seconds=3):
            time.sleep(0.2)  # the peer runs on its own; nothing to wait on but the clock
    finally:
        sched.shutdown(wait=False)
    with lock:
        # The listener runs after the job; its timestamp bounds the start from above.
        values = sorted(lateness)
    expected = jobs * seconds
    return {
        "scenario": "precision",
        "peer": f"apscheduler ({store} store)",
        "jobs": jobs,
        "seconds": seconds,
        "expected": expected,
        "recorded": len(values),
        "missed": expected - len(values),
        "lateness_ms": {
            "p50": percentile(values, 50),
            "p99": percentile(values, 99),
            "p99.9": percentile(values, 99.9),
            "max": values[-1] if values else None,
        },
    }
