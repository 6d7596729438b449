"""A TLS (mutual) and token-protected cluster: anonymous calls get UNAUTHENTICATED, authenticated ones and
node-to-node forwarding work, health checks stay open, and the shell allow-list holds."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron.client.channel import ChannelSecurity, open_channel
from shardcron.client.client import Client
from shardcron.client.errors import ApiError, InvalidRequest
from shardcron.dev.testing.cluster import Cluster, eventually
from shardcron.sharding import shard_for
from shardcron.spec.job import job_from_dict
from tests.support.pki import make_pki

pytestmark = pytest.mark.cluster


@pytest.fixture
def pki(tmp_path):
    out = make_pki(tmp_path, client_name="operator")
    out["node.pem"], out["node-key.pem"] = out["server.pem"], out["server-key.pem"]
    (tmp_path / "tokens").write_text("# API tokens\nalpha-token\nbeta-token\n")
    out["tokens"] = str(tmp_path / "tokens")
    return out


def test_tls_and_token_protected_cluster(pki, tmp_path, etcd_server, etcd_prefix):
    flags = [
        "--tls-cert",
        pki["node.pem"],
        "--tls-key",
        pki["node-key.pem"],
        "--tls-client-ca",
        pki["ca.pem"],
        "--tls-ca",
        pki["ca.pem"],
        "--auth-token-file",
        pki["tokens"],
        "--allow-shell",
        "--shell-allow",
        r"echo [a-z]+",
    ]
    c = Cluster(etcd_server.endpoints, f"sqlite:///{tmp_path}/s.db", etcd_prefix, 2, 4, str(tmp_path), extra_args=flags)
    try:
        a, b = c.add("n0"), c.add("n1")
        c.wait_balanced({"n0", "n1"}, 90)
        tls = ChannelSecurity(pki["ca.pem"], pki["client.pem"], pki["client-key.pem"])
        authed = ChannelSecurity(pki["ca.pem"], pki["client.pem"], pki["client-key.pem"], token="beta-token")

        with Client([a.address], security=tls) as anonymous:
            with pytest.raises(ApiError) as e:
                list(anonymous.list_jobs())
            assert e.value.code is grpc.StatusCode.UNAUTHENTICATED
        with Client([a.address], security=ChannelSecurity(token="beta-token")) as plaintext:
            with pytest.raises(ApiError) as e:
                plaintext.get_job("x", timeout_s=3)  # no TLS: the handshake fails
            assert e.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        with Client([a.address], security=ChannelSecurity(pki["ca.pem"], token="beta-token")) as no_client_cert:
            with pytest.raises(ApiError) as e:
                no_client_cert.get_job("x", timeout_s=3)  # mTLS: a client certificate is required
            assert e.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

        # Health stays open to probes with TLS but without a token.
        # Health says NOT_SERVING while a node has no session, so on a loaded machine it may take a moment.
        ch = open_channel(a.address, tls)
        health = health_pb2_grpc.HealthStub(ch)
        serving = eventually(
            lambda: (
                health.Check(health_pb2.HealthCheckRequest(), timeout=10).status
                == health_pb2.HealthCheckResponse.SERVING
            ),
            60,
            0.2,
        )
        assert serving, f"n0 never reported SERVING; its log ends:\n{a.log_text()[-3000:]}"
        ch.close()

        leaders = c.leaders()
        with Client([a.address], security=authed) as client:
            ids = [f"job-{i}" for i in range(12)]
            for jid in ids:
                client.put_job(job_from_dict({"id": jid, "every": "1h", "executor": {"kind": "noop"}}))
            assert {shard_for(j, 2) for j in ids} == {0, 1}
            assert {leaders[shard_for(j, 2)] for j in ids} == {"n0", "n1"}, "some calls were forwarded to n1"
            assert sorted(j.id for j in client.list_jobs()) == sorted(ids)
            client.put_job(
                job_from_dict({"id": "greet", "every": "1h", "executor": {"kind": "shell", "command": "echo hello"}})
            )
            with pytest.raises(InvalidRequest, match="executor.command"):
                client.put_job(
                    job_from_dict(
                        {"id": "nope", "every": "1h", "executor": {"kind": "shell", "command": "rm -rf /tmp/x"}}
                    )
                )

        cli = [
            sys.executable,
            "-m",
            "shardcron",
            "jobs",
            "list",
            "--server",
            b.address,
            "--tls-ca",
            pki["ca.pem"],
            "--tls-cert",
            pki["client.pem"],
            "--tls-key",
            pki["client-key.pem"],
            "--json",
        ]
        ok = subprocess.run(
            cli, capture_output=True, text=True, timeout=60, env={**os.environ, "SHARDCRON_TOKEN": "alpha-token"}
        )
        assert ok.returncode == 0 and "job-0" in ok.stdout, ok.stderr
        env = {k: v for k, v in os.environ.items() if k != "SHARDCRON_TOKEN"}
        denied = subprocess.run(cli, capture_output=True, text=True, timeout=60, env=env)
        assert denied.returncode == 1 and "bearer token" in denied.stderr and "Traceback" not in denied.stderr
        for n in (a, b):
            assert "alpha-token" not in n.log_text() and "beta-token" not in n.log_text()
    finally:
        c.stop_all()
