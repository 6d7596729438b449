"""The API over a real cluster (node processes, etcd, SQLite and PostgreSQL): every call is
served by the leader of its job's shard, whichever node receives it."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from shardcron import Client
from shardcron.client.errors import Conflict, InvalidRequest, NotFound, Unavailable
from shardcron.dev.testing.cluster import wait_until
from shardcron.model import TickStatus
from shardcron.sharding import shard_for
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.schema import fence_log, jobs, ticks
from tests.support.clusters import TTL

pytestmark = pytest.mark.cluster

CLUSTER_DBS = [k for k in ("sqlite", "postgresql") if k in os.environ.get("SHARDCRON_TEST_DBS", "sqlite,postgresql")]


def _comparable(m: dict) -> dict:
    return {k: v for k, v in m.items() if k != "revision"}


def noop(job_id: str, every: str = "1s", **kw):
    return job_from_dict({"id": job_id, "every": every, "executor": {"kind": "noop"}, **kw})


@pytest.mark.parametrize("kind", CLUSTER_DBS)
def test_jobs_submitted_through_one_node_are_written_and_run_by_their_shard_leaders(make_cluster, fresh_db_url, kind):
    c = make_cluster(fresh_db_url(kind), shards=8)
    for i in range(3):
        c.add(f"n{i}")
    leaders = c.wait_balanced({"n0", "n1", "n2"}, timeout_s=60)
    fences = {r["shard"]: r["fence"] for r in c.shard_map()["shards"]}
    ids = [f"job-{i:03d}" for i in range(200)]

    with Client(c.nodes["n0"].address) as client:  # one node only
        watch = client.watch_ticks()  # every job, fanned in from every node
        seen_nodes: set[str] = set()

        def consume():
            for t in watch:
                seen_nodes.add(t.node_id)

        threading.Thread(target=consume, daemon=True).start()
        for job_id in ids[:150]:
            assert client.put_job(noop(job_id, labels={"set": "api"})).version == 1
        results = client.put_jobs([noop(job_id, labels={"set": "api"}) for job_id in ids[150:]])
        assert all(r.ok for r in results), [r for r in results if not r.ok][:3]
        assert [j.id for j in client.list_jobs(labels={"set": "api"})] == ids
        wait_until(lambda: seen_nodes >= {"n0", "n1", "n2"}, 30, what="the fanned-in watch to hear every node")
        watch.cancel()

    engine = make_engine(c.db)
    try:

        def every_job_ran():
            with engine.connect() as conn:
                done = {
                    r[0]
                    for r in conn.execute(
                        select(ticks.c.job_id).where(ticks.c.status == TickStatus.SUCCEEDED.value).distinct()
                    )
                }
            return done >= set(ids)

        wait_until(every_job_ran, 60, 0.2, what="a finished tick of every job")
        # Normally no shard moves during the test; if one did (a loaded machine can cost a node its
        # lease), the fence log still says who led each shard under each fence.
        stable = c.leaders() == leaders
        with engine.connect() as conn:
            rows = {r.id: r for r in conn.execute(select(jobs.c.id, jobs.c.shard, jobs.c.fence, jobs.c.node_id))}
            tick_rows = conn.execute(
                select(ticks.c.job_id, ticks.c.shard, ticks.c.fence, ticks.c.node_id).where(ticks.c.job_id.in_(ids))
            ).all()
            raised_by = {(r.shard, r.fence): r.node_id for r in conn.execute(select(fence_log))}
        for job_id in ids:
            shard = shard_for(job_id, 8)
            row = rows[job_id]
            assert row.shard == shard, job_id
            assert raised_by[(shard, row.fence)] == row.node_id, f"{job_id} was written by its shard's leader"
            if stable:
                assert (row.fence, row.node_id) == (fences[shard], leaders[shard]), job_id
        for t in tick_rows:
            shard = shard_for(t.job_id, 8)
            assert t.shard == shard
            assert t.node_id == raised_by[(shard, t.fence)], "each tick is recorded by the leader of its fence"
            if stable:
                assert (t.fence, t.node_id) == (fences[shard], leaders[shard]), t
    finally:
        engine.dispose()


def test_a_node_that_leads_nothing_forwards_every_call(make_cluster, fresh_db_url):
    c = make_cluster(fresh_db_url("sqlite"), shards=1)
    c.add("n0")
    c.wait_all_led(60, by={"n0"})
    c.add("n1")
    wait_until(lambda: {n["node"] for n in c.shard_map()["nodes"]} == {"n0", "n1"}, 30, what="n1 to join")
    assert c.leaders() == {0: "n0"}

    with Client(c.nodes["n1"].address, timeout_s=20) as client:
        # GetShards is the map `shardcron shards` prints (read from etcd directly there).
        wait_until(lambda: _comparable(client.shards()) == _comparable(c.shard_map()), 10, what="the same map")
        job = client.put_job(noop("fwd", every="1h", labels={"team": "a"}))
        assert job.version == 1
        assert client.get_job("fwd") == job
        assert client.pause_job("fwd").paused and not client.resume_job("fwd").paused

        watch = client.watch_ticks("fwd")  # one job: relayed from its shard's leader
        streamed = []

        def consume():
            for t in watch:
                streamed.append(t)
                return

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        # Trigger until the stream shows one: the relay may reach the leader after the first trigger.
        slots = set()
        wait_until(
            lambda: slots.add(client.trigger_job("fwd").scheduled_at_ms) or streamed,
            20,
            1.0,
            what="a triggered tick on the relayed stream",
        )
        reader.join(5)
        watch.cancel()
        assert streamed[0].scheduled_at_ms in slots and streamed[0].node_id == "n0"
        ticks_ = wait_until(lambda: [t for t in client.list_ticks("fwd") if t.status.is_final], 20, what="the tick")
        assert ticks_[0].manual and ticks_[0].node_id == "n0"

        # The leader's statuses come back as they are.
        with pytest.raises(Conflict):
            client.put_job(noop("fwd", every="1h"), expected_version=0)
        with pytest.raises(NotFound):
            client.pause_job("nobody")
        with pytest.raises(InvalidRequest):
            client.put_job(noop("fwd", labels={"k": "v"}), expected_version=-1)

        # Concurrent forwarded calls (the leader writes them in shared transactions: group
        # commit) each keep their own answer: one create per id, the rest conflicts.
        def create(i: int):
            try:
                return client.put_job(noop(f"many-{i % 10}", every="1h"), expected_version=0)
            except Conflict as e:
                return e

        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(create, range(40)))
        created = [a for a in answers if not isinstance(a, Exception)]
        assert sorted(a.id for a in created) == [f"many-{i}" for i in range(10)]
        assert {a.version for a in created} == {1}
        assert sum(isinstance(a, Conflict) for a in answers) == 30

        client.delete_job("fwd")
        with pytest.raises(NotFound):
            client.get_job("fwd")

    engine = make_engine(c.db)
    try:
        with engine.connect() as conn:
            node_ids = {r[0] for r in conn.execute(select(fence_log.c.node_id))}
        assert node_ids == {"n0"}, "n1 never led, so every write above was made by n0"
    finally:
        engine.dispose()


def test_unavailable_names_the_shard_while_it_has_no_leader_then_calls_succeed(make_cluster, fresh_db_url):
    c = make_cluster(fresh_db_url("sqlite"), shards=1)
    c.add("n0")
    c.wait_all_led(60, by={"n0"})
    c.add("n1")
    wait_until(lambda: {n["node"] for n in c.shard_map()["nodes"]} == {"n0", "n1"}, 30, what="n1 to join")
    survivor = c.nodes["n1"].address

    with Client(survivor) as client:
        client.put_job(noop("before", every="1h"))
        c.nodes["n0"].kill()  # SIGKILL: its election key stays until its lease expires (about TTL)

        patient: dict = {}

        def patient_call():  # a call with a long deadline rides the failover out
            t0 = time.monotonic()
            try:
                patient["job"] = client.put_job(noop("patient", every="1h"), timeout_s=30)
            except Exception as e:  # noqa: BLE001 - reported below
                patient["error"] = e
            patient["took"] = time.monotonic() - t0

        rider = threading.Thread(target=patient_call)
        rider.start()

        t0 = time.monotonic()
        with pytest.raises(Unavailable) as e:
            client.put_job(noop("hasty", every="1h"), timeout_s=1.0)
        took = time.monotonic() - t0
        assert took < 1.5, f"UNAVAILABLE came after {took:.2f}s, past the 1 s deadline"
        assert "shard 0" in str(e.value) and "retried for" in str(e.value), str(e.value)

        wait_until(lambda: c.leaders()[0] == "n1", 2 * TTL + 20, what="n1 to take shard 0 over")
        assert client.put_job(noop("hasty", every="1h"), timeout_s=10).version == 1
        rider.join(40)
        assert "error" not in patient, patient
        assert patient["job"].version == 1 and patient["took"] > 1.0
