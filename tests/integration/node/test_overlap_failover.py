"""Overlap means started: after a SIGKILL failover, no live slot is skipped behind an unstarted catch-up.

Twenty celery jobs (``every 1s``, ``overlap = "skip"``, catch-up ``all``) publish to the real Redis
through a proxy that holds each request for ``BROKER_DELAY_S``, so every broker call takes that
long at least. Their only node is killed with SIGKILL, and the successor starts ``DEAD_S`` later:
it owes each job at least that many missed slots. Each of them takes a broker call, and they go
one at a time (a catch-up slot waits for the job's previous run), so the catch-up lasts longer
than a second and is certain to spill past the next live slot: that live slot must wait behind
the unstarted catch-up, and be judged only when it is its turn. Every overlap skip must then
have an earlier run of the job that had started by the skip's decision and had not finished,
and none may sit in front of an earlier slot that had not started yet; the audit's rule
(``audit.find_false_overlap``) finds nothing.
"""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from shardcron.audit import find_false_overlap, is_overlap_skip
from shardcron.dev.testing.cluster import wait_until
from shardcron.model import TickStatus
from shardcron.store.engine import make_engine
from shardcron.store.tick_reads import ticks_between
from tests.integration.node.test_cluster import write_jobs
from tests.support.clusters import TTL
from tests.support.slow_proxy import slow_proxy

pytestmark = pytest.mark.cluster

JOBS = 20
SHARDS = 4
BROKER_DELAY_S = 0.2  # per request to Redis: a celery publish takes at least this long
DEAD_S = 6  # from the kill to the successor's start: (DEAD_S - 1) * BROKER_DELAY_S > 1 s of catch-up
REDIS_DB = 14
UNFINISHED = frozenset({TickStatus.CLAIMED, TickStatus.RUNNING})


def test_no_live_slot_is_skipped_behind_an_unstarted_catch_up(make_cluster, fresh_db_url, tmp_path):
    db = fresh_db_url("postgresql")
    queue = f"sc-overlap-{uuid.uuid4().hex[:12]}"
    ids = [f"cel-ovl-{i:02d}" for i in range(JOBS)]
    with slow_proxy("127.0.0.1", 6379, BROKER_DELAY_S) as port:
        jobs = write_jobs(
            tmp_path / "jobs.toml",
            [
                {
                    "id": job_id,
                    "every": "1s",
                    "overlap": "skip",
                    "catchup": "all",
                    "catchup_window": "1m",
                    "executor": {
                        "kind": "celery",
                        "url": f"redis://127.0.0.1:{port}/{REDIS_DB}",
                        "task": "overlap.noop",
                        "queue": queue,
                    },
                }
                for job_id in ids
            ],
        )
        c = make_cluster(db, shards=SHARDS, extra_args=["--jobs", jobs])
        victim, survivor, theirs = "n0", "n1", ids
        c.add(victim)
        c.wait_all_led(60, by={victim})
        engine = make_engine(db)
        try:

            def rows():
                return [t for t in ticks_between(engine, 0, 2**62) if t.job_id in theirs]

            wait_until(
                lambda: all(
                    sum(1 for t in rows() if t.job_id == j and t.status is TickStatus.SUCCEEDED) >= 2 for j in theirs
                ),
                60,
                what="the victim to run each of its jobs twice",
            )
            c.nodes[victim].kill()
            killed_at = time.time()
            # The outage itself: nobody leads for DEAD_S, and every job misses as many slots.
            wait_until(
                lambda: not c.nodes[victim].alive() and time.time() - killed_at >= DEAD_S,
                DEAD_S + 30,
                what="the outage to last its seconds",
            )
            c.add(survivor)
            wait_until(
                lambda: all(n == survivor for n in c.leaders().values()),
                2 * TTL + 20,
                what="the survivor to lead every shard",
            )
            took_over_ms = time.time() * 1000
            # Well past the catch-up: each job has a run of its own live schedule 8 s after the takeover.
            settled_ms = took_over_ms + 8000
            wait_until(
                lambda: all(
                    any(
                        t.job_id == j and t.scheduled_at_ms >= settled_ms and t.status is TickStatus.SUCCEEDED
                        for t in rows()
                    )
                    for j in theirs
                ),
                60,
                what="the survivor's live runs after the catch-up",
            )
            seen = [t for t in rows() if t.scheduled_at_ms < settled_ms]
        finally:
            engine.dispose()
            r = redis.Redis(db=REDIS_DB)
            r.delete(queue)
            r.close()

    assert not [t for t in seen if t.status in UNFINISHED], "every slot before the cut settled"
    by_job: dict[str, list] = {}
    for t in seen:
        by_job.setdefault(t.job_id, []).append(t)
    survivors = [t for t in seen if t.node_id == survivor]
    # A catch-up slot was claimed after it was due; a live one a lookahead before.
    catch_ups = [
        t
        for t in survivors
        if t.claimed_at_ms is not None and t.claimed_at_ms > t.scheduled_at_ms and t.started_at_ms is not None
    ]
    live = [t for t in survivors if t.claimed_at_ms is not None and t.claimed_at_ms <= t.scheduled_at_ms]
    spilled = [
        (cu.job_id, cu.scheduled_at_ms, lv.scheduled_at_ms)
        for cu in catch_ups
        for lv in live
        if lv.job_id == cu.job_id and lv.scheduled_at_ms > cu.scheduled_at_ms and cu.started_at_ms > lv.scheduled_at_ms
    ]
    assert spilled, "the test needs a catch-up that started after a live slot of its job came due"

    behind_unstarted = []
    for s in (t for t in survivors if is_overlap_skip(t)):
        decided = s.finished_at_ms
        for r in by_job[s.job_id]:
            if (
                r.scheduled_at_ms < s.scheduled_at_ms
                and r.status is not TickStatus.SKIPPED
                and (r.started_at_ms is None or r.started_at_ms > decided)
            ):
                behind_unstarted.append(
                    f"{s.job_id}: slot {s.scheduled_at_ms} skipped at {decided}, before slot "
                    f"{r.scheduled_at_ms} started (at {r.started_at_ms})"
                )
    assert not behind_unstarted, "\n".join(behind_unstarted)
    assert find_false_overlap(seen) == []
