"""A frozen peer (SIGSTOP) is given up within the keep-alive timeout, not at each call's deadline.

Two nodes with --keepalive 1s --keepalive-timeout 1s and a 20 s lease, so
the peer's lease outlives the keep-alive by far. While "b" is frozen:
* "a" answers every call about the shards it leads at once;
* a watch of one of b's jobs that "a" relays, and a PutJob for b's shard sent
  to "a" with a 90 s deadline, were both in flight on a's connection to "b".
  Without pings both would hang on that connection (the watch forever, the
  PutJob until its deadline). With them "a" drops the connection within
  seconds, keeps retrying, and serves both itself once b's lease expires and
  "a" takes the shard over: the watch sees the job's slots again and the
  PutJob succeeds, long before its deadline.
* a client's own channel (the same options as the CLI's, with 1 s pings) ends
  its stream from "b" with UNAVAILABLE instead of hanging.
"""

from __future__ import annotations

import threading
import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron import Client
from shardcron.client.channel import channel_options
from shardcron.dev.testing.cluster import wait_until
from shardcron.sharding import shard_for
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.cluster

SHARDS = 4
TTL_S = 20
PINGS = ["--keepalive", "1s", "--keepalive-timeout", "1s"]


class _Stream:
    """Reads a WatchTicks stream in a thread: the slots it saw of one job, and how it ended."""

    def __init__(self, call, job_id: str):
        self.call = call
        self.job_id = job_id
        self.slots: list[int] = []
        self.ended: grpc.StatusCode | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.call:
                if event.tick.job_id == self.job_id:
                    self.slots.append(event.tick.scheduled_at_ms)
        except grpc.RpcError as e:
            self.ended = e.code()

    def slots_after(self, ms: int) -> int:
        return len({s for s in self.slots if s > ms})


def _noop(job_id: str, every: str = "1s"):
    return job_from_dict({"id": job_id, "every": every, "executor": {"kind": "noop"}})


def test_a_frozen_peer_is_given_up_within_the_keepalive(etcd_server, tmp_path):
    from shardcron.dev.testing.cluster import Cluster

    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/store.db",
        f"/t{uuid.uuid4().hex[:12]}",
        SHARDS,
        TTL_S,
        str(tmp_path),
        extra_args=PINGS,
    )
    a = c.add("a")
    try:
        c.wait_all_led(60)  # the store is made: a second node started with it would find SQLite's file locked
        b = c.add("b")
        leaders = c.wait_balanced({"a", "b"}, 90)

        def job_on(node: str, stem: str) -> str:
            return next(f"{stem}-{i}" for i in range(10_000) if leaders[shard_for(f"{stem}-{i}", SHARDS)] == node)

        ticking, late_put, here = job_on("b", "ticking"), job_on("b", "late"), job_on("a", "here")
        with Client(a.address) as client:
            client.put_job(_noop(ticking))
        relay_channel = grpc.insecure_channel(a.address)
        relayed = _Stream(
            pb_grpc.SchedulerStub(relay_channel).WatchTicks(pb.WatchTicksRequest(job_id=ticking)), ticking
        )
        direct_channel = grpc.insecure_channel(b.address, options=channel_options(1000, 1000))
        direct = _Stream(pb_grpc.SchedulerStub(direct_channel).WatchTicks(pb.WatchTicksRequest()), ticking)
        wait_until(
            lambda: relayed.slots_after(0) >= 2 and direct.slots_after(0) >= 2,
            60,
            what="both streams seeing the job's slots",
        )

        b.pause()
        frozen_at_ms = int(time.time() * 1000)
        put_outcome: list = []

        def put_on_the_frozen_shard():
            try:
                with Client(a.address, timeout_s=90) as client:
                    put_outcome.append(client.put_job(_noop(late_put, "1h")))
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                put_outcome.append(e)

        putter = threading.Thread(target=put_on_the_frozen_shard, daemon=True)
        putter.start()

        # "a" serves what it leads at once.
        with grpc.insecure_channel(a.address) as ch:
            assert (
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            )
        with Client(a.address, timeout_s=10) as client:
            client.put_job(_noop(here, "1h"))
            assert client.get_job(here).id == here

        # The client's own stream from the frozen node ends within the pings' timeout.
        wait_until(lambda: direct.ended is not None, 30, what="the direct stream from the frozen node to end")
        assert direct.ended is grpc.StatusCode.UNAVAILABLE

        # Once b's lease is gone, "a" leads the shard and serves both calls that were on b.
        putter.join(TTL_S + 45)
        assert put_outcome and not isinstance(put_outcome[0], Exception), put_outcome
        wait_until(
            lambda: relayed.slots_after(frozen_at_ms) >= 2,
            TTL_S + 45,
            what="the relayed watch seeing the job's slots again, now from a",
        )
        assert relayed.ended is None
        assert c.leaders()[shard_for(ticking, SHARDS)] == "a"
        relayed.call.cancel()
        relay_channel.close()
        direct_channel.close()
    finally:
        for n in c.nodes.values():
            n.resume()
        c.stop_all()
    for n in c.nodes.values():
        text = n.log_text()
        assert "Traceback" not in text, f"{n.node_id} logged a traceback:\n{text[-4000:]}"
