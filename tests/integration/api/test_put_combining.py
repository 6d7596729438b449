"""PutJob calls a node forwards to one leader, combined for one caller (api/put_combining.py, api/put_each.py),
on real nodes (real etcd, real SQLite, tokens on): each caller gets exactly the answer its call alone would get.

One shard, led by n0; n1 and n2 forward every call to it. n2's own token may write only in ``default``, so
the leader caps what n2 forwards to that (``scopes.forwarded_identity``). Nothing here times anything: the
combining is seen in the forwarding node's ``shardcron_forwarded_putjob_calls_total{sent="combined"}``.
"""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections import Counter

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shardcron.api.put_each import MEMBERS_ONLY
from shardcron.api.tokens import hash_secret
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.spec.job import job_from_dict
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc
from shardcron.wire.convert import job_to_proto
from tests.support.clusters import TTL, stopped_after

pytestmark = pytest.mark.cluster

OPS, WRITER = "ops-secret-" + "o" * 24, "writer-secret-" + "w" * 24
NODE, NODE_DEFAULT = "node-secret-" + "n" * 24, "node-default-secret-" + "d" * 24
CALLS = 40
ROUNDS_S = 120  # how long a test may try for the concurrent calls to meet (they do in the first round or two)


def _tokens(path) -> str:
    path.write_text(
        f"ops {hash_secret(OPS)} admin *\nwriter {hash_secret(WRITER)} write default\n"
        f"node {hash_secret(NODE)} admin *\nnode-default {hash_secret(NODE_DEFAULT)} write default\n"
    )
    return str(path)


def _start(c: Cluster, metrics: dict[str, int]) -> None:
    """n0 first, so that it leads the one shard; then n1 and n2, which forward everything to it."""
    for name, secret in (("n0", NODE), ("n1", NODE), ("n2", NODE_DEFAULT)):
        c.add(name, env={"SHARDCRON_NODE_TOKEN": secret}, extra_args=["--metrics-listen", f"127.0.0.1:{metrics[name]}"])
        if name == "n0":
            c.wait_all_led(90, by={"n0"})
    wait_until(lambda: {n["node"] for n in c.shard_map()["nodes"]} == {"n0", "n1", "n2"}, 60, what="all to join")


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("put-combining")
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{d}/store.db",
        f"/t{uuid.uuid4().hex[:12]}",
        1,
        TTL,
        str(d),
        extra_args=["--auth-token-file", _tokens(d / "tokens")],
    )
    c.metrics = {n: free_port() for n in ("n0", "n1", "n2")}  # type: ignore[attr-defined]
    with stopped_after(c):
        _start(c, c.metrics)  # type: ignore[attr-defined]
        yield c


def combined(c: Cluster, node: str) -> float:
    port = c.metrics[node]  # type: ignore[attr-defined]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "shardcron_forwarded_putjob_calls_total" and s.labels.get("sent") == "combined"
    )


def _job(jid: str, namespace: str = "", every: str = "1h") -> pb.Job:
    job = job_to_proto(job_from_dict({"id": jid, "every": every, "executor": {"kind": "noop"}}), redact=False)
    job.namespace = namespace
    return job


def _request(jid: str, expected: int | None = None, namespace: str = "", every: str = "1h") -> pb.PutJobRequest:
    return pb.PutJobRequest(job=_job(jid, namespace, every), expected_version=expected)


async def _put_all(address: str, secret: str, requests: list[pb.PutJobRequest], timeout: float = 60.0) -> list:
    """Every request at once, on one channel: each one's answer (PutJobResponse) or its grpc.aio.AioRpcError."""
    async with grpc.aio.insecure_channel(address) as ch:
        stub = pb_grpc.SchedulerStub(ch)
        md = (("authorization", f"Bearer {secret}"),)
        return await asyncio.gather(
            *(stub.PutJob(r, timeout=timeout, metadata=md) for r in requests), return_exceptions=True
        )


def _audit(c: Cluster, needle: str) -> dict[str, int]:
    return {
        name: sum(
            1
            for line in n.log_text().splitlines()
            if "shardcron.audit" in line and (line.endswith(needle) or needle + " " in line)
        )
        for name, n in c.nodes.items()
    }


def _code(answer) -> grpc.StatusCode:
    return grpc.StatusCode.OK if isinstance(answer, pb.PutJobResponse) else answer.code()


