"""The dashboard calls its node's API in this process: no page view or action reaches the node's gRPC server,
and the API's checks still apply (a read token's pause is refused, and audit-logged, as over gRPC); a job
whose shard another node leads is still forwarded to that node over gRPC, as the API forwards any call."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import dataclass

import grpc
import httpx
from prometheus_client import CollectorRegistry

from shardcron import Client, clock
from shardcron.api.security import ServerSecurity
from shardcron.api.server import ApiServer
from shardcron.api.tokens import hash_secret, parse_token_file
from shardcron.client.channel import ChannelSecurity
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.server import Dashboard, DashboardServer
from shardcron.dev.testing.cluster import wait_until
from shardcron.dev.testing.etcd_server import free_port
from shardcron.jobkey import join_key
from shardcron.model import Tick, TickStatus
from shardcron.runtime.lifeline import Lifeline
from shardcron.runtime.node_loop import NodeLoop
from shardcron.store import ensure_schema, ensure_shards, make_engine, put_job, raise_fence
from tests.support.sse import sse_events
from tests.support.tenancy import hourly_job

ADMIN, READER = "admin-secret-" + "a" * 24, "reader-secret-" + "r" * 24
FENCE = 1
PAUSE = {"id": "visible", "namespace": "default"}


class CountingInterceptor(grpc.aio.ServerInterceptor):
    """Every call a node's gRPC server receives, by method."""

    def __init__(self):
        self.methods: list[str] = []

    async def intercept_service(self, continuation, details):
        self.methods.append(details.method)
        return await continuation(details)


class _OneShardBackend:
    """A node of a one-shard cluster over a real SQLite store; ``leader``: the address of the shard's leader."""

    shard_count = 1
    allow_shell = False

    def __init__(self, node_id: str, engine, address: str, leader: str):
        self.node_id = node_id
        self.engine = engine
        self.address = address
        self.leader = leader
        self.joined = threading.Event()
        self.recorder = None  # what the API's tick hub subscribed, while it has a watcher

    def shard_map(self):
        return {
            "prefix": "/x",
            "shard_count": 1,
            "revision": 1,
            "shards": [{"shard": 0, "leader": "lead", "address": self.leader, "fence": FENCE, "jobs": 1}],
            "nodes": [{"node": "lead", "address": self.leader, "leads": 1}],
        }

    def fence_if_leader(self, shard: int) -> int | None:
        return FENCE if self.leader == self.address else None

    def leader_address(self, shard: int) -> str:
        return self.leader

    def job_written(self, shard, job) -> None:
        pass

    def subscribe_ticks(self, callback):
        self.recorder = callback

        def unsubscribe() -> None:
            self.recorder = None

        return unsubscribe


@dataclass
class Node:
    address: str
    counter: CountingInterceptor
    server: ApiServer | None = None


@contextlib.contextmanager
def two_nodes(tmp_path, *, dashboard_leads: bool):
    """Two API servers over one store, and a dashboard over the first one's API, all on one loop as a node
    runs them; each server counts the calls it gets. Yields the dashboard's URL, its node and the other."""
    engine = make_engine(f"sqlite:///{tmp_path}/s.db")
    ensure_schema(engine, auto_upgrade=True)
    ensure_shards(engine, 1)
    raise_fence(engine, 0, FENCE, "lead", clock.wall_ms())
    put_job(engine, hourly_job("visible"), shard=0, fence=FENCE, node_id="lead", now_ms=clock.wall_ms())
    book = parse_token_file(f"admin {hash_secret(ADMIN)} admin *\nreader {hash_secret(READER)} read *\n")
    told: list = []
    stopping = threading.Event()
    lifeline = Lifeline(lambda name, error: told.append((name, error)), stopping=stopping)
    loop = NodeLoop("test-node-loop", lifeline).start()
    here, there = (
        Node(f"127.0.0.1:{free_port()}", CountingInterceptor()),
        Node(f"127.0.0.1:{free_port()}", CountingInterceptor()),
    )
    leader = (here if dashboard_leads else there).address
    for name, n in (("here", here), ("there", there)):
        n.server = ApiServer(
            _OneShardBackend(name, engine, n.address, leader),
            n.address,
            n.address,
            security=ServerSecurity(tokens=book),
            loop=loop,
            interceptors=[n.counter],
        ).start()
    servers = [here.server, there.server]
    port = free_port()
    dashboard = DashboardServer(
        Dashboard(
            node_id="here",
            api=servers[0].in_process,
            tokens=servers[0].tokens,
            history=MetricsHistory(CollectorRegistry(), lifeline=lifeline),
            lifeline=lifeline,
        ),
        f"127.0.0.1:{port}",
        loop,
    ).start()
    try:
        yield f"http://127.0.0.1:{port}", here, there
    finally:
        dashboard.stop()
        for server in servers:
            server.stop(0)
        stopping.set()
        loop.close()
        engine.dispose()
    assert told == []


