"""``HttpExecutor.run_async`` awaited on its loop, and the two clients behind it (aiohttp for http://, httpx for
https://) against real local servers: the dev sink, plain and over TLS. No mocks."""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from shardcron.dev.sink import Sink
from shardcron.executors.aio import LoopThread
from shardcron.executors.http import HttpExecutor
from shardcron.model import ExecutorKind, ExecutorSpec, HttpSpec, TickContext
from shardcron.runtime.latch import Latch
from tests.support.pki import trusted_server_context

pytestmark = pytest.mark.timeout(60)

CTX = TickContext(job_id="job-1", scheduled_at_ms=1_767_225_605_000, attempt=1, fence=7, shard=3, node_id="node-a")


class Flag:
    """A cancel signal that is not a threading.Event: anything with ``abc.Cancel``'s ``is_set``, ``wait``
    and ``on_set`` will do. ``raise_it`` sets it and calls back, as a shard's cancel does."""

    def __init__(self) -> None:
        self._latch = Latch()

    def is_set(self) -> bool:
        return self._latch.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._latch.wait(timeout)

    def on_set(self, callback):
        return self._latch.on_set(callback)

    def raise_it(self) -> None:
        self._latch.set()


@pytest.fixture
def loop():
    thread = LoopThread("test-http-loop")
    yield thread
    thread.close()


@pytest.fixture
def make_executor(loop):
    made: list[HttpExecutor] = []

    def make(**kw) -> HttpExecutor:
        made.append(HttpExecutor(loop, **kw))
        return made[-1]

    yield make
    for executor in made:
        executor.close()


@pytest.fixture
def tls_sink(tmp_path, monkeypatch):
    served = Sink()
    served.start(ssl_context=trusted_server_context(tmp_path, monkeypatch))
    with served:
        yield served


def spec(url: str, **kw) -> ExecutorSpec:
    return ExecutorSpec(ExecutorKind.HTTP, http=HttpSpec(url, **kw))


def start_async(executor: HttpExecutor, loop: LoopThread, url: str, timeout_s: float = 10.0, cancel=None, **kw):
    """``run_async`` awaited on the executor's loop, as the scheduler awaits it: a future of its result."""
    coro = executor.run_async(spec(url, **kw), CTX, timeout_s, cancel or Flag())
    return asyncio.run_coroutine_threadsafe(coro, loop.loop)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def outcome(result) -> tuple:
    return result.ok, result.http_status, result.output, result.error


# --- run_async is run: one code path --------------------------------------------------------------


@pytest.mark.parametrize(
    "path, timeout_s, expected",
    [
        ("/hook", 10.0, (True, 200, "ok", None)),
        ("/status/500", 10.0, (False, 500, "500", "HTTP 500 Internal Server Error")),
        (
            "/slow/10000",
            2.0,
            (False, None, None, "timed out after 2s (the job's timeout) waiting for {target} to answer POST"),
        ),
        ("refused", 10.0, (False, None, None, "connection refused by {target}")),
    ],
)
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_run_async_on_the_loop_gives_what_run_gives(
    sink, tls_sink, make_executor, loop, scheme, path, timeout_s, expected
):
    served = sink if scheme == "http" else tls_sink
    url = served.url + path if path != "refused" else f"{scheme}://127.0.0.1:{unused_port()}/"
    target = url.split("/")[2]
    expected = expected[:3] + (expected[3] and expected[3].format(target=target),)
    http = make_executor()
    from_thread = http.run(spec(url), CTX, timeout_s, Flag())
    on_the_loop = start_async(http, loop, url, timeout_s).result(timeout=30)
    assert outcome(from_thread)[:2] == outcome(on_the_loop)[:2] == expected[:2]
    assert (from_thread.error, on_the_loop.error) == (expected[3], expected[3])
    if expected[2] is not None:
        assert (from_thread.output, on_the_loop.output) == (expected[2], expected[2])


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_cancel_ends_run_async_in_flight(sink, tls_sink, make_executor, loop, scheme):
    served = sink if scheme == "http" else tls_sink
    cancel = Flag()
    future = start_async(make_executor(), loop, served.url + "/slow/3000", 30.0, cancel)
    assert served.wait_for(lambda reqs: len(reqs) == 1, timeout=10)  # in flight
    t0 = time.monotonic()
    cancel.raise_it()
    result = future.result(timeout=10)
    assert time.monotonic() - t0 < 1  # cancelled, not answered: the answer comes after 3 s
    assert result.error.startswith("cancelled: "), result.error
    assert not result.ok and result.http_status is None


def test_a_tick_that_waited_for_a_slot_is_not_sent_once_cancelled(sink, make_executor, loop):
    http = make_executor(max_per_host=1)
    first = start_async(http, loop, sink.url + "/slow/1000")
    assert sink.wait_for(lambda reqs: len(reqs) == 1, timeout=10)
    cancel = Flag()
    second = start_async(http, loop, sink.url + "/second", cancel=cancel)  # waits for the one slot
    cancel.raise_it()
    assert first.result(timeout=10).ok
    assert second.result(timeout=10).error.startswith("cancelled: ")
    assert [r.path for r in sink.requests()] == ["/slow/1000"]


