"""A store to prune: the rows the retention tests of the store (tests/integration/store) and of the CLI
(tests/integration/cli) start from. The ``led`` fixture is registered in ``tests/integration/conftest.py``."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from shardcron.model import ExecutionResult, SlotRef, TickStatus
from shardcron.spec.job import job_from_dict
from shardcron.store import ensure_shards, raise_fence
from shardcron.store.jobs import put_job
from shardcron.store.tick_reads import list_ticks
from shardcron.store.tick_results import record_results
from shardcron.store.ticks import SlotClaim, claim_ticks

MIN = 60_000
FENCE = 100  # the fence shard 0 is led under (test_store.F1)
NODE = "node-a"


def slots(engine: Engine, job_id: str) -> list[int]:
    """The minutes of ``job_id``'s stored ticks, oldest first."""
    return sorted(t.scheduled_at_ms // MIN for t in list_ticks(engine, job_id, limit=100))


def fill_led_shard(engine: Engine) -> Engine:
    """Shard 0 led under FENCE, with job "j" (10 finished ticks, the 4th still running) and "old" (one finished
    tick)."""
    ensure_shards(engine, 2)
    raise_fence(engine, 0, FENCE, NODE, 1_000)
    for job_id in ("j", "old"):
        put_job(engine, job_from_dict({"id": job_id, "every": "1m"}), shard=0, fence=FENCE, node_id=NODE, now_ms=1)
    claims = [SlotClaim("j", MIN * i) for i in range(1, 11)] + [SlotClaim("old", MIN)]
    claim_ticks(engine, claims, shard=0, fence=FENCE, node_id=NODE, now_ms=1)
    done = ExecutionResult(True, 1, 2)
    record_results(
        engine,
        [
            (
                SlotRef(c.job_id, c.scheduled_at_ms),
                1,
                done,
                TickStatus.RUNNING if c.scheduled_at_ms == 4 * MIN else TickStatus.SUCCEEDED,
            )
            for c in claims
        ],
        shard=0,
        fence=FENCE,
    )
    return engine
