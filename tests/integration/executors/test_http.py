"""The pooled http executor against real local servers: the dev sink (HTTP/1.1 keep-alive), a real HTTP/2
server over TLS (h2, offered by ALPN), raw sockets that stall a phase of the request. No mocks."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import h2.config
import h2.connection
import h2.events
import pytest

from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import eventually
from shardcron.executors import Executors
from shardcron.executors.http import HttpExecutor
from shardcron.model import ExecutorKind, ExecutorSpec, HttpSpec, TickContext
from shardcron.runtime.latch import Latch
from tests.support.pki import trusted_server_context

pytestmark = pytest.mark.timeout(60)

CTX = TickContext(job_id="job-1", scheduled_at_ms=1_767_225_605_000, attempt=1, fence=7, shard=3, node_id="node-a")


@pytest.fixture
def make_executor():
    made: list[HttpExecutor] = []

    def make(**kw) -> HttpExecutor:
        made.append(HttpExecutor(**kw))
        return made[-1]

    yield make
    for executor in made:
        executor.close()


def spec(url: str, **kw) -> ExecutorSpec:
    return ExecutorSpec(ExecutorKind.HTTP, http=HttpSpec(url, **kw))


def run(executor, url: str, timeout_s: float = 10.0, cancel: Latch | None = None, **kw):
    return executor.run(spec(url, **kw), CTX, timeout_s, cancel or Latch())


# --- keep-alive, redirects, proxies over HTTP/1.1 -------------------------------------------------


def test_sequential_ticks_to_one_host_reuse_one_connection(sink, make_executor):
    http = make_executor()
    for i in range(20):
        result = run(http, f"{sink.url}/tick/{i}")
        assert result.ok, result.error
    assert len(sink.requests()) == 20
    assert sink.connections_accepted == 1


def test_a_nodes_executors_own_one_http_client_and_close_it(sink):
    executors = Executors()
    try:
        http = executors.for_kind(ExecutorKind.HTTP)
        assert http is executors.for_kind(ExecutorKind.HTTP)
        for _ in range(5):
            assert run(http, sink.url + "/a").ok
        assert sink.connections_accepted == 1
    finally:
        executors.close()
    result = run(http, sink.url + "/after-close")
    assert (result.ok, result.error) == (False, "cancelled: the node is stopping: no new HTTP requests")


def test_ticks_to_one_host_beyond_its_limit_wait_for_a_slot_and_other_hosts_do_not(sink, make_executor):
    http = make_executor(max_per_host=2)
    slow = sink.url + "/slow/10000"
    with ThreadPoolExecutor(2) as pool, Sink() as other:
        held = [pool.submit(run, http, slow, 30.0) for _ in range(2)]
        assert sink.wait_for(lambda reqs: len(reqs) == 2, timeout=30)  # generous: the machine may be busy
        third = run(http, slow, timeout_s=0.5)
        assert (
            third.error
            == f"timed out after 0.5s (the job's timeout) waiting for a free connection to 127.0.0.1:{sink.address[1]}"
        )
        assert run(http, other.url + "/elsewhere").ok  # another host has slots of its own
        sink.stop()  # wakes the two held requests: they are answered
        assert all(f.result(timeout=10).ok for f in held)
    assert len(other.requests()) == 1


def test_a_redirect_is_reported_not_followed(sink, make_executor):
    result = run(make_executor(), sink.url + "/redirect")
    assert (result.ok, result.http_status, result.error) == (False, 307, "HTTP 307 Temporary Redirect")
    assert [r.path for r in sink.requests()] == ["/redirect"]


def test_the_proxy_from_the_environment_is_used(sink, make_executor, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", sink.url)  # read when the executor makes its client, on the first tick
    monkeypatch.delenv("no_proxy")
    monkeypatch.delenv("NO_PROXY")
    result = run(make_executor(), "http://jobs.example.invalid/hook")
    assert result.ok, result.error
    (req,) = sink.requests()
    assert req.path == "http://jobs.example.invalid/hook"  # the absolute form a proxy receives
    assert req.header("X-Shardcron-Fence") == "7"


# --- timeouts: which limit and which phase --------------------------------------------------------


class Listener:
    def __init__(self, port: int, accepted: list[socket.socket] | None = None):
        self.port, self.accepted = port, accepted if accepted is not None else []


@pytest.fixture
def full_backlog():
    """A port whose listen queue is full: a TCP connect to it hangs (its SYNs are dropped)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    filler = socket.create_connection(server.getsockname(), timeout=5)
    yield Listener(server.getsockname()[1])
    filler.close()
    server.close()


