"""The dashboard over plain HTTP(S), without a browser: TLS with the API's certificate, bearer tokens,
the shared metrics port, a node without tokens, and the clear errors of a bad set-up."""

from __future__ import annotations

import re
import socket
import ssl
import uuid

import httpx
import pytest
from prometheus_client import CollectorRegistry

from shardcron import Client
from shardcron.api.security import load_tokens
from shardcron.api.token_source import NodeTokens
from shardcron.api.tokens import hash_secret
from shardcron.client.channel import ChannelSecurity
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.server import Dashboard, DashboardServer
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from tests.support.clusters import stopped_after
from tests.support.dashboard_api import RemoteApi
from tests.support.pki import make_pki
from tests.support.sse import sse_events
from tests.support.tenancy import hourly_job

pytestmark = pytest.mark.cluster

ADMIN, READER = "admin-secret-" + "a" * 24, "reader-secret-" + "r" * 24


def _answers(url: str, **kw) -> bool:
    try:
        httpx.get(url, timeout=2, **kw)
        return True
    except httpx.HTTPError:
        return False


def test_tls_bearer_tokens_and_the_shared_metrics_port(tmp_path, etcd_server):
    pki = make_pki(tmp_path)
    (tmp_path / "tokens").write_text(f"admin {hash_secret(ADMIN)} admin *\nreader {hash_secret(READER)} read *\n")
    port = free_port()
    flags = [
        "--tls-cert",
        pki["server.pem"],
        "--tls-key",
        pki["server-key.pem"],
        "--tls-ca",
        pki["ca.pem"],
        "--auth-token-file",
        str(tmp_path / "tokens"),
        "--http-listen",
        f"127.0.0.1:{port}",
        "--metrics-listen",
        f"127.0.0.1:{port}",
    ]
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/s.db",
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(tmp_path),
        extra_args=flags,
    )
    node = c.add("n0", env={"SHARDCRON_NODE_TOKEN": ADMIN})
    base = f"https://127.0.0.1:{port}"
    trust = ssl.create_default_context(cafile=pki["ca.pem"])
    with stopped_after(c):
        c.wait_all_led(90)
        wait_until(lambda: _answers(base + "/login", verify=trust), 60, 0.2, "the dashboard to answer")
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/login", timeout=5)  # TLS only: plain HTTP gets nowhere
        with Client([node.address], security=ChannelSecurity(pki["ca.pem"], token=ADMIN)) as api:
            api.put_job(hourly_job("visible"))

        with httpx.Client(base_url=base, verify=trust, timeout=30) as http:
            anonymous = http.get("/jobs")
            assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")
            assert http.get("/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 303
            listed = http.get("/jobs", headers={"Authorization": f"Bearer {READER}"})
            assert listed.status_code == 200 and 'data-job="visible"' in listed.text
            assert "set-cookie" not in listed.headers, "a bearer request opens no session"
            # A script with a read token is refused a write, with the API's reason and status.
            refused = http.post(
                "/job/pause",
                data={"id": "visible", "namespace": "default"},
                headers={"Authorization": f"Bearer {READER}"},
            )
            assert refused.status_code == 403 and "needs role write" in refused.text
            done = http.post(
                "/job/pause",
                data={"id": "visible", "namespace": "default"},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert done.status_code == 200 and "paused" in done.text
            # A backfill from the form's fields; a bad field is named, not a crash.
            admin = {"Authorization": f"Bearer {ADMIN}"}
            form = {
                "id": "visible",
                "namespace": "default",
                "from": "2026-01-01T00:00:00Z",
                "to": "2026-01-01T03:00:00Z",
                "rate": "5",
            }
            for field, bad, named in (("rate", "fast", "rate:"), ("rate", "0", "rate:"), ("from", "yesterday", "from")):
                refused = http.post("/job/backfill", data={**form, field: bad}, headers=admin)
                assert refused.status_code == 400 and named in refused.text, (field, bad, refused.text)
            started = http.post("/job/backfill", data=form, headers=admin)
            assert started.status_code == 200 and "started: 3 slots" in started.text, started.text
            unknown = http.post("/job/explode", data=form, headers=admin)
            assert unknown.status_code == 404 and "pause, resume, trigger or backfill" in unknown.text
            # The login form sets a cookie only a secure, same-site request sends back.
            login = http.post("/login", data={"token": ADMIN, "next": "/jobs?status=paused"})
            assert login.status_code == 303 and login.headers["location"] == "/jobs?status=paused"
            cookie = login.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie and "secure" in cookie
            assert ADMIN not in login.headers["set-cookie"] and ADMIN not in login.headers["location"]
            assert 'data-job="visible"' in http.get("/jobs?status=paused").text
            # The form without script: a plain POST with the session's CSRF field, then back to the job.
            job_page = http.get("/job?namespace=default&id=visible").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', job_page).group(1)
            resumed = http.post(
                "/job/resume", data={"id": "visible", "namespace": "default", "csrf": csrf}, headers={"Origin": base}
            )
            assert resumed.status_code == 303 and resumed.headers["location"] == "/job?namespace=default&id=visible"
            assert 'id="job-state">active<' in http.get(resumed.headers["location"]).text
            # A session ends when its token is revoked, at its next request.
            with Client([node.address], security=ChannelSecurity(pki["ca.pem"], token=ADMIN)) as api:
                _, temporary = api.create_token("temporary", "read", ["*"])
                with httpx.Client(base_url=base, verify=trust, timeout=30) as other:
                    assert other.post("/login", data={"token": temporary}).status_code == 303
                    assert other.get("/jobs").status_code == 200
                    with other.stream("GET", "/events/cluster") as live:  # a cluster page left open
                        events = sse_events(live)
                        assert 'id="shard-grid"' in next(events)[1]
                        api.revoke_token("temporary")
                        rest = list(events)
                    assert rest, "the stream ended at once, without saying why"
                    last = rest[-1][1]
                    assert "has been revoked" in last and 'id="shard-grid"' not in last, rest
                    wait_until(
                        lambda: other.get("/jobs").status_code == 303, 30, 0.2, "the revoked token's session to end"
                    )
                    assert other.get("/jobs").headers["location"].startswith("/login")
            # /metrics shares the port, open as the metrics port always is (Prometheus sends no token).
            metrics = http.get("/metrics")
            assert metrics.status_code == 200 and "shardcron_shards_led" in metrics.text


def test_a_node_without_tokens_serves_a_session_for_csrf_and_says_it_is_open(tmp_path, etcd_server):
    port = free_port()
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/s.db",
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(tmp_path),
        extra_args=["--http-listen", f"127.0.0.1:{port}"],
    )
    c.add("n0")
    base = f"http://127.0.0.1:{port}"
    with stopped_after(c):
        c.wait_all_led(90)
        wait_until(lambda: _answers(base + "/cluster"), 60, 0.2, "the dashboard to answer")
        with httpx.Client(base_url=base, timeout=30, follow_redirects=True) as http:
            page = http.get("/cluster")
            assert page.status_code == 200 and "checks no API tokens" in page.text
            assert http.cookies.get("shardcron_session"), "a session, so actions can carry a CSRF token"
            assert http.get("/login").url.path == "/cluster", "nothing to log in with"
            forged = http.post("/job/pause", data={"id": "x", "namespace": "default"})
            assert forged.status_code == 403, "no auth is no excuse for CSRF"
        with httpx.Client(base_url=base, timeout=30) as stale:  # a page left open while its session ended
            refused = stale.post("/job/pause", data={"id": "x", "namespace": "default", "csrf": "gone"})
            assert refused.status_code == 403 and "reload the page" in refused.text, (refused, refused.text)
        assert not _answers(f"http://127.0.0.1:{free_port()}/"), "sanity: a closed port does not answer"


def test_a_dashboards_cluster_streams_share_one_reader_of_the_map(tmp_path, etcd_server):
    """Two visitors, each with a token of their own, follow one reading of the map, which stops with the last."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {hash_secret(ADMIN)} admin *\nreader {hash_secret(READER)} read *\n")
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/s.db",
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(tmp_path),
        extra_args=["--auth-token-file", str(tokens)],
    )
    node = c.add("n0", env={"SHARDCRON_NODE_TOKEN": ADMIN})
    with stopped_after(c):
        c.wait_all_led(90)
        # A dashboard in this process, over the node's API (over gRPC), so that its reader can be watched.
        api = RemoteApi(node.address)
        dashboard = Dashboard(
            node_id="n0",
            api=api,  # type: ignore[arg-type]  # the in-process API's calls, over a channel
            tokens=NodeTokens(load_tokens(str(tokens))[0]),
            history=MetricsHistory(CollectorRegistry()),
        )
        port = free_port()
        server = DashboardServer(dashboard, f"127.0.0.1:{port}").start()
        feed = dashboard.streams.map_feed
        try:
            with (
                httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
                http.stream("GET", "/events/cluster", headers={"Authorization": f"Bearer {ADMIN}"}) as a,
                http.stream("GET", "/events/cluster", headers={"Authorization": f"Bearer {READER}"}) as b,
            ):
                pages = [sse_events(a, 120), sse_events(b, 120)]
                for page in pages:
                    assert 'id="shard-grid"' in next(page)[1], "each stream's first reading is its own"
                wait_until(lambda: feed.followers == 2, 30, 0.05, "both streams to follow the shared reader")
                assert feed.reading
                c.add("n1", env={"SHARDCRON_NODE_TOKEN": ADMIN})
                for page in pages:  # a change of the map reaches both, from the one reader
                    assert any('data-node="n1"' in html for _, html in page), "n1 never appeared"
            wait_until(
                lambda: feed.followers == 0 and not feed.reading,
                30,
                0.05,
                "the reader to stop when no cluster page is open",
            )
        finally:
            server.stop()
            api.close()


def test_a_taken_port_and_a_missing_extra_are_clear_errors(tmp_path, etcd_server):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    # A module named jinja2 that fails to import stands for the extra not being installed.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "jinja2.py").write_text("raise ImportError('No module named jinja2')\n")
    c = Cluster(etcd_server.endpoints, f"sqlite:///{tmp_path}/s.db", f"/t{uuid.uuid4().hex[:12]}", 2, 4, str(tmp_path))
    try:
        busy = c.add("busy", extra_args=["--http-listen", f"127.0.0.1:{port}"])
        assert busy.proc.wait(90) != 0
        text = busy.log_text()
        assert f"--http-listen 127.0.0.1:{port}" in text and "Traceback" not in text, text[-3000:]
        bare = c.add("bare", extra_args=["--http-listen", f"127.0.0.1:{free_port()}"], env={"PYTHONPATH": str(shim)})
        assert bare.proc.wait(90) != 0
        text = bare.log_text()
        assert "'dashboard' extra" in text and "pip install 'shardcron[dashboard]'" in text, text[-3000:]
        assert "Traceback" not in text
    finally:
        c.stop_all()
        taken.close()


def test_tokens_forms_and_redirects_are_read_strictly(tmp_path, etcd_server):
    """The dashboard reads a token as the API does (Bearer in any case, or bare; whitespace dropped), sends
    a login only to a path of its own, and refuses an oversized field or body by name."""
    (tmp_path / "tokens").write_text(f"admin {hash_secret(ADMIN)} admin *\n")
    port = free_port()
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{tmp_path}/s.db",
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(tmp_path),
        extra_args=["--auth-token-file", str(tmp_path / "tokens"), "--http-listen", f"127.0.0.1:{port}"],
    )
    node = c.add("n0", env={"SHARDCRON_NODE_TOKEN": ADMIN})
    base = f"http://127.0.0.1:{port}"
    with stopped_after(c):
        c.wait_all_led(90)
        wait_until(lambda: _answers(base + "/login"), 60, 0.2, "the dashboard to answer")
        with Client([node.address], security=ChannelSecurity(token=ADMIN)) as api:
            api.put_job(hourly_job("visible"))
        with httpx.Client(base_url=base, timeout=30) as http:
            for value in (f"Bearer {ADMIN}", f"bearer {ADMIN}", f"BEARER {ADMIN}", ADMIN, f"Bearer  {ADMIN}"):
                listed = http.get("/jobs", headers={"Authorization": value})
                assert listed.status_code == 200 and 'data-job="visible"' in listed.text, value
            for token in (f"{ADMIN}\n", f" {ADMIN}", f"\t{ADMIN} "):  # pasted with a newline or a space
                with httpx.Client(base_url=base, timeout=30) as browser:
                    login = browser.post("/login", data={"token": token, "next": "/jobs"})
                    assert login.status_code == 303 and login.headers["location"] == "/jobs", repr(token)
            # The open redirect of the finding, and its cousins: each lands on this site's root.
            for target in (
                "/\t/evil.example/phish",
                "//evil.example/phish",
                "/\\evil.example",
                "https://evil.example",
                "/%2F/evil.example",
            ):
                with httpx.Client(base_url=base, timeout=30) as browser:
                    login = browser.post("/login", data={"token": ADMIN, "next": target})
                    assert login.status_code == 303 and login.headers["location"] == "/", (target, login.headers)
            page = http.get("/login", params={"next": "/\t/evil.example/phish"}).text
            assert "evil.example" not in page
            admin = {"Authorization": f"Bearer {ADMIN}"}
            for name, limit in (("id", 256), ("namespace", 64), ("from", 64), ("rate", 32)):
                form = {
                    "id": "visible",
                    "namespace": "default",
                    "from": "2026-01-01T00:00:00Z",
                    "to": "2026-01-01T03:00:00Z",
                    "rate": "5",
                    name: "x" * (limit + 1),
                }
                refused = http.post("/job/backfill", data=form, headers=admin)
                assert refused.status_code == 400, (name, refused.text)
                assert f"{name}: at most {limit} characters, got {limit + 1}" in refused.text, refused.text
                assert "x" * 40 not in refused.text, "the value is not echoed"
            too_long = http.get("/events/job", params={"id": "x" * 300}, headers=admin)
            assert too_long.status_code == 400 and "id: at most 256 characters" in too_long.text
            huge = http.post(
                "/job/pause", data={"id": "visible", "namespace": "default", "pad": "x" * 100_000}, headers=admin
            )
            assert huge.status_code == 413, huge.status_code
