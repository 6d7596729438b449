"""Scoped tokens on a real 3-node cluster (real etcd, real SQLite store) started with a token file:
tokens created through the API confine each team to its namespace on every node (forwarded calls
included), a read token cannot write, a watch of '*' shows only the caller's namespaces, a revoked
token is refused everywhere within the reload bound, a forwarded call is never wider than the
forwarding node's token, and every write leaves an audit line naming the token."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import grpc
import pytest

from shardcron.api.tokens import hash_secret
from shardcron.client.errors import ApiError
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.jobkey import join_key, namespace_of
from shardcron.sharding import shard_for
from tests.support.clusters import stopped_after
from tests.support.databases import create_database
from tests.support.tenancy import (
    accepted,
    admitted,
    denied,
    ensure_namespaces,
    hourly_job,
    succeeded,
    token_client,
    watched,
)

pytestmark = pytest.mark.cluster

SHARDS = 6
OPS, NODE, NODE_RO = "ops-secret-" + "x" * 20, "node-secret-" + "y" * 20, "node-ro-secret-" + "z" * 20


def _token_file(directory) -> str:
    path = os.path.join(directory, "tokens")
    with open(path, "w") as f:
        f.write(
            "# name  hash  role  namespaces\n"
            f"ops      {hash_secret(OPS)}  admin  *\n"
            f"node     {hash_secret(NODE)}  admin  *\n"
            f"node-ro  {hash_secret(NODE_RO)}  read  *\n"
        )
    return path


@pytest.fixture(scope="module")
def cluster(etcd_server, database_servers, tmp_path_factory):
    d = tmp_path_factory.mktemp("tokens")
    url, drop = create_database("sqlite", directory=d)
    c = Cluster(
        etcd_server.endpoints,
        url,
        f"/t{uuid.uuid4().hex[:12]}",
        SHARDS,
        4,
        str(d),
        extra_args=["--auth-token-file", _token_file(str(d))],
    )
    for name in ("n1", "n2", "n3"):
        c.add(name, env={"SHARDCRON_NODE_TOKEN": NODE})
    with stopped_after(c, drop):
        c.wait_settled({"n1", "n2", "n3"}, 120)
        yield c
    for n in c.nodes.values():
        for secret in (OPS, NODE, NODE_RO):
            assert secret not in n.log_text()


@pytest.fixture(scope="module")
def teams(cluster):
    """Secrets of write tokens for team-a and team-b and a read token of team-a, created through n1."""
    tag = uuid.uuid4().hex[:6]
    with token_client(cluster.nodes["n1"], OPS) as admin:
        ensure_namespaces(admin, "team-a", "team-b")
        secrets = {
            "a": admin.create_token(f"team-a-{tag}", "write", ["team-a"])[1],
            "b": admin.create_token(f"team-b-{tag}", "write", ["team-b"])[1],
            "a-read": admin.create_token(f"team-a-read-{tag}", "read", ["team-a"])[1],
        }
    # The other nodes know them once they reload their book (every 2 s).
    for node in cluster.nodes.values():
        for secret in secrets.values():
            wait_until(lambda: accepted(node, secret), 60, what=f"{node.node_id} to accept a new token")
    return secrets


def _forwarded_from(cluster, node_id: str, namespace: str, prefix: str = "fwd") -> str:
    """A job id of ``namespace`` whose shard another node leads: a call to ``node_id`` about it is forwarded."""
    leaders = cluster.leaders()
    for i in range(1000):
        ident = f"{prefix}-{i}"
        if leaders[shard_for(join_key(namespace, ident), cluster.shards)] not in (node_id, None):
            return ident
    raise AssertionError("no shard led elsewhere")


def test_teams_cannot_reach_each_others_jobs_through_any_node(cluster, teams):
    for node in cluster.nodes.values():
        a, b = token_client(node, teams["a"], "team-a"), token_client(node, teams["b"], "team-b")
        with a, b:
            mine = _forwarded_from(cluster, node.node_id, "team-a")  # served by forwarding
            theirs = _forwarded_from(cluster, node.node_id, "team-b")
            a.put_job(hourly_job(mine))
            b.put_job(hourly_job(theirs))
            assert a.get_job(mine).key.namespace == "team-a"
            a.trigger_job(mine)

            e = denied(lambda: a.get_job(theirs, namespace="team-b"))
            assert "namespace 'team-b'" in e.details and "role read" in e.details and "team-a-" in e.details
            e = denied(lambda: a.put_job(hourly_job(theirs), namespace="team-b"))
            assert "namespace 'team-b' needs role write" in e.details
            for call in (a.delete_job, a.pause_job, a.trigger_job, a.list_ticks):
                denied(lambda: call(theirs, namespace="team-b"))
            denied(lambda: b.delete_job(mine, namespace="team-a"))
            denied(lambda: list(b.list_jobs(namespace="team-a")))
            e = denied(lambda: next(iter(b.watch_ticks(namespace="team-a"))))  # a stream is checked too
            assert "WatchTicks in namespace 'team-a' needs role read" in e.details
            e = denied(lambda: a.put_jobs([hourly_job(f"{mine}-2")], namespace="team-b"))
            assert "PutJobs in namespace 'team-b'" in e.details

            # A read of every namespace shows only the caller's.
            if hasattr(a, "list_namespaces"):
                denied(a.list_namespaces)  # ListNamespaces needs admin; a team's admin sees only its own
            assert {j.key.namespace for j in a.list_jobs(namespace="*")} == {"team-a"}
            assert {j.key.namespace for j in b.list_jobs(namespace="*")} == {"team-b"}
            a.delete_job(mine)
            b.delete_job(theirs)


def test_a_read_token_cannot_write(cluster, teams):
    with (
        token_client(cluster.nodes["n2"], OPS, "team-a") as admin,
        token_client(cluster.nodes["n2"], teams["a-read"], "team-a") as reader,
    ):
        ident = _forwarded_from(cluster, "n2", "team-a")
        admin.put_job(hourly_job(ident))
        assert reader.get_job(ident).key.id == ident
        e = denied(lambda: reader.put_job(hourly_job(ident)))
        assert "needs role write" in e.details and "role read" in e.details
        denied(lambda: reader.delete_job(ident))
        denied(lambda: reader.create_token("sneaky", "admin", ["*"]))
        admin.delete_job(ident)


def test_a_watch_of_every_namespace_shows_only_the_callers(cluster, teams):
    n1 = cluster.nodes["n1"]
    a = token_client(n1, teams["a"], "team-a")
    b = token_client(cluster.nodes["n3"], teams["b"], "team-b")
    admin = token_client(n1, OPS)
    ident = f"pulse-{uuid.uuid4().hex[:6]}"
    try:
        with watched(a.watch_ticks(namespace="*"), admin.watch_ticks(namespace="*")) as (seen_a, seen_all):
            a.put_job(hourly_job(ident))
            b.put_job(hourly_job(ident))
            slot_a = a.trigger_job(ident)
            slot_b = b.trigger_job(ident)
            wait_until(lambda: succeeded(seen_all, slot_b.job_id), 60, what="the admin's watcher to see team-b's tick")
            # team-b's event reached n1's watchers before this trigger; team-a's watcher reads its queue in order.
            again = a.trigger_job(ident)
            wait_until(
                lambda: succeeded(seen_a, again.job_id, again.scheduled_at_ms),
                60,
                what="team-a's watcher to see its second tick",
            )
            assert succeeded(seen_a, slot_a.job_id, slot_a.scheduled_at_ms)
            assert {namespace_of(t.job_id) for t in seen_a} == {"team-a"}, (
                "team-a's token saw another namespace's ticks"
            )
            assert succeeded(seen_all, slot_a.job_id)
    finally:
        a.delete_job(ident)
        b.delete_job(ident)
        for c in (a, b, admin):
            c.close()


def test_a_revoked_token_is_refused_on_every_node(cluster, teams):
    name = f"temp-{uuid.uuid4().hex[:6]}"
    with token_client(cluster.nodes["n2"], OPS) as admin:
        info, secret = admin.create_token(name, "read", ["team-a"])
        assert (info.role, info.namespaces, info.source, info.created_by) == ("read", ("team-a",), "store", "ops")
        listed = {t.name: t for t in admin.list_tokens()}
        assert listed["ops"].source == "file" and listed[name].source == "store"
        for node in cluster.nodes.values():
            wait_until(lambda: accepted(node, secret), 60, what=f"{node.node_id} to accept {name}")
        admin.revoke_token(name)
        assert not accepted(cluster.nodes["n2"], secret)  # at once on the node that wrote
        for node in cluster.nodes.values():  # within RELOAD_S on the others
            wait_until(lambda: not accepted(node, secret), 60, what=f"{node.node_id} to refuse {name}")
        e = pytest.raises(ApiError, admin.revoke_token, "ops").value
        assert e.code is grpc.StatusCode.FAILED_PRECONDITION and "token file" in e.details
        e = pytest.raises(ApiError, admin.create_token, "node", "read", ["*"]).value
        assert e.code is grpc.StatusCode.ALREADY_EXISTS


def test_no_token_and_unknown_tokens_are_unauthenticated(cluster):
    for secret in (None, "sct_not-a-token"):
        with token_client(cluster.nodes["n3"], secret) as c:
            with pytest.raises(ApiError) as e:
                c.get_job("x")
            assert e.value.code is grpc.StatusCode.UNAUTHENTICATED and "SHARDCRON_TOKEN" in e.value.details


def test_every_write_is_audited_with_the_tokens_name(cluster, teams):
    n1 = cluster.nodes["n1"]
    ident = _forwarded_from(cluster, "n1", "team-a", f"audited-{uuid.uuid4().hex[:6]}")  # n1 forwards it
    with token_client(n1, teams["a"], "team-a") as a:
        a.put_job(hourly_job(ident))
        denied(lambda: a.delete_job(ident, namespace="team-b"))
        a.delete_job(ident)
    # A write is logged by the node that applied it (the leader n1 forwarded it to), once; a refusal where refused.
    leader = next(n for n in cluster.nodes.values() if n is not n1 and f"target={ident}" in n.log_text())
    wait_until(
        lambda: (
            "call=DeleteJob token=team-a-" in leader.log_text()
            and f"namespace=team-a target={ident}" in leader.log_text()
        ),
        30,
        what="the audit lines",
    )
    lines = [ln for ln in leader.log_text().splitlines() if f"target={ident}" in ln]
    assert any("call=PutJob" in ln and "namespace=team-a" in ln for ln in lines), lines
    everywhere = [
        ln
        for n in cluster.nodes.values()
        for ln in n.log_text().splitlines()
        if "call=PutJob token=team-a-" in ln and f"target={ident}" in ln
    ]
    assert len(everywhere) == 1, everywhere
    refused = [ln for ln in n1.log_text().splitlines() if f"target={ident}" in ln]
    assert any("call=DeleteJob" in ln and "namespace=team-b" in ln and ln.endswith("denied") for ln in refused), refused


def test_the_cli_creates_lists_and_revokes(cluster):
    n1 = cluster.nodes["n1"]
    env = {**os.environ, "SHARDCRON_TOKEN": OPS, "SHARDCRON_SERVER": n1.address}
    name = f"cli-{uuid.uuid4().hex[:6]}"

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "shardcron", "tokens", *args], capture_output=True, text=True, timeout=60, env=env
        )

    made = cli("create", name, "--role", "write", "--namespaces", "team-a,team-b")
    assert made.returncode == 0, made.stderr
    assert "cannot be shown again" in made.stdout and "secret: sct_" in made.stdout
    listed = cli("list")
    row = next(ln for ln in listed.stdout.splitlines() if ln.startswith(name))
    assert row.split()[:4] == [name, "write", "team-a,team-b", "store"]
    bad = cli("create", "x", "--role", "write", "--namespaces", "Team A")
    assert bad.returncode == 1 and "token.namespaces" in bad.stderr and "Traceback" not in bad.stderr
    assert cli("revoke", name).returncode == 0
    gone = cli("revoke", name)
    assert gone.returncode == 1 and f"no token named '{name}'" in gone.stderr and "Traceback" not in gone.stderr


def test_a_forwarded_call_is_not_widened(etcd_server, database_servers, tmp_path):
    """A node whose own token may only read forwards an admin's write: the leader refuses it."""
    url, drop = create_database("sqlite", directory=tmp_path)
    c = Cluster(
        etcd_server.endpoints,
        url,
        f"/t{uuid.uuid4().hex[:12]}",
        4,
        4,
        str(tmp_path),
        extra_args=["--auth-token-file", _token_file(str(tmp_path))],
    )
    try:
        c.add("full", env={"SHARDCRON_NODE_TOKEN": NODE})
        ro = c.add("ro", env={"SHARDCRON_NODE_TOKEN": NODE_RO})
        c.wait_settled({"full", "ro"}, 120)  # no shard moves after this: the leaders read below stay
        with token_client(ro, OPS) as admin:
            ident = _forwarded_from(c, "ro", "default")
            e = denied(lambda: admin.put_job(hourly_job(ident)))
            assert "needs role write" in e.details and "token 'ops' has role read" in e.details
            with pytest.raises(ApiError) as missing:
                admin.get_job(ident)  # a read is within both scopes: forwarded, and answered
            assert missing.value.code is grpc.StatusCode.NOT_FOUND
        with token_client(c.nodes["full"], OPS) as direct:
            direct.put_job(hourly_job(ident))  # the same caller through the leader's own node may write
            direct.delete_job(ident)
    finally:
        c.stop_all()
        drop()