@pytest.fixture
def silent_server():
    """Accepts TCP connections and never says a word: a TLS handshake to it stalls."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield Listener(server.getsockname()[1], accepted)
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def test_connect_timeout_names_the_tcp_connect(full_backlog, make_executor):
    t0 = time.monotonic()
    result = run(make_executor(connect_timeout_s=0.3), f"http://127.0.0.1:{full_backlog.port}/")
    assert time.monotonic() - t0 < 5
    assert result.error == f"timed out after 0.3s (connect timeout) connecting to 127.0.0.1:{full_backlog.port}"


def test_connect_timeout_names_the_tls_handshake(silent_server, make_executor):
    port = silent_server.port
    result = run(make_executor(connect_timeout_s=0.3), f"https://127.0.0.1:{port}/")
    assert result.error == f"timed out after 0.3s (connect timeout) in the TLS handshake with 127.0.0.1:{port}"


def test_read_timeout_names_the_wait_for_the_answer(sink, make_executor):
    result = run(make_executor(read_timeout_s=0.3), sink.url + "/slow/10000")
    port = sink.address[1]
    assert (
        result.error == f"timed out after 0.3s (read timeout: no byte came) waiting for 127.0.0.1:{port} to answer POST"
    )


@pytest.mark.parametrize(
    "fixture, scheme, phase",
    [
        ("full_backlog", "http", "connecting to {target}"),
        ("silent_server", "https", "in the TLS handshake with {target}"),
        ("sink", "http", "waiting for {target} to answer POST"),
    ],
)
def test_the_jobs_timeout_names_the_phase_it_ran_out_in(request, make_executor, fixture, scheme, phase):
    found = request.getfixturevalue(fixture)
    target = f"127.0.0.1:{found.address[1] if isinstance(found, Sink) else found.port}"
    result = run(make_executor(), f"{scheme}://{target}/slow/10000", timeout_s=0.4)
    assert result.error == f"timed out after 0.4s (the job's timeout) {phase.format(target=target)}"


# --- cancel ---------------------------------------------------------------------------------------


def test_cancel_mid_request_returns_at_once_and_closes_the_connection(silent_server, make_executor):
    port, accepted = silent_server.port, silent_server.accepted
    http = make_executor()
    cancel = Latch()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(run, http, f"http://127.0.0.1:{port}/hook", 30.0, cancel)
        assert eventually(lambda: accepted, 5, 0.01)
        (conn,) = accepted
        conn.settimeout(5)
        assert conn.recv(65536).startswith(b"POST /hook HTTP/1.1")  # the request is in flight
        t0 = time.monotonic()
        cancel.set()
        result = future.result(timeout=5)
    assert time.monotonic() - t0 < 1
    assert (result.ok, result.error) == (
        False,
        f"cancelled: abandoned POST to 127.0.0.1:{port} (this node lost the shard or is stopping)",
    )
    assert conn.recv(65536) == b""  # cancelled on the loop: the client closed its end


# --- HTTP/2 over TLS, offered by ALPN ----------------------------------------------------------------


class H2Server:
    """A real HTTP/2 server (h2 over TLS, ALPN "h2" only) on its own loop: counts connections, keeps requests.

    Every answer is 200 ``ok`` with a cookie, which the client must not send back.
    """

    def __init__(self, ssl_context: ssl.SSLContext):
        self._ssl = ssl_context
        self.connections = 0
        self.protocols: list[str | None] = []
        self.requests: list[dict[bytes, bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> H2Server:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.protocols.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        heads: dict[int, dict[bytes, bytes]] = {}
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        heads[event.stream_id] = dict(event.headers)
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        self.requests.append(heads.pop(event.stream_id))
                        conn.send_headers(
                            event.stream_id,
                            [(b":status", b"200"), (b"content-length", b"2"), (b"set-cookie", b"session=s3cret")],
                        )
                        conn.send_data(event.stream_id, b"ok", end_stream=True)
                writer.write(conn.data_to_send())
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@pytest.fixture
def h2_server(tmp_path, monkeypatch):
    with H2Server(trusted_server_context(tmp_path, monkeypatch, alpn=["h2"])) as server:
        yield server


def test_http2_is_negotiated_with_a_tls_server_that_offers_it(h2_server, make_executor):
    http = make_executor()
    url = f"https://127.0.0.1:{h2_server.port}/hook"
    for _ in range(5):
        result = run(http, url, headers=(("X-Note", "café ☕"), ("idempotency-key", "forged")))
        assert (result.ok, result.http_status, result.output) == (True, 200, "ok"), result.error
    with ThreadPoolExecutor(8) as pool:  # concurrent ticks are streams on the same connection
        assert all(r.ok for r in pool.map(lambda _: run(http, url), range(16)))
    assert (h2_server.connections, h2_server.protocols) == (1, ["h2"])
    first = h2_server.requests[0]
    assert first[b":method"] == b"POST" and first[b":path"] == b"/hook"
    assert first[b"x-shardcron-job-id"] == b"job-1"
    assert first[b"idempotency-key"] == b"job-1:1767225605000"  # the job's own was dropped
    assert first[b"x-note"] == "café ☕".encode()  # UTF-8 on the wire
    assert not any(b"cookie" in r for r in h2_server.requests)  # the server's cookie was not kept
