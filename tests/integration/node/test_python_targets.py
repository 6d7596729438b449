"""``--allow-python`` on a real node: a target cannot walk from an allowed module into what it imported.

``tests.support.pytargets`` imports ``os``, as a user's ``myapp`` does; the
node allows that package. ``pytargets:os.spawnl`` with a shell command as its
arguments is refused at PutJob, naming the target; a job row with that
target written straight into the store, past admission, fails its tick with
the same reason right before the call, and no command runs.
"""

from __future__ import annotations

import time

import pytest

from shardcron import Client
from shardcron.client.errors import InvalidRequest
from shardcron.dev.testing.cluster import wait_until
from shardcron.model import TickStatus
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.fences import ensure_shards, raise_fence
from shardcron.store.jobs import put_job
from shardcron.store.migrate import ensure_schema
from shardcron.store.tick_reads import list_ticks

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

TARGET = "tests.support.pytargets:os.spawnl"
REASON = (
    f"{TARGET} is refused: 'os' is a module (os): after the colon a target walks through classes only; "
    "name a module before the colon, as package.module:function"
)


def spawning_job(job_id: str, marker, every: str):
    return job_from_dict(
        {
            "id": job_id,
            "every": every,
            "retry": {"max_attempts": 1},
            "executor": {"kind": "python", "target": TARGET, "args": ["/bin/sh", "sh", "-c", f"touch {marker}"]},
        },
        require_executor=True,
    )


def test_a_target_through_an_imported_module_runs_nothing(fresh_db_url, make_cluster, tmp_path):
    db = fresh_db_url("sqlite")
    marker = tmp_path / "MARKER"
    engine = make_engine(db)
    try:
        # Past admission: the row is written as a leader of shard 0 would, before any node runs.
        ensure_schema(engine, auto_upgrade=True)
        ensure_shards(engine, 1)
        raise_fence(engine, 0, 1, "seeder", int(time.time() * 1000))
        put_job(
            engine,
            spawning_job("stored", marker, "1s"),
            shard=0,
            fence=1,
            node_id="seeder",
            now_ms=int(time.time() * 1000),
        )

        cluster = make_cluster(db, shards=1, extra_args=["--allow-python", "tests.support.pytargets"])
        node = cluster.add("n0")
        cluster.wait_all_led(60, by={"n0"})

        with Client([node.address]) as client, pytest.raises(InvalidRequest) as refused:
            client.put_job(spawning_job("viaapp", marker, "1h"))
        assert f"executor.target: {REASON}" in str(refused.value), str(refused.value)

        def a_failed_tick():
            return next((t for t in list_ticks(engine, "stored", limit=20) if t.status is TickStatus.FAILED), None)

        tick = wait_until(a_failed_tick, 60, 0.2, "the stored job's first tick to fail")
        assert tick.error == REASON, tick
        assert not marker.exists()
    finally:
        engine.dispose()