def test_a_calendar_lists_only_the_jobs_its_reader_may_see(cluster, teams):
    from shardcron.spec.calendar_tables import parse_calendar

    name = f"holidays-{uuid.uuid4().hex[:6]}"
    n2 = cluster.nodes["n2"]
    with (
        token_client(n2, OPS) as admin,
        token_client(n2, teams["a"], "team-a") as a,
        token_client(n2, teams["b"], "team-b") as b,
    ):
        admin.put_calendar(parse_calendar(name, {"exclude_dates": ["2026-12-25"]}))
        for c in (a, b):
            wait_until(
                lambda: admitted(c, hourly_job(name, calendars=[name])),
                30,
                what="the job admitted once its calendar is known where it is admitted",
            )
        _, jobs = a.get_calendar(name)
        assert [namespace_of(k) for k in jobs] == ["team-a"]
        _, jobs = admin.get_calendar(name)
        assert sorted(namespace_of(k) for k in jobs) == ["team-a", "team-b"]
        denied(lambda: a.delete_calendar(name, force=True))
        for c in (a, b):
            c.delete_job(name)
        admin.delete_calendar(name)


def test_a_team_admin_lists_only_its_namespaces(cluster, teams):
    name = f"team-a-admin-{uuid.uuid4().hex[:6]}"
    n3 = cluster.nodes["n3"]
    with token_client(n3, OPS) as ops:
        _, secret = ops.create_token(name, "admin", ["team-a"])
        assert {"team-a", "team-b", "default"} <= {n.name for n in ops.list_namespaces()}
    with token_client(n3, secret) as team_admin:
        assert [n.name for n in team_admin.list_namespaces()] == ["team-a"]
        denied(lambda: team_admin.create_namespace("team-c"))  # namespaces are the cluster's to share out
    with token_client(n3, OPS) as ops:
        ops.revoke_token(name)
