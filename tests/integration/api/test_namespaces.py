"""Namespaces through the API of a real two-node cluster (real etcd, real SQLite): a job's identity is
(namespace, id) on every call, whichever node receives it and wherever its shard's leader is."""

from __future__ import annotations

import uuid

import pytest

from shardcron import Client
from shardcron.client.errors import InvalidRequest, NotFound
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.errors import InvalidJob
from shardcron.jobkey import join_key
from shardcron.sharding import shard_for
from tests.support.clusters import stopped_after
from tests.support.databases import create_database
from tests.support.tenancy import ensure_namespaces, hourly_job, succeeded, watched

pytestmark = pytest.mark.cluster

SHARDS = 8


@pytest.fixture(scope="module")
def cluster(etcd_server, database_servers, tmp_path_factory):
    d = tmp_path_factory.mktemp("namespaces-api")
    url, drop = create_database("sqlite", directory=d)
    c = Cluster(etcd_server.endpoints, url, f"/t{uuid.uuid4().hex[:12]}", SHARDS, 4, str(d))
    c.add("n1")
    c.add("n2")
    with stopped_after(c, drop):
        c.wait_balanced({"n1", "n2"}, 90)
        yield c


def _clients(cluster, namespace=None) -> list[Client]:
    """One client per node: each call is served by that node, forwarded when it does not lead the shard."""
    return [Client([n.address], namespace=namespace) for n in cluster.nodes.values()]


def test_one_id_in_two_namespaces_is_two_jobs_through_either_node(cluster):
    ensure_namespaces(_clients(cluster)[0], "team-a", "team-b")
    for c in _clients(cluster):
        with c:
            ident = f"report-{uuid.uuid4().hex[:6]}"
            mine = c.put_job(hourly_job(ident, labels={"owner": "default"}))
            a = c.put_job(hourly_job(ident, labels={"owner": "a"}), namespace="team-a")
            assert (mine.key.namespace, a.key.namespace) == ("default", "team-a")
            assert mine.key.id == a.key.id == ident and mine.id != a.id
            assert c.get_job(ident).labels == {"owner": "default"}
            assert c.get_job(ident, namespace="team-a").labels == {"owner": "a"}
            assert c.get_job(a.id).labels == {"owner": "a"}  # a key names its namespace itself
            with pytest.raises(NotFound, match=f"job '{ident}' in namespace 'team-b' not found"):
                c.get_job(ident, namespace="team-b")

            assert ident in {j.key.id for j in c.list_jobs()}
            assert {j.key.namespace for j in c.list_jobs(namespace="team-a")} == {"team-a"}
            both = {(j.key.namespace, j.key.id) for j in c.list_jobs(namespace="*")}
            assert {("default", ident), ("team-a", ident)} <= both

            paused = c.pause_job(ident, namespace="team-a")
            assert paused.paused and not c.get_job(ident).paused
            c.delete_job(ident, namespace="team-a")
            with pytest.raises(NotFound):
                c.get_job(ident, namespace="team-a")
            assert c.get_job(ident).labels == {"owner": "default"}


def test_a_namespaced_job_lands_on_the_shard_of_its_key(cluster):
    ensure_namespaces(_clients(cluster)[0], "team-a")
    with _clients(cluster, namespace="team-a")[1] as c:
        ids = [f"s{i}" for i in range(40)]
        results = c.put_jobs([hourly_job(i) for i in ids])
        assert all(r.ok for r in results), [r.message for r in results if not r.ok]
        shards = {j.key.id: shard for j in c.list_jobs() if j.key.id in ids for shard in [shard_for(j.id, SHARDS)]}
        assert shards == {i: shard_for(join_key("team-a", i), SHARDS) for i in ids}
        for i in ids:
            c.delete_job(i)