# --- connections ----------------------------------------------------------------------------------


def test_concurrent_plain_http_ticks_share_kept_alive_connections(sink, make_executor, loop):
    http = make_executor()

    async def burst() -> list:
        ticks = [http.run_async(spec(f"{sink.url}/tick/{i}"), CTX, 30.0, Flag()) for i in range(200)]
        return await asyncio.gather(*ticks)

    results = asyncio.run_coroutine_threadsafe(burst(), loop.loop).result(timeout=50)
    assert all(r.ok for r in results), {r.error for r in results}
    assert len(sink.requests()) == 200
    assert sink.connections_accepted <= 8  # MAX_PER_HOST in flight, each on a connection kept for the next


def test_https_ticks_reuse_their_connection(tls_sink, make_executor):
    http = make_executor()
    for i in range(10):
        result = http.run(spec(f"{tls_sink.url}/tls/{i}"), CTX, 10.0, Flag())
        assert (result.ok, result.output) == (True, "ok"), result.error
    assert tls_sink.connections_accepted == 1


def test_a_stopped_executor_refuses_new_ticks_on_the_loop(sink, make_executor, loop):
    http = make_executor()
    assert start_async(http, loop, sink.url + "/before").result(timeout=10).ok
    http.close()
    result = start_async(http, loop, sink.url + "/after").result(timeout=10)
    assert (result.ok, result.error) == (False, "cancelled: the node is stopping: no new HTTP requests")


# --- what both clients send -----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_both_clients_send_the_same_defaults(sink, tls_sink, make_executor, scheme):
    served = sink if scheme == "http" else tls_sink
    assert make_executor().run(spec(served.url + "/hook"), CTX, 10.0, Flag()).ok
    (req,) = served.requests()
    assert req.header("User-Agent").startswith("shardcron/")
    assert req.header("Accept-Encoding") == "identity"
    assert req.header("Content-Type") is None and req.header("Cookie") is None


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_shown(sink, tls_sink, make_executor, scheme):
    served = sink if scheme == "http" else tls_sink
    http = make_executor()
    url = served.url.replace("://", "://bot:hunter%40%C3%A9@") + "/auth"
    result = http.run(spec(url, headers=(("Authorization", "Bearer job's own"),)), CTX, 10.0, Flag())
    assert result.ok, result.error
    (req,) = served.requests()
    assert req.header("Authorization") == "Basic " + base64.b64encode("bot:hunter@é".encode()).decode()
    port = unused_port()
    refused = http.run(spec(f"{scheme}://bot:hunter2@127.0.0.1:{port}/"), CTX, 10.0, Flag())
    assert refused.error == f"connection refused by 127.0.0.1:{port}"


class CookieServer(ThreadingHTTPServer):
    """Answers every request 200 with a Set-Cookie, and keeps the Cookie header each request came with."""

    daemon_threads = True

    def __init__(self) -> None:
        self.cookies: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                outer.cookies.append(self.headers.get("Cookie"))
                self.send_response(200)
                self.send_header("Set-Cookie", "session=s3cret; Path=/")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_plain_http_keeps_no_cookie(make_executor):
    server = CookieServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        http = make_executor()
        for _ in range(3):
            assert http.run(spec(f"http://127.0.0.1:{server.server_address[1]}/"), CTX, 10.0, Flag()).ok
    finally:
        server.shutdown()
        server.server_close()
    assert server.cookies == [None, None, None]


def test_a_proxys_credentials_go_to_the_proxy_and_no_proxy_is_honoured(sink, make_executor, monkeypatch):
    monkeypatch.setenv(
        "http_proxy", sink.url.replace("://", "://proxy-user:pr%C3%B6xy@")
    )  # read when the client is made
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost,bypassed.invalid")
    monkeypatch.delenv("NO_PROXY")
    http = make_executor()
    result = http.run(spec("http://jobs.example.invalid/hook"), CTX, 10.0, Flag())
    assert result.ok, result.error
    (req,) = sink.requests()
    assert req.path == "http://jobs.example.invalid/hook"
    assert req.header("Proxy-Authorization") == "Basic " + base64.b64encode("proxy-user:pröxy".encode()).decode()
    bypassed = http.run(spec("http://bypassed.invalid/hook"), CTX, 10.0, Flag())
    assert bypassed.error.startswith("DNS lookup failed for bypassed.invalid:80"), bypassed.error
    assert len(sink.requests()) == 1


def test_sync_run_from_many_threads_at_once(sink, make_executor):
    http = make_executor()
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: http.run(spec(f"{sink.url}/t/{i}"), CTX, 30.0, Flag()), range(64)))
    assert all(r.ok for r in results), {r.error for r in results}
    assert sink.connections_accepted <= 8
