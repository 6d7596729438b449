"""2,000 WatchTicks streams on one node: they all get their ticks, and the node still answers everything else.

Two nodes over real etcd and SQLite. Four client processes open 500 streams
each on node "a": half watch every job (served from a's own results and one
shared feed from "b"), half watch one job whose shard "b" leads (each relayed
by "a" from "b"). The job ticks every second. While the streams are open,
health, GetShards and a PutJob/GetJob round trip on "a" answer within their
usual deadlines, and every one of the 2,000 streams sees the job's slots.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron import Client
from shardcron.dev.testing.cluster import wait_until
from shardcron.sharding import shard_for
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from tests.support.processes import stop_process

pytestmark = [pytest.mark.cluster, pytest.mark.load]

PROCESSES = 4
PER_PROCESS = int(os.environ.get("SHARDCRON_TEST_WATCHERS_PER_PROCESS", "500"))
SHARDS = 4


class _Watchers:
    """One client process of tests/support/watchers.py and the lines it printed."""

    def __init__(self, address: str, job_id: str, all_jobs: bool):
        args = [sys.executable, "-m", "tests.support.watchers", address, str(PER_PROCESS), job_id]
        self.proc = subprocess.Popen(
            args + (["--all"] if all_jobs else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def saw(self, line: str) -> bool:
        refused = [x for x in self.lines if x.startswith("refused") or "Traceback" in x]
        assert not refused, f"a watcher process reported: {refused[:3]} ({self.lines[-5:]})"
        return line in self.lines

    def stop(self) -> None:
        try:
            self.proc.stdin.close()  # the process cancels its streams and exits
            self.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop_process(self.proc, 10)


def _serving(address: str) -> bool:
    with grpc.insecure_channel(address) as ch:
        return (
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            == health_pb2.HealthCheckResponse.SERVING
        )


def _round_trip(address: str, job_id: str) -> None:
    with Client(address, timeout_s=10) as c:
        c.put_job(job_from_dict({"id": job_id, "every": "1h", "executor": {"kind": "noop"}}))
        assert c.get_job(job_id).id == job_id
    with grpc.insecure_channel(address) as ch:
        assert pb_grpc.SchedulerStub(ch).GetShards(pb.GetShardsRequest(), timeout=5).shard_count == SHARDS


def test_two_thousand_watchers_on_one_node(make_cluster, tmp_path):
    c = make_cluster(f"sqlite:///{tmp_path}/store.db", shards=SHARDS)
    a = c.add("a", extra_args=["--max-streams-per-peer", str(PROCESSES * PER_PROCESS + 100)])
    c.wait_all_led(60)  # the store is made: a second node started with it would find SQLite's file locked
    c.add("b")
    leaders = c.wait_balanced({"a", "b"}, 90)
    by_node = {n: [s for s, led in leaders.items() if led == n] for n in ("a", "b")}

    def job_on(node: str, stem: str) -> str:
        return next(f"{stem}-{i}" for i in range(10_000) if shard_for(f"{stem}-{i}", SHARDS) in by_node[node])

    ticking = job_on("b", "ticking")
    with Client(a.address) as client:
        client.put_job(job_from_dict({"id": ticking, "every": "1s", "executor": {"kind": "noop"}}))
    procs = [_Watchers(a.address, ticking, all_jobs=i % 2 == 0) for i in range(PROCESSES)]
    try:
        wait_until(
            lambda: all(p.saw(f"opened {PER_PROCESS}") for p in procs),
            180,
            0.5,
            what=f"{PROCESSES * PER_PROCESS} streams open",
        )
        # With every stream open: the node answers its health probe and its calls, for the
        # shards it leads and the ones it forwards.
        assert _serving(a.address)
        _round_trip(a.address, job_on("a", "here"))
        _round_trip(a.address, job_on("b", "there"))
        try:
            wait_until(
                lambda: all(p.saw(f"ticks {PER_PROCESS}") for p in procs),
                180,
                0.5,
                what="every stream seeing two slots of the ticking job",
            )
        except TimeoutError as e:
            for p in procs:
                p.stop()
            logs = {n: c.nodes[n].log_text()[-3000:] for n in ("a", "b")}
            raise AssertionError(
                f"{e}; each process's last lines: {[p.lines[-2:] for p in procs]}; "
                f"leaders now: {c.leaders()}; logs: {logs}"
            ) from None
        assert _serving(a.address)
        _round_trip(a.address, job_on("a", "again"))
    finally:
        for p in procs:
            p.stop()
