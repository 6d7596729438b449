"""Namespaces and quotas on a real three-node cluster (real etcd, real SQLite): the CLI creates, lists,
describes, updates and deletes namespaces; quotas refuse a put through any node with
RESOURCE_EXHAUSTED naming the namespace, the quota and its limit (PutJob, and per job in PutJobs);
every bad input is a one-line error."""

from __future__ import annotations

import json
import subprocess
import uuid
from fractions import Fraction

import grpc
import pytest

from shardcron import Client
from shardcron.client.errors import ApiError
from shardcron.dev.testing.cluster import wait_until
from shardcron.spec.job import job_from_dict
from tests.support.clusters import sqlite_cluster
from tests.support.commands import node_command

pytestmark = pytest.mark.cluster

SHARDS = 4


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    with sqlite_cluster(etcd_server, tmp_path_factory, "namespaces", SHARDS, ["a", "b", "c"]) as (c, nodes, url):
        yield c, nodes, url


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def noop(job_id: str, every: str = "1h"):
    return job_from_dict({"id": job_id, "every": every, "executor": {"kind": "noop"}})


def test_namespaces_through_the_cli(cluster):
    _, nodes, _ = cluster
    name = f"team-{uuid.uuid4().hex[:6]}"
    assert (
        ok(
            node_command(
                nodes[0],
                "namespaces",
                "create",
                name,
                "--weight",
                "2",
                "--max-jobs",
                "10",
                "--max-slots-per-second",
                "10/3",
            )
        )
        == f"namespace {name} created\n"
    )
    listed = ok(node_command(nodes[1], "namespaces", "list"))
    header, *rows = listed.splitlines()
    assert header.split() == ["NAME", "WEIGHT", "JOBS", "MAX", "JOBS", "SLOTS/S", "MAX", "SLOTS/S", "MAX", "RUNNING"]
    assert any(r.split() == [name, "2", "0", "10", "0", "3.333", "(10/3)", "-"] for r in rows), listed
    assert any(r.split()[0] == "default" for r in rows), listed
    described = ok(node_command(nodes[2], "namespaces", "describe", name))
    assert "weight            2\n" in described and "jobs              0 of 10\n" in described
    assert "slots per second  0 of 3.333 (10/3)\n" in described and "max running       no limit\n" in described
    as_json = json.loads(ok(node_command(nodes[2], "namespaces", "describe", name, "--json")))
    assert as_json["quota"] == {"max_jobs": 10, "max_slots_per_second": "10/3", "max_running": None}

    # update: only what is given changes; 'none' removes a limit
    updated = ok(node_command(nodes[1], "namespaces", "update", name, "--max-jobs", "none", "--max-running", "4"))
    assert "jobs              0 of no limit\n" in updated and "max running       4 per node\n" in updated
    assert "slots per second  0 of 3.333 (10/3)\n" in updated
    weighted = json.loads(ok(node_command(nodes[0], "namespaces", "update", name, "--weight", "0.5", "--json")))
    assert weighted["weight"] == 0.5 and weighted["quota"]["max_running"] == 4

    assert "already exists" in one_line_error(node_command(nodes[0], "namespaces", "create", name))
    assert "name: 'Team_A' must be lowercase" in one_line_error(
        node_command(nodes[0], "namespaces", "describe", "Team_A")
    )
    assert "--max-jobs: must be a whole number" in one_line_error(
        node_command(nodes[0], "namespaces", "create", "x", "--max-jobs", "lots")
    )
    assert "--weight: must be a number above 0" in one_line_error(
        node_command(nodes[0], "namespaces", "update", name, "--weight", "0")
    )
    assert "nothing to change" in one_line_error(node_command(nodes[0], "namespaces", "update", name))
    assert "'default' cannot be deleted" in one_line_error(node_command(nodes[0], "namespaces", "delete", "default"))

    assert ok(node_command(nodes[2], "namespaces", "delete", name)) == f"namespace {name} deleted\n"
    assert f"namespace {name!r} not found" in one_line_error(node_command(nodes[0], "namespaces", "describe", name))
    assert f"namespace {name!r} not found" in one_line_error(node_command(nodes[0], "namespaces", "delete", name))


def test_quotas_refuse_with_resource_exhausted_through_any_node(cluster):
    _, nodes, _ = cluster
    tag = uuid.uuid4().hex[:6]
    with Client(nodes[0].address) as c0:
        base = c0.get_namespace("default")
        room = base.usage.jobs + 2
        c0.update_namespace("default", quota={"max_jobs": room})
        try:
            for i in range(2):  # the last two rooms, taken through two different nodes
                with Client(nodes[i].address) as c:
                    c.put_job(noop(f"q-{tag}-{i}"))
            for n in nodes:  # each node refuses the next, whichever shard it leads
                with Client(n.address) as c, pytest.raises(ApiError) as e:
                    c.put_job(noop(f"q-{tag}-more-{n.node_id}"))
                assert e.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert str(e.value) == f"namespace 'default' would hold {room + 1} jobs; its quota max_jobs is {room}"
            c0.put_job(noop(f"q-{tag}-0", "2h"))  # replacing one at the limit takes no room
            results = c0.put_jobs([noop(f"q-{tag}-1", "3h"), noop(f"q-{tag}-batch")])
            assert [(r.ok, r.code) for r in results] == [(True, "OK"), (False, "RESOURCE_EXHAUSTED")]
            assert "its quota max_jobs is" in results[1].message

            # max_slots_per_second: the sum of peak rates; a lowered quota still lets a job be deleted
            now_rate = c0.get_namespace("default").usage.slots_per_second
            c0.update_namespace("default", quota={"max_jobs": None, "max_slots_per_second": now_rate + 1})
            with Client(nodes[2].address) as c2:
                c2.put_job(noop(f"q-{tag}-fast", "1s"))
                with pytest.raises(ApiError) as e:
                    c2.put_job(noop(f"q-{tag}-faster", "2s"))
                assert e.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "namespace 'default' would admit" in str(e.value)
                assert "its quota max_slots_per_second is" in str(e.value)
                c0.update_namespace("default", quota={"max_slots_per_second": 0})
                c2.delete_job(f"q-{tag}-fast")
        finally:
            c0.update_namespace("default", quota={"max_jobs": None, "max_slots_per_second": None})
            for i in range(2):
                c0.delete_job(f"q-{tag}-{i}")
        assert c0.get_namespace("default").usage == base.usage  # every job given back


