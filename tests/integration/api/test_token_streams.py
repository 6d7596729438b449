"""Streams and tokens on real nodes (real etcd, real SQLite, two nodes each serving a dashboard):

- revoking a token through one node ends every open stream of it on the other (the API's WatchTicks of one
  job and of every job, the dashboard's job and cluster streams), each saying the token was revoked;
- a job stream the visitor's token may not see is refused at once and holds no slot; one the API ends
  is closed; a visitor holds at most MAX_STREAMS_PER_VISITOR streams, and the others still get theirs.
"""

from __future__ import annotations

import re
import threading
import uuid
from datetime import datetime

import grpc
import httpx
import pytest

from shardcron.api.tokens import hash_secret
from shardcron.client.errors import ApiError
from shardcron.dashboard.live import MAX_STREAMS_PER_VISITOR
from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.spec.job import job_from_dict
from tests.support.clusters import stopped_after
from tests.support.sse import sse_events
from tests.support.tenancy import accepted, token_client

pytestmark = pytest.mark.cluster

OPS, NODE = "ops-secret-" + "o" * 24, "node-secret-" + "n" * 24
READER_A = "reader-a-secret-" + "r" * 24  # read on team-a only
REVOKE_PROMISE_S = 2.0  # the product's: a revoked token's streams end within it
TEST_DEADLINE_S = 20.0  # the test's, generous for a loaded machine

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z")


@pytest.fixture(scope="module")
def cluster(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("token-streams")
    tokens = d / "tokens"
    tokens.write_text(
        f"ops {hash_secret(OPS)} admin *\nnode {hash_secret(NODE)} admin *\n"
        f"reader-a {hash_secret(READER_A)} read team-a\n"
    )
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{d}/store.db",
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(d),
        extra_args=["--auth-token-file", str(tokens)],
    )
    for name in ("n0", "n1"):
        port = free_port()
        node = c.add(name, env={"SHARDCRON_NODE_TOKEN": NODE}, extra_args=["--http-listen", f"127.0.0.1:{port}"])
        node.dashboard = f"http://127.0.0.1:{port}"
    with stopped_after(c):
        c.wait_balanced({"n0", "n1"}, 120)
        for node in c.nodes.values():
            wait_until(lambda: _answers(node.dashboard + "/login"), 60, 0.2, f"{node.node_id}'s dashboard")
        with token_client(c.nodes["n0"], OPS) as ops:
            ops.put_job(job_from_dict({"id": "every-second", "every": "1s", "executor": {"kind": "noop"}}))
        yield c


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
        return True
    except httpx.HTTPError:
        return False


def _logged_at(text: str, needle: str) -> float:
    """The time (epoch s) of the first log line holding ``needle``."""
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m and needle in line:
            return datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
    raise AssertionError(f"no log line holds {needle!r}")


class _Ending:
    """Consumes ``events`` in a thread; ``ended`` is set when they end, ``error`` holds how."""

    def __init__(self, events):
        self.ended = threading.Event()
        self.first = threading.Event()
        self.error: BaseException | None = None
        self.items: list = []
        threading.Thread(target=self._run, args=(events,), daemon=True).start()

    def _run(self, events) -> None:
        try:
            for item in events:
                self.items.append(item)
                self.first.set()
        except BaseException as e:  # noqa: BLE001 - what ended the stream is the finding
            self.error = e
        finally:
            self.ended.set()


