"""A lost lease reaches the work in flight as one event: the session's ``done``, through the shard's cancel.

A real etcd, a real session, and real attempts (a Python call, a shell command)
waiting in their executors; nobody polls. Someone revokes the lease: the
session's next renewal hears TTL<=0 and sets ``done``, which sets the shard's
cancel, which wakes each attempt's wait.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from shardcron.coordination.etcd import Etcd
from shardcron.coordination.session import Session
from shardcron.dev.testing.cluster import wait_until
from shardcron.executors.python import PythonExecutor
from shardcron.executors.shell import ShellExecutor
from shardcron.leader.shard_cancel import StopOrLeaseLost
from shardcron.model import ExecutorKind, ExecutorSpec, PythonSpec, ShellSpec, TickContext
from shardcron.runtime.latch import Latch
from tests.support import pyjobs
from tests.support.cancels import MOST_CHECKS, WAITED_S, CountingCancel

pytestmark = pytest.mark.timeout(120)

CTX = TickContext(job_id="job-l", scheduled_at_ms=1_767_225_605_000, attempt=1, fence=7, shard=0, node_id="node-a")


@pytest.fixture
def etcd(etcd_server):
    client = Etcd(etcd_server.endpoints, timeout_s=3.0)
    yield client
    client.close()


def test_leaderships_that_end_leave_no_callback_on_the_session(etcd):
    s = Session(etcd, 5)
    try:
        for _ in range(50):  # shards won and handed over, one after another, in one session
            stop = Latch()
            StopOrLeaseLost(stop, s)
            stop.set()
        assert s.done.listeners == 0
        stop = Latch()
        StopOrLeaseLost(stop, s)
        assert s.done.listeners == 1, "a leadership still going holds one callback on the session"
        stop.set()
        assert s.done.listeners == 0
    finally:
        s.close()


def test_attempts_in_flight_are_cancelled_when_the_session_loses_its_lease(etcd, tmp_path):
    s = Session(etcd, 3)
    cancel = CountingCancel(StopOrLeaseLost(Latch(), s))
    name = uuid.uuid4().hex
    python = ExecutorSpec(
        ExecutorKind.PYTHON, python=PythonSpec(target="tests.support.pyjobs:cooperative", args=(name,), kwargs={})
    )
    started = tmp_path / "started"
    shell = ExecutorSpec(ExecutorKind.SHELL, shell=ShellSpec(f"touch {started}; sleep 60"))
    try:
        with ThreadPoolExecutor(2) as pool:
            in_python = pool.submit(PythonExecutor(None, ("tests.support",)).run, python, CTX, 60.0, cancel)
            in_shell = pool.submit(ShellExecutor().run, shell, CTX, 60.0, cancel)
            wait_until(lambda: pyjobs.entered(name).is_set() and started.exists(), 30, what="both attempts to run")
            assert cancel.listeners == 2, "each attempt waits on the shard's cancel"
            # A deliberate window, not a wait: had the attempts polled their cancel, they would ask it too often in it.
            time.sleep(WAITED_S)
            etcd.revoke(s.lease_id)  # someone else revokes the lease: the next renewal hears TTL<=0
            results = [in_python.result(timeout=30), in_shell.result(timeout=30)]  # the work would take a minute
    finally:
        s.orphan()
    assert s.done.is_set() and "TTL<=0" in (s.lost_reason or "")
    for result in results:
        assert not result.ok and result.error.startswith("cancelled: "), result.error
    assert cancel.asked <= 2 * MOST_CHECKS, f"is_set() asked {cancel.asked} times: a wait polled the cancel"
    assert cancel.listeners == 0