def test_ticks_triggers_and_watches_stay_in_their_namespace(cluster):
    ensure_namespaces(_clients(cluster)[0], "team-a", "team-b")
    a, b = _clients(cluster, namespace="team-a")[0], _clients(cluster, namespace="team-b")[1]
    every = _clients(cluster)[0]  # the same node as team-a's watcher, watching every namespace
    ident = f"pulse-{uuid.uuid4().hex[:6]}"
    try:
        with watched(a.watch_ticks(), every.watch_ticks(namespace="*")) as (seen_a, seen_all):
            a.put_job(hourly_job(ident))
            b.put_job(hourly_job(ident))
            slot_a = a.trigger_job(ident)
            slot_b = b.trigger_job(ident)
            assert (slot_a.job_id, slot_b.job_id) == (join_key("team-a", ident), join_key("team-b", ident))
            wait_until(lambda: succeeded(seen_all, slot_b.job_id), 60, what="the '*' watcher to see team-b's tick")
            # team-b's event reached this node's watchers before this trigger: team-a's watcher reads
            # its queue in order, so by the time it sees the next team-a tick it would have seen team-b's.
            again = a.trigger_job(ident)
            wait_until(
                lambda: succeeded(seen_a, again.job_id, again.scheduled_at_ms),
                60,
                what="team-a's watcher to see its second triggered tick",
            )
            assert succeeded(seen_a, slot_a.job_id, slot_a.scheduled_at_ms)
            assert {t.job_id for t in seen_a} == {slot_a.job_id}, "a team-a watcher saw another namespace's ticks"
        assert [t.scheduled_at_ms for t in a.list_ticks(ident)] == [again.scheduled_at_ms, slot_a.scheduled_at_ms]
        assert [t.job_id for t in b.list_ticks(ident)] == [slot_b.job_id]
    finally:
        for c in (a, b):
            c.delete_job(ident)
        for c in (a, b, every):
            c.close()


def test_an_id_leaves_room_for_its_namespace_and_a_bad_namespace_is_named(cluster):
    ensure_namespaces(_clients(cluster)[0], "team-a")
    with _clients(cluster)[0] as c:
        with pytest.raises(InvalidRequest, match="in namespace 'team-a' the limit is 249"):
            c.put_job(hourly_job("x" * 250), namespace="team-a")
        with pytest.raises(InvalidJob, match="lowercase letters"):
            c.get_job("x", namespace="Team_A")
        c.put_job(hourly_job("y" * 249), namespace="team-a")
        c.delete_job("y" * 249, namespace="team-a")


def test_a_list_of_every_namespace_pages_by_namespace_then_id(cluster):
    ensure_namespaces(_clients(cluster)[0], "team-a", "team-b")
    tag = uuid.uuid4().hex[:6]
    keys = [(ns, f"{tag}-{i}") for ns in ("default", "team-a", "team-b") for i in ("b", "a", "c/d")]
    with _clients(cluster)[1] as c:
        for ns, ident in keys:
            c.put_job(hourly_job(ident, labels={"tag": tag}), namespace=ns)
        listed = [(j.key.namespace, j.key.id) for j in c.list_jobs(namespace="*", labels={"tag": tag}, page_size=2)]
        assert listed == sorted(keys)
        assert [k for k in listed if k[0] == "team-b"] == [
            (j.key.namespace, j.key.id) for j in c.list_jobs(namespace="team-b", labels={"tag": tag}, page_size=1)
        ]
        for ns, ident in keys:
            c.delete_job(ident, namespace=ns)


def test_an_id_search_stays_inside_each_namespace(cluster):
    """A search of every namespace matches ids, never a namespace's name (keys begin with it)."""
    ensure_namespaces(_clients(cluster)[0], "team-a", "team-b")
    tag = uuid.uuid4().hex[:6]
    with _clients(cluster)[0] as c:
        for ns, ident in (("default", f"{tag}-x"), ("team-a", f"{tag}-y"), ("team-b", "other")):
            c.put_job(hourly_job(ident), namespace=ns)
        found, _ = c.job_page(namespace="*", id_prefix=tag)
        assert sorted((j.key.namespace, j.key.id) for j, _ in found) == [
            ("default", f"{tag}-x"),
            ("team-a", f"{tag}-y"),
        ]
        assert c.job_page(namespace="*", id_prefix="team")[0] == [], "a namespace's name is no id"
        only_a, _ = c.job_page(namespace="team-a", id_prefix=tag)
        assert [j.key.id for j, _ in only_a] == [f"{tag}-y"]
        for ns, ident in (("default", f"{tag}-x"), ("team-a", f"{tag}-y"), ("team-b", "other")):
            c.delete_job(ident, namespace=ns)