def test_page_views_and_actions_reach_no_grpc_server_and_keep_the_apis_checks(tmp_path, caplog):
    reader, admin = {"Authorization": f"Bearer {READER}"}, {"Authorization": f"Bearer {ADMIN}"}
    caplog.set_level(logging.INFO, logger="shardcron.audit")
    threads_before = {t.ident for t in threading.enumerate()}
    with (
        two_nodes(tmp_path, dashboard_leads=True) as (base, here, there),
        httpx.Client(base_url=base, timeout=30) as http,
    ):
        cluster = http.get("/cluster", headers=reader)
        assert cluster.status_code == 200 and 'data-node="lead"' in cluster.text, cluster.text[-2000:]
        jobs = http.get("/jobs", headers=reader)
        assert jobs.status_code == 200 and 'data-job="visible"' in jobs.text
        job = http.get("/job", params={"id": "visible"}, headers=reader)
        assert job.status_code == 200 and "visible" in job.text
        missing = http.get("/job", params={"id": "nowhere"}, headers=reader)
        assert missing.status_code == 404, "NOT_FOUND from the servicer, as over gRPC"

        # A read token acts no more through the dashboard than through the API: refused, with its reason.
        refused = http.post("/job/pause", data=PAUSE, headers=reader)
        assert refused.status_code == 403 and "needs role write" in refused.text, refused.text
        assert "call=PauseJob token=reader namespace=default target=visible denied" in caplog.text
        assert 'data-job="visible" class=" ' in http.get("/jobs", headers=reader).text, "still active"
        unknown = http.get("/jobs", headers={"Authorization": "Bearer not-a-token"})
        assert unknown.status_code == 303 and unknown.headers["location"].startswith("/login")

        done = http.post("/job/pause", data=PAUSE, headers=admin)
        assert done.status_code == 200 and "visible paused" in done.text, done.text
        assert "call=PauseJob token=admin namespace=default target=visible" in caplog.text
        assert 'data-job="visible" class="paused' in http.get("/jobs", headers=reader).text

        assert here.counter.methods == [], f"the dashboard called its node over gRPC: {here.counter.methods}"
        assert there.counter.methods == []
        started = [t.name for t in threading.enumerate() if t.ident not in threads_before]
        assert not [name for name in started if name.startswith("asyncio")], started

        # The counter sees what does come over gRPC (so the checks above could fail).
        with Client([here.address], security=ChannelSecurity(token=READER)) as api:
            api.shards()
        wait_until(lambda: here.counter.methods, 10, 0.05, "the server to count the client's call")
        assert here.counter.methods == ["/shardcron.v1.Scheduler/GetShards"]


def test_an_action_on_a_shard_another_node_leads_is_forwarded_to_it_over_grpc(tmp_path, caplog):
    """As the API forwards any call: the leader gets it, with the visitor's token, and logs the write."""
    reader, admin = {"Authorization": f"Bearer {READER}"}, {"Authorization": f"Bearer {ADMIN}"}
    caplog.set_level(logging.INFO, logger="shardcron.audit")
    with (
        two_nodes(tmp_path, dashboard_leads=False) as (base, here, leader),
        httpx.Client(base_url=base, timeout=30) as http,
    ):
        refused = http.post("/job/pause", data=PAUSE, headers=reader)
        assert refused.status_code == 403 and "needs role write" in refused.text, refused.text
        assert leader.counter.methods == [], "a refused call is refused where it arrives, not forwarded"
        done = http.post("/job/pause", data=PAUSE, headers=admin)
        assert done.status_code == 200 and "visible paused" in done.text, done.text
        assert leader.counter.methods == ["/shardcron.v1.Scheduler/PauseJob"]
        assert here.counter.methods == []
        audit = [
            r.getMessage() for r in caplog.records if r.name == "shardcron.audit" and "token=admin" in r.getMessage()
        ]
        assert audit == ["call=PauseJob token=admin namespace=default target=visible"], "logged once: by the leader"


def test_a_job_pages_live_ticks_come_from_the_api_in_process(tmp_path):
    """The job page's stream: the API's WatchTicks as the visitor, with no gRPC call, no thread, and one of the
    API's stream slots while it is open."""
    reader = {"Authorization": f"Bearer {READER}"}
    threads_before = {t.ident for t in threading.enumerate()}
    with (
        two_nodes(tmp_path, dashboard_leads=True) as (base, here, there),
        httpx.Client(base_url=base, timeout=30) as http,
    ):
        assert here.server is not None
        backend, slots = here.server.backend, here.server.slots
        with http.stream("GET", "/events/job", params={"id": "visible"}, headers=reader) as stream:
            events = sse_events(stream, 60)
            wait_until(lambda: backend.recorder is not None, 30, 0.05, "the watch to subscribe to the ticks")
            assert slots.open == 1
            tick = Tick(join_key("default", "visible"), 1_000, 0, FENCE, "here", TickStatus.SUCCEEDED)
            backend.recorder([tick])
            name, data = next(events)
            assert name == "tick" and json.loads(data)["status"] == "succeeded", (name, data)
        wait_until(lambda: slots.open == 0 and backend.recorder is None, 30, 0.05, "the watch to end with the page")
        assert here.counter.methods == [] and there.counter.methods == []
        started = [t.name for t in threading.enumerate() if t.ident not in threads_before]
        assert not [n for n in started if n.startswith(("asyncio", "dashboard-watch"))], started
