"""Namespace RPCs under scoped tokens, on a real 3-node cluster (real etcd, real SQLite): a team's admin
lists and reads only its own namespaces and cannot create, change or delete any; a write token cannot
manage namespaces at all; a cluster admin's forced delete goes through every shard's leader with the
caller's identity."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from shardcron.api.tokens import hash_secret
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.spec.job import job_from_dict
from tests.support.clusters import stopped_after
from tests.support.commands import shardcron
from tests.support.tenancy import accepted, denied, token_client

pytestmark = pytest.mark.cluster

OPS, NODE = "ops-secret-" + "x" * 20, "node-secret-" + "y" * 20


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("namespaces-tokens")
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write(f"ops   {hash_secret(OPS)}  admin  *\nnode  {hash_secret(NODE)}  admin  *\n")
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{d}/store.db",
        f"/t{uuid.uuid4().hex[:12]}",
        4,
        4,
        str(d),
        extra_args=["--auth-token-file", tokens],
    )
    for name in ("n1", "n2", "n3"):
        c.add(name, env={"SHARDCRON_NODE_TOKEN": NODE})
    with stopped_after(c):
        c.wait_balanced({"n1", "n2", "n3"}, 120)
        yield c


def test_a_teams_tokens_see_and_manage_only_what_their_role_allows(cluster):
    n1, n2, n3 = (cluster.nodes[n] for n in ("n1", "n2", "n3"))
    tag = uuid.uuid4().hex[:6]
    mine, theirs = f"mine-{tag}", f"theirs-{tag}"
    with token_client(n1, OPS) as ops:
        ops.create_namespace(mine)
        ops.create_namespace(theirs)
        team_admin = ops.create_token(f"admin-{tag}", "admin", [mine])[1]
        team_writer = ops.create_token(f"writer-{tag}", "write", [mine])[1]
        assert {mine, theirs, "default"} <= {n.name for n in ops.list_namespaces()}
    for node in (n2, n3):
        for secret in (team_admin, team_writer):
            wait_until(lambda: accepted(node, secret), 60, 0.2, what=f"{node.node_id} to accept a new token")
    with token_client(n2, team_admin) as a:
        assert [n.name for n in a.list_namespaces()] == [mine]
        assert a.get_namespace(mine).name == mine
        assert theirs in str(denied(lambda: a.get_namespace(theirs)))
        denied(lambda: a.create_namespace(f"new-{tag}"))
        denied(lambda: a.update_namespace(mine, quota={"max_jobs": 1000}))  # its own limits are the cluster's
        denied(lambda: a.delete_namespace(mine, force=True))
    with token_client(n3, team_writer) as w:
        denied(lambda: w.list_namespaces())
        denied(lambda: w.get_namespace(mine))
    with token_client(n3, team_writer, namespace=mine) as w:  # jobs on every shard, so every leader
        results = w.put_jobs(
            [job_from_dict({"id": f"j{i}", "every": "1h", "executor": {"kind": "noop"}}) for i in range(8)]
        )
        assert all(r.ok for r in results), results
    with token_client(n3, OPS) as ops:
        assert ops.delete_namespace(mine, force=True) == 8
        assert mine not in {n.name for n in ops.list_namespaces()}
        ops.delete_namespace(theirs)


def test_a_read_token_diffs_a_file_and_is_told_which_secret_values_it_could_not_compare(cluster, tmp_path):
    """``jobs diff`` compares secret values through a PutJobs ``validate_only``, which takes the write's
    permission: a read token still gets the plan, with the jobs it could not compare listed, and exit 0."""
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    tag = uuid.uuid4().hex[:6]
    team = f"diff-{tag}"
    with token_client(n1, OPS) as ops:
        ops.create_namespace(team)
        writer = ops.create_token(f"writer-{tag}", "write", [team])[1]
        reader = ops.create_token(f"reader-{tag}", "read", [team])[1]
    for secret in (writer, reader):
        wait_until(lambda: accepted(n2, secret), 60, 0.2, what=f"n2 to accept token {secret[:4]}...")
    path = tmp_path / "jobs.toml"
    path.write_text(
        f'namespace = "{team}"\n[jobs.hook]\nevery = "1h"\npaused = true\n'
        'executor = { kind = "http", url = "http://127.0.0.1:9/", headers = { X-Api-Key = "k1" } }\n'
    )

    def cli(secret: str, *args: str) -> subprocess.CompletedProcess:
        out = shardcron(*args, "-f", str(path), "--server", n2.address, env={"SHARDCRON_TOKEN": secret})
        assert "Traceback" not in out.stderr, out.stderr
        return out

    assert cli(writer, "jobs", "apply").returncode == 0
    written = cli(writer, "jobs", "diff", "--json")
    assert written.returncode == 0 and json.loads(written.stdout)["secrets_unchecked"] == [], written.stderr
    read = cli(reader, "jobs", "diff")
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines()[0] == f"= {team}/hook: unchanged (secret values not compared)"
    assert "were not compared" in read.stdout.splitlines()[-1]
    denied_apply = cli(reader, "jobs", "apply")
    assert denied_apply.returncode == 1 and "needs role write" in denied_apply.stderr, denied_apply.stderr