def test_a_namespaces_quotas_refuse_through_any_node(cluster):
    _, nodes, _ = cluster
    name = f"quota-{uuid.uuid4().hex[:6]}"
    with Client(nodes[0].address) as c0:
        c0.create_namespace(name, quota={"max_jobs": 3, "max_slots_per_second": Fraction(1, 2)})
        for i, n in enumerate(nodes):  # each node takes one room, whichever shard's leader it forwards to
            with Client(n.address, namespace=name) as c:
                c.put_job(noop(f"j{i}", "10s"))
        for n in nodes:
            with Client(n.address, namespace=name) as c:
                with pytest.raises(ApiError) as e:
                    c.put_job(noop("one-more"))
                assert e.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert str(e.value) == f"namespace {name!r} would hold 4 jobs; its quota max_jobs is 3"
                with pytest.raises(ApiError) as e:
                    c.put_job(noop("j0", "1s"))  # a replacement takes no job's room, but a faster rate
                assert e.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert str(e.value) == (
                    f"namespace {name!r} would admit 1.2 slots per second; its quota max_slots_per_second is 0.5"
                )
        described = c0.get_namespace(name)
        assert (described.usage.jobs, described.usage.slots_per_second) == (3, Fraction(3, 10))
        with Client(nodes[1].address, namespace=name) as c1:
            # One result per job; jobs of shards led by different nodes commit in their own transactions,
            # so this batch is one whose answers do not depend on their order (the store test checks order).
            results = c1.put_jobs([noop("j1", "5s"), noop("j2", "1s"), noop("j3")])
        assert [r.code for r in results] == ["OK", "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"]
        assert "its quota max_slots_per_second is 0.5" in results[1].message
        assert results[2].message == f"namespace {name!r} would hold 4 jobs; its quota max_jobs is 3"
        assert c0.get_namespace(name).usage.slots_per_second == Fraction(1, 5) + Fraction(2, 10)
        with pytest.raises(ApiError) as e:
            c0.put_job(noop("x"), namespace=f"never-{name}")
        assert e.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert f"create it first with `shardcron namespaces create never-{name}`" in str(e.value)


def test_a_namespace_with_jobs_is_deleted_only_by_force_through_the_cli(cluster):
    _, nodes, _ = cluster
    name = f"doomed-{uuid.uuid4().hex[:6]}"
    ok(node_command(nodes[0], "namespaces", "create", name))
    with Client(nodes[1].address, namespace=name) as c:
        results = c.put_jobs([noop(f"job-{i}") for i in range(12)])  # over every shard, so every leader
        assert all(r.ok for r in results), results
    with Client(nodes[2].address) as c2:
        c2.put_job(noop("job-0"))  # the same id in default: not the namespace's, and it stays
        try:
            refused = one_line_error(node_command(nodes[2], "namespaces", "delete", name))
            assert f"namespace {name!r} still holds 12 jobs" in refused and "force" in refused
            assert (
                ok(node_command(nodes[2], "namespaces", "delete", name, "--force"))
                == f"namespace {name} deleted with its 12 jobs\n"
            )
            assert list(c2.list_jobs(namespace=name)) == []
            assert c2.get_job("job-0").key.namespace == "default"
            assert name not in {n.name for n in c2.list_namespaces()}
        finally:
            c2.delete_job("job-0")


def test_a_jobs_file_job_of_a_missing_namespace_is_left_out_and_the_rest_imported(make_cluster, tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[jobs.kept]\nevery = "1h"\nexecutor = { kind = "noop" }\n\n'
        '[jobs.stray]\nnamespace = "ghost"\nevery = "1h"\nexecutor = { kind = "noop" }\n'
    )
    c = make_cluster(f"sqlite:///{tmp_path}/store.db", shards=2, extra_args=["--jobs", str(path)])
    node = c.add("solo")
    c.wait_balanced({"solo"}, 60)
    warning = "job ghost/stray of the jobs file not imported: namespace 'ghost' does not exist"
    wait_until(lambda: warning in node.log_text(), 60, 0.2, what="the leader's warning")
    with Client(node.address) as client:
        kept = wait_until(lambda: client.get_job("kept"), 60, 0.2, what="the other job imported")
        assert kept.key.namespace == "default"
        assert list(client.list_jobs(namespace="ghost")) == []
    assert node.alive()