def test_revoking_a_token_on_one_node_ends_all_its_streams_on_another(cluster):
    n0, n1 = cluster.nodes["n0"], cluster.nodes["n1"]
    name = f"short-lived-{uuid.uuid4().hex[:6]}"
    with token_client(n1, OPS) as ops:
        _, secret = ops.create_token(name, "read", ["*"])
    wait_until(lambda: accepted(n0, secret), 30, 0.1, "n0 to know the new token")
    bearer = {"Authorization": f"Bearer {secret}"}

    with (
        token_client(n0, secret) as api,
        httpx.Client(base_url=n0.dashboard, timeout=60) as http,
        http.stream(
            "GET", "/events/job", params={"id": "every-second", "namespace": "default"}, headers=bearer
        ) as job_page,
        http.stream("GET", "/events/cluster", headers=bearer) as cluster_page,
    ):
        one_job = api.watch_ticks("every-second")
        every_job = api.watch_ticks(namespace="*")
        streams = {
            "WatchTicks of one job": _Ending(one_job),
            "WatchTicks of every job": _Ending(every_job),
            "the dashboard's job stream": _Ending(sse_events(job_page, 120)),
            "the dashboard's cluster stream": _Ending(sse_events(cluster_page, 120)),
        }
        try:
            for what, s in streams.items():  # each delivers before the revoke: a live stream is ended
                assert s.first.wait(TEST_DEADLINE_S), f"{what} delivered nothing (ended: {s.error!r})"
            with token_client(n1, OPS) as ops:
                ops.revoke_token(name)  # on the other node: n0 learns it through etcd
            for what, s in streams.items():
                assert s.ended.wait(TEST_DEADLINE_S), f"{what} still open {TEST_DEADLINE_S} s after the revoke"
        finally:
            one_job.cancel()
            every_job.cancel()

    for what in ("WatchTicks of one job", "WatchTicks of every job"):
        e = streams[what].error
        assert isinstance(e, ApiError) and e.code is grpc.StatusCode.UNAUTHENTICATED, (what, e)
        assert "token revoked" in str(e), (what, e)
    job_events = streams["the dashboard's job stream"].items
    assert job_events[-1][0] == "watch-error" and "revoked" in job_events[-1][1], job_events[-3:]
    assert "has been revoked" in streams["the dashboard's cluster stream"].items[-1][1]

    # The product's promise, measured by the nodes themselves: n1 logged the revoke (its audit line, after the
    # bump) and n0 the end of the token's API streams.
    revoked_at = _logged_at(n1.log_text(), f"call=RevokeToken token=ops namespace=- target={name}")
    ended_at = _logged_at(n0.log_text(), f"a stream of token {name!r} ended: the token was revoked")
    assert ended_at - revoked_at < REVOKE_PROMISE_S, (revoked_at, ended_at)


def test_a_stream_the_token_may_not_see_is_refused_at_once_and_holds_no_slot(cluster):
    n0 = cluster.nodes["n0"]
    reader = {"Authorization": f"Bearer {READER_A}"}
    with httpx.Client(base_url=n0.dashboard, timeout=30) as http:
        for _ in range(3 * MAX_STREAMS_PER_VISITOR):  # more than the visitor's cap: none is held
            refused = http.get("/events/job", params={"id": "every-second", "namespace": "team-b"}, headers=reader)
            assert refused.status_code == 403 and "team-b" in refused.text, refused.text
        # One the API ends (a job id of 400 bytes, over its limit) says why and closes, rather than staying open.
        with http.stream("GET", "/events/job", params={"id": "é" * 200, "namespace": "team-a"}, headers=reader) as r:
            seen = list(sse_events(r, TEST_DEADLINE_S))
        assert seen and seen[-1][0] == "watch-error", seen
    # The API refuses the same watch at once too.
    with token_client(n0, READER_A) as api:
        with pytest.raises(ApiError) as e:
            next(iter(api.watch_ticks("every-second", namespace="team-b")))
        assert e.value.code is grpc.StatusCode.PERMISSION_DENIED


def test_a_visitor_holds_at_most_its_share_of_the_dashboards_streams(cluster):
    n1 = cluster.nodes["n1"]
    reader = {"Authorization": f"Bearer {READER_A}"}
    limits = httpx.Limits(max_connections=4 * MAX_STREAMS_PER_VISITOR)
    with httpx.Client(base_url=n1.dashboard, timeout=30, limits=limits) as http:
        held = []
        try:
            for _ in range(MAX_STREAMS_PER_VISITOR):
                r = http.send(http.build_request("GET", "/events/cluster", headers=reader), stream=True)
                held.append(r)
                assert r.status_code == 200
            over = http.get("/events/cluster", headers=reader)
            assert over.status_code == 429 and f"({MAX_STREAMS_PER_VISITOR})" in over.text, over.text
            # Another visitor still gets a stream while this one holds its share.
            with http.stream("GET", "/events/cluster", headers={"Authorization": f"Bearer {OPS}"}) as admin:
                assert admin.status_code == 200
                assert 'id="shard-grid"' in next(sse_events(admin, TEST_DEADLINE_S))[1]
        finally:
            for r in held:
                r.close()

        # Closed streams give the visitor's slots back (once the dashboard has seen them go).
        def one_more() -> bool:
            with http.stream("GET", "/events/cluster", headers=reader) as r:
                return r.status_code == 200

        wait_until(one_more, TEST_DEADLINE_S, 0.2, "the visitor's slots to come back")
