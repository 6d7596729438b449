"""``--dispatcher-priority realtime`` on a real node process (real etcd, SQLite): the dispatcher thread, and
only it, runs under SCHED_FIFO while ticks run; a node that may not use SCHED_FIFO (no CAP_SYS_NICE) refuses
to start with an error naming what it needs. CI runs as root, as SCHED_FIFO needs."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import select

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.store.engine import make_engine
from shardcron.store.schema import ticks
from tests.integration.node.test_cluster import write_jobs

pytestmark = pytest.mark.cluster
NO_SYS_NICE = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"]  # exec'd without CAP_SYS_NICE


def threads_by_policy(pid: int) -> dict[int, int]:
    """Thread id -> scheduling policy, for every thread of ``pid``."""
    policies = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            policies[int(tid)] = os.sched_getscheduler(int(tid))
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return policies


def succeeded(db: str, job_id: str) -> int:
    engine = make_engine(db)
    try:
        with engine.connect() as c:
            return len(
                c.execute(
                    select(ticks.c.scheduled_at_ms).where(ticks.c.job_id == job_id, ticks.c.status == "succeeded")
                ).all()
            )
    finally:
        engine.dispose()


@pytest.fixture
def one_node(etcd_server, etcd_prefix, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("SCHED_FIFO needs CAP_SYS_NICE: run as root (CI does)")
    db = f"sqlite:///{tmp_path}/store.db"
    jobs = write_jobs(tmp_path / "jobs.toml", [{"id": "beat", "every": "1s", "executor": {"kind": "noop"}}])
    c = Cluster(
        etcd_server.endpoints,
        db,
        etcd_prefix,
        1,
        4,
        str(tmp_path),
        extra_args=["--jobs", jobs, "--dispatcher-priority", "realtime"],
    )
    yield c, db
    c.stop_all()


def test_the_dispatcher_alone_runs_under_sched_fifo_and_ticks_run(one_node):
    c, db = one_node
    node = c.add("n0")
    c.wait_all_led(60)
    wait_until(
        lambda: list(threads_by_policy(node.proc.pid).values()).count(os.SCHED_FIFO) == 1,
        30,
        what="one thread of the node under SCHED_FIFO",
    )
    policies = threads_by_policy(node.proc.pid)
    assert len(policies) > 5 and list(policies.values()).count(os.SCHED_OTHER) == len(policies) - 1, policies
    fifo = next(t for t, p in policies.items() if p == os.SCHED_FIFO)
    assert os.sched_getparam(fifo).sched_priority == 1, "the lowest real-time priority"
    wait_until(lambda: succeeded(db, "beat") >= 3, 60, what="three ticks of 'beat'")
    assert "Traceback" not in node.log_text(), node.log_text()[-4000:]


def test_without_cap_sys_nice_the_node_refuses_to_start_and_names_what_it_needs(one_node):
    c, _ = one_node
    node = c.add("n0", wrapper=NO_SYS_NICE)
    wait_until(lambda: not node.alive(), 60, what="the node without CAP_SYS_NICE to exit")
    log = node.log_text()
    assert node.proc.returncode not in (0, None)
    assert "--dispatcher-priority realtime" in log and "CAP_SYS_NICE" in log, log[-2000:]
    assert "Traceback" not in log, log[-4000:]
    assert "session started" not in log and "API listening" not in log, "refused before it joined: " + log[-2000:]
