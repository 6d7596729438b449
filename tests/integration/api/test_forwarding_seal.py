"""Forwarding is a peer's privilege, on real nodes (real etcd, real SQLite, two nodes with tokens):

- a client that sends the forwarded marker itself is served as the direct caller it is: its writes are
  routed normally and audit-logged, and its streams count against its per-peer limit;
- a write is audit-logged exactly once in the cluster, by the node that applies it (the shard's leader),
  with the original caller's token name, whether the caller reached the leader or another node.
"""

from __future__ import annotations

import uuid

import grpc
import pytest

from shardcron.api.tokens import hash_secret
from shardcron.dev.testing.cluster import Cluster
from shardcron.sharding import shard_for
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from shardcron.wire.convert import job_to_proto
from tests.support.clusters import stopped_after

pytestmark = pytest.mark.cluster

OPS, NODE, WRITER = "ops-secret-" + "o" * 24, "node-secret-" + "n" * 24, "writer-secret-" + "w" * 24
SHARDS = 2
PER_PEER = 3
FORGED = ("x-shardcron-forwarded", "1")


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("forwarding-seal")
    tokens = d / "tokens"
    tokens.write_text(
        f"ops {hash_secret(OPS)} admin *\nnode {hash_secret(NODE)} admin *\n"
        f"writer {hash_secret(WRITER)} write default\n"
    )
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{d}/store.db",
        f"/t{uuid.uuid4().hex[:12]}",
        SHARDS,
        4,
        str(d),
        extra_args=["--auth-token-file", str(tokens), "--max-streams-per-peer", str(PER_PEER)],
    )
    for name in ("n0", "n1"):
        c.add(name, env={"SHARDCRON_NODE_TOKEN": NODE})
    with stopped_after(c):
        c.wait_balanced({"n0", "n1"}, 120)
        yield c


def _ids_led_by(c: Cluster, tag: str) -> dict[str, str]:
    """One job id per node, whose shard that node leads."""
    leaders = c.leaders()
    ids: dict[str, str] = {}
    i = 0
    while len(ids) < len(c.nodes):
        jid = f"{tag}-{i}"
        ids.setdefault(leaders[shard_for(jid, SHARDS)], jid)
        i += 1
    return ids


def _audit_lines(c: Cluster, call: str, target: str) -> dict[str, int]:
    """How many audit lines each node logged for ``call`` on ``target`` (token writer)."""
    needle = f"call={call} token=writer namespace=default target={target}"
    return {
        name: sum(1 for line in n.log_text().splitlines() if "shardcron.audit" in line and line.endswith(needle))
        for name, n in c.nodes.items()
    }


def _stub(node) -> tuple[grpc.Channel, pb_grpc.SchedulerStub]:
    ch = grpc.insecure_channel(node.address)
    return ch, pb_grpc.SchedulerStub(ch)


def _put(stub, jid: str, metadata) -> None:
    job = job_from_dict({"id": jid, "every": "1h", "executor": {"kind": "noop"}})
    stub.PutJob(pb.PutJobRequest(job=job_to_proto(job, redact=False)), metadata=metadata, timeout=30)


def test_a_forged_forwarded_marker_is_ignored_so_writes_are_routed_and_logged(cluster):
    ids = _ids_led_by(cluster, f"forged-{uuid.uuid4().hex[:6]}")
    forged = (("authorization", f"Bearer {WRITER}"), FORGED)
    for entry in ("n0", "n1"):  # the leader itself, and a node that must forward
        ch, stub = _stub(cluster.nodes[entry])
        with ch:
            for leader, jid in ids.items():
                _put(stub, jid, forged)  # through a non-leader too: routed, not "does not lead"
                stub.PauseJob(pb.PauseJobRequest(id=jid), metadata=forged, timeout=30)
                stub.DeleteJob(pb.DeleteJobRequest(id=jid), metadata=forged, timeout=30)
                for call in ("PutJob", "PauseJob", "DeleteJob"):
                    lines = _audit_lines(cluster, call, jid)
                    # Once per entry so far: the leader logs each time, nobody else ever does.
                    expected = 1 if entry == "n0" else 2
                    assert lines[leader] == expected and sum(lines.values()) == expected, (entry, call, jid, lines)


def test_a_write_through_another_node_is_logged_once_by_the_leader_with_the_callers_name(cluster):
    caller = (("authorization", f"Bearer {WRITER}"),)
    for entry in ("n0", "n1"):
        ids = _ids_led_by(cluster, f"direct-{entry}-{uuid.uuid4().hex[:6]}")
        ch, stub = _stub(cluster.nodes[entry])
        with ch:
            for leader, jid in ids.items():
                _put(stub, jid, caller)
                lines = _audit_lines(cluster, "PutJob", jid)
                assert lines == {n: int(n == leader) for n in cluster.nodes}, (entry, jid, lines)
    # A batch over both shards through one node: each job once, by its own leader.
    ids = _ids_led_by(cluster, f"batch-{uuid.uuid4().hex[:6]}")
    batch = [job_from_dict({"id": jid, "every": "1h", "executor": {"kind": "noop"}}) for jid in ids.values()]
    ch, stub = _stub(cluster.nodes["n0"])
    with ch:
        answer = stub.PutJobs(
            pb.PutJobsRequest(jobs=[job_to_proto(j, redact=False) for j in batch]), metadata=caller, timeout=30
        )
    assert all(r.code == 0 for r in answer.results), answer
    for leader, jid in ids.items():
        lines = _audit_lines(cluster, "PutJobs", jid)
        assert lines == {n: int(n == leader) for n in cluster.nodes}, (jid, lines)


def test_a_forged_forwarded_marker_does_not_lift_the_per_peer_stream_limit(cluster):
    ch, stub = _stub(cluster.nodes["n0"])
    opened = []
    with ch:
        try:
            forged = (("authorization", f"Bearer {WRITER}"), FORGED)
            for _ in range(PER_PEER):
                call = stub.WatchTicks(pb.WatchTicksRequest(namespace="default"), metadata=forged, timeout=60)
                opened.append(call)
                call.initial_metadata()  # the node sends its headers once it has taken the stream
            over = stub.WatchTicks(pb.WatchTicksRequest(namespace="default"), metadata=forged, timeout=60)
            opened.append(over)
            with pytest.raises(grpc.RpcError) as e:
                next(over)
            assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--max-streams-per-peer" in e.value.details(), e.value.details()
        finally:
            for call in opened:
                call.cancel()