def test_concurrent_puts_through_a_forwarding_node_each_get_the_answer_they_would_alone(cluster):
    before = combined(cluster, "n1")
    rounds = 0
    while combined(cluster, "n1") == before:  # until the calls met at least once (a noisy machine may serialize)
        rounds += 1
        assert rounds * 5 < ROUNDS_S, "40 concurrent calls through n1 never shared a call to the leader"
        tag = f"many-{uuid.uuid4().hex[:6]}"
        # Creates (expected_version 0): one per id wins, the others are ABORTED, whichever call they share.
        creates = [_request(f"{tag}-{i % 10}", expected=0) for i in range(CALLS)]
        answers = asyncio.run(_put_all(cluster.nodes["n1"].address, WRITER, creates))
        codes = Counter(_code(a) for a in answers)
        assert codes == {grpc.StatusCode.OK: 10, grpc.StatusCode.ABORTED: 30}, codes
        won = sorted(a.job.id for a in answers if isinstance(a, pb.PutJobResponse))
        assert won == sorted(f"{tag}-{i}" for i in range(10)) and {
            a.job.version for a in answers if _code(a).value[0] == 0
        } == {1}
        conflict = next(a for a in answers if _code(a) is grpc.StatusCode.ABORTED)
        assert "version" in conflict.details(), conflict.details()
        # Mixed in one burst: replaces at the right version, at a wrong one, and unconditional ones.
        mixed = [_request(f"{tag}-{i}", expected=1) for i in range(5)]
        mixed += [_request(f"{tag}-{i}", expected=7) for i in range(5, 10)]
        mixed += [_request(f"{tag}-new-{i}") for i in range(10)]
        answers = asyncio.run(_put_all(cluster.nodes["n1"].address, WRITER, mixed))
        assert [_code(a) for a in answers] == [grpc.StatusCode.OK] * 5 + [grpc.StatusCode.ABORTED] * 5 + [
            grpc.StatusCode.OK
        ] * 10, answers
        assert [a.job.version for a in answers[:5]] == [2] * 5 and [a.job.version for a in answers[10:]] == [1] * 10
        # One audit line per applied job, on the leader, with the caller's name; none on the forwarders.
        for i in range(10):
            lines = _audit(cluster, f"call=PutJob token=writer namespace=default target={tag}-new-{i}")
            assert lines == {"n0": 1, "n1": 0, "n2": 0}, (i, lines)


def test_two_callers_are_never_combined_and_each_keeps_its_own_scope(cluster):
    tag = f"two-{uuid.uuid4().hex[:6]}"
    before = combined(cluster, "n2")
    rounds = 0
    while combined(cluster, "n2") == before:
        rounds += 1
        assert rounds * 5 < ROUNDS_S, "concurrent calls through n2 never shared a call to the leader"
        # ops (admin on '*') through n2, whose own token writes only in default: the leader caps ops to that,
        # per call; writer writes in default. Both at once, through the same node, to the same leader.
        ops = [_request(f"{tag}-ops-{rounds}-{i}", namespace="default" if i % 2 else "team-a") for i in range(20)]
        writer = [_request(f"{tag}-writer-{rounds}-{i}") for i in range(20)]

        async def both():
            return await asyncio.gather(
                _put_all(cluster.nodes["n2"].address, OPS, ops), _put_all(cluster.nodes["n2"].address, WRITER, writer)
            )

        ops_answers, writer_answers = asyncio.run(both())
        assert all(_code(a) is grpc.StatusCode.OK for a in writer_answers), writer_answers
        for i, a in enumerate(ops_answers):
            if i % 2:
                assert _code(a) is grpc.StatusCode.OK, (i, a)
            else:  # refused alone, not its combined neighbours: PutJob's own words for the capped scope
                assert _code(a) is grpc.StatusCode.PERMISSION_DENIED, (i, a)
                assert "namespace 'team-a' needs role write" in a.details(), a.details()
        # Each job is attributed to its own caller on the leader: never writer's job under ops, or the reverse.
        for i in range(20):
            w = _audit(cluster, f"token=writer namespace=default target={tag}-writer-{rounds}-{i}")
            assert w == {"n0": 1, "n1": 0, "n2": 0}, w
            assert sum(_audit(cluster, f"token=ops namespace=default target={tag}-writer-{rounds}-{i}").values()) == 0
            o = _audit(cluster, f"token=ops namespace={'default' if i % 2 else 'team-a'} target={tag}-ops-{rounds}-{i}")
            assert o["n0"] == 1 and o["n1"] == o["n2"] == 0, (i, o)  # applied, or "denied" by the leader
    # The same call alone gets the same answer.
    [alone] = asyncio.run(_put_all(cluster.nodes["n2"].address, OPS, [_request(f"{tag}-alone", namespace="team-a")]))
    assert (
        _code(alone) is grpc.StatusCode.PERMISSION_DENIED and "namespace 'team-a' needs role write" in alone.details()
    )


