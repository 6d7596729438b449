"""A node and the CLI against an etcd with TLS (mutual) and with authentication enabled."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardcron.coordination.etcd import EtcdSecurity
from shardcron.dev.testing.cluster import Cluster
from shardcron.dev.testing.etcd_server import EtcdCluster
from tests.support.pki import make_pki

pytestmark = pytest.mark.cluster


@pytest.fixture
def secured_etcd(tmp_path):
    paths = make_pki(tmp_path)
    sec = EtcdSecurity(ca_file=paths["ca.pem"], cert_file=paths["client.pem"], key_file=paths["client-key.pem"])
    cluster = EtcdCluster(
        1,
        scheme="https",
        client_security=sec,
        extra_args=[
            "--cert-file",
            paths["server.pem"],
            "--key-file",
            paths["server-key.pem"],
            "--client-cert-auth",
            "--trusted-ca-file",
            paths["ca.pem"],
        ],
    ).start()
    etcdctl = [
        "etcdctl",
        "--endpoints",
        cluster.endpoints,
        "--cacert",
        paths["ca.pem"],
        "--cert",
        paths["client.pem"],
        "--key",
        paths["client-key.pem"],
    ]
    for cmd in (["user", "add", "root:s3cret-pw"], ["auth", "enable"]):
        out = subprocess.run(
            [*etcdctl, *cmd], capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"}
        )
        assert out.returncode == 0, out.stderr
    yield cluster, paths
    cluster.stop()


def test_a_node_works_against_etcd_with_tls_and_auth(secured_etcd, tmp_path, etcd_prefix):
    cluster, paths = secured_etcd
    tls = ["--etcd-ca", paths["ca.pem"], "--etcd-cert", paths["client.pem"], "--etcd-key", paths["client-key.pem"]]
    auth = ["--etcd-user", "root"]
    c = Cluster(
        cluster.endpoints, f"sqlite:///{tmp_path}/s.db", etcd_prefix, 4, 4, str(tmp_path), extra_args=[*tls, *auth]
    )
    env = {"SHARDCRON_ETCD_PASSWORD": "s3cret-pw"}
    try:
        c.add("n0", env=env)
        from shardcron.cli import shard_map
        from shardcron.dev.testing.cluster import wait_until

        sec = EtcdSecurity(paths["ca.pem"], paths["client.pem"], paths["client-key.pem"], "root", "s3cret-pw")
        wait_until(
            lambda: (
                (m := shard_map(cluster.endpoints, etcd_prefix, sec)["shards"]) and all(r["leader"] == "n0" for r in m)
            ),
            60,
            0.2,
            "the node to lead every shard",
        )
        base = [sys.executable, "-m", "shardcron", "shards", "--etcd", cluster.endpoints, "--prefix", etcd_prefix]
        ok = subprocess.run([*base, *tls, *auth], capture_output=True, text=True, timeout=60, env={**os.environ, **env})
        assert ok.returncode == 0 and "n0" in ok.stdout, ok.stderr
        no_password = subprocess.run([*base, *tls], capture_output=True, text=True, timeout=60)
        assert no_password.returncode == 1 and "Traceback" not in no_password.stderr
        wrong = subprocess.run(
            [*base, *tls, *auth],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SHARDCRON_ETCD_PASSWORD": "nope"},
        )
        assert wrong.returncode == 1 and "Traceback" not in wrong.stderr and "nope" not in wrong.stderr
        log = c.nodes["n0"].log_text()
        assert "s3cret-pw" not in log, "the etcd password must never be logged"
    finally:
        c.stop_all()
    assert "Traceback" not in c.nodes["n0"].log_text()