def test_callers_that_cancel_do_not_disturb_the_others(cluster):
    tag = f"cancel-{uuid.uuid4().hex[:6]}"

    async def scenario():
        async with grpc.aio.insecure_channel(cluster.nodes["n1"].address) as ch:
            stub = pb_grpc.SchedulerStub(ch)
            md = (("authorization", f"Bearer {WRITER}"),)
            calls = [stub.PutJob(_request(f"{tag}-{i}"), timeout=60, metadata=md) for i in range(CALLS)]
            await asyncio.sleep(0)
            for call in calls[::2]:
                call.cancel()
            return await asyncio.gather(*calls[1::2], return_exceptions=True)

    kept = asyncio.run(scenario())
    assert [_code(a) for a in kept] == [grpc.StatusCode.OK] * (CALLS // 2), kept
    assert [a.job.id for a in kept] == [f"{tag}-{i}" for i in range(1, CALLS, 2)]
    # The node goes on combining and answering afterwards.
    again = asyncio.run(_put_all(cluster.nodes["n1"].address, WRITER, [_request(f"{tag}-{i}") for i in range(CALLS)]))
    assert all(_code(a) is grpc.StatusCode.OK for a in again), again


def test_only_a_member_node_may_send_putjobeach(cluster):
    with grpc.insecure_channel(cluster.nodes["n0"].address) as ch:
        stub = pb_grpc.SchedulerStub(ch)
        request = pb.PutJobEachRequest(calls=[_request(f"direct-{uuid.uuid4().hex[:6]}")])
        for md in (
            (("authorization", f"Bearer {OPS}"),),
            (("authorization", f"Bearer {OPS}"), ("x-shardcron-forwarded", "v1." + "0" * 64)),  # a forged seal
        ):
            with pytest.raises(grpc.RpcError) as e:
                stub.PutJobEach(request, metadata=md, timeout=30)
            assert e.value.code() is grpc.StatusCode.PERMISSION_DENIED and MEMBERS_ONLY in e.value.details()


def test_a_leader_change_mid_way_retries_only_the_calls_it_moved(etcd_server, etcd_prefix, tmp_path):
    """n0 leads the one shard and is stopped while calls through n2 are in flight: every call is answered as
    alone, those n0 no longer served going on to the new leader (n1) within their deadline."""
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/store.db",
        etcd_prefix,
        1,
        TTL,
        str(tmp_path),
        extra_args=["--auth-token-file", _tokens(tmp_path / "tokens")],
    )
    ports = {n: free_port() for n in ("n0", "n1", "n2")}
    with stopped_after(c):
        _start(c, ports)
        c.metrics = ports  # type: ignore[attr-defined]
        tag = f"moved-{uuid.uuid4().hex[:6]}"
        done: list = []
        after_change = 10**9  # how many rounds to make: set once n0 is stopped (a few more after it)

        async def keep_putting():
            async with grpc.aio.insecure_channel(c.nodes["n2"].address) as ch:
                stub = pb_grpc.SchedulerStub(ch)
                md = (("authorization", f"Bearer {WRITER}"),)
                last = 0
                # Unconditional puts: a call whose answer the stopping leader could not send is retried, and
                # would meet its own write as a version conflict (as a single call's retry would).
                while c.leaders().get(0) in (None, "n0") or len(done) < after_change:
                    answers = await asyncio.gather(
                        *(stub.PutJob(_request(f"{tag}-{i}"), timeout=90, metadata=md) for i in range(20)),
                        return_exceptions=True,
                    )
                    assert all(_code(a) is grpc.StatusCode.OK for a in answers), answers
                    versions = [a.job.version for a in answers]
                    assert min(versions) > last, (last, versions)
                    last = max(versions)
                    done.append(answers)

        async def scenario():
            putting = asyncio.ensure_future(keep_putting())
            await asyncio.to_thread(wait_until, lambda: len(done) >= 2, 60, 0.05, "calls before the change")
            nonlocal after_change
            after_change = len(done) + 3
            await asyncio.to_thread(c.nodes["n0"].terminate)  # resigns its shard: n1 or n2 takes it over
            await asyncio.wait_for(putting, 4 * TTL + 120)

        wait_until(lambda: c.leaders().get(0) == "n0", 30, what="n0 to lead")
        asyncio.run(scenario())
        assert c.leaders().get(0) in ("n1", "n2")
        assert combined(c, "n2") > 0, "n2 combined calls to its leader"
