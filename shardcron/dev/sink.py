"""A tiny HTTP sink that records what it receives: the target of the demo jobs
of ``make dev`` and of the executor tests.

    python -m shardcron.dev.sink --port 8089

Any method on any path answers 200 ``ok``, except:
    /status/<code>   answers with that status code
    /slow/<ms>       waits that long, then answers 200 (for timeout and cancel tests)
    /echo            answers 200 with the request's body
    /redirect        answers 307 to /landed (a client that follows it shows up as a second request)

A request is recorded as soon as its body has arrived, before any /slow wait,
so a test can wait for it to be in flight.

It speaks HTTP/1.1 with keep-alive, as the services that jobs call do, so a
client that pools its connections sends many requests on one
(``connections_accepted`` counts them), and it serves a benchmark's thousands
of requests a second without a handshake each. ``stop()`` closes the
connections still open, so no pooled client is answered after it.
"""

from __future__ import annotations

import argparse
import re
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shardcron.cli.common import fmt_clock_ms

_STATUS = re.compile(r"/status/(\d{3})/?")
_SLOW = re.compile(r"/slow/(\d+)/?")
# A kept-alive connection left idle this long is closed, so a client that vanished holds no thread for ever.
IDLE_TIMEOUT_S = 120
_print_lock = threading.Lock()  # handler threads print whole lines, never interleaved


@dataclass(frozen=True)
class Received:
    method: str
    path: str  # with the query string, as sent
    headers: dict[str, str]  # names in lower case; values decoded as UTF-8 where they are valid UTF-8
    body: bytes
    received_at_ms: int

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class Sink:
    """Start it, point jobs at ``url``, then look at ``requests()`` or ``wait_for()`` one."""

    def __init__(self, on_request: Callable[[Received], None] | None = None):
        self._on_request = on_request
        self._received: list[Received] = []
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._scheme = "http"

    def start(
        self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None
    ) -> tuple[str, int]:
        """Listen (on a free port if ``port`` is 0); with ``ssl_context``, speak HTTPS."""
        if self._server is not None:
            raise RuntimeError("sink already started")
        self._stopping.clear()
        self._server = _Server((host, port), _Handler, self)
        self._scheme = "https" if ssl_context else "http"
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="devsink", daemon=True
        )
        self._thread.start()
        return self.address

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes handlers waiting in /slow
        server.shutdown()
        server.server_close()
        server.close_open_connections()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Sink:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("sink not started")
        host, port = self._server.server_address[:2]  # AF_INET: (str, int); typeshed allows any family's
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"{self._scheme}://[{host}]:{port}" if ":" in host else f"{self._scheme}://{host}:{port}"

    @property
    def connections_accepted(self) -> int:
        """TCP connections accepted since start: a client that reuses its connections makes few."""
        if self._server is None:
            raise RuntimeError("sink not started")
        return self._server.accepted

    def requests(self) -> list[Received]:
        with self._changed:
            return list(self._received)

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout: float) -> bool:
        """Wait until ``predicate(requests so far)`` is true; False if ``timeout`` passes first."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(list(self._received)), timeout)

    def clear(self) -> None:
        with self._changed:
            self._received.clear()

    def _record(self, request: Received) -> None:
        with self._changed:
            self._received.append(request)
            self._changed.notify_all()
        if self._on_request is not None:
            self._on_request(request)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default listen backlog (5) makes a burst of connections wait about 1 s for a SYN retry.
    request_queue_size = 1024

    def __init__(self, address, handler, sink: Sink):
        self.sink = sink
        self.accepted = 0
        self._open: set = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        with self._open_lock:
            self.accepted += 1
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_open_connections(self) -> None:
        # shutdown(), not close(): it wakes a handler thread blocked reading the next request,
        # which then closes the socket itself.
        with self._open_lock:
            open_now = list(self._open)
        for request in open_now:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its handler

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client gave up (a timed-out or cancelled request): expected
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: every answer below carries its Content-Length
    timeout = IDLE_TIMEOUT_S
    # The head and the body go out in two writes: with Nagle's algorithm the body would wait for the
    # client's delayed ACK (40 ms) on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, format, *args) -> None:
        pass  # one line per request comes from on_request, not from here

    def _handle(self) -> None:
        body = self._read_body()
        sink = self.server.sink
        sink._record(
            Received(
                method=self.command,
                path=self.path,
                headers={name.lower(): _utf8(value) for name, value in self.headers.items()},
                body=body,
                received_at_ms=int(time.time() * 1000),
            )
        )
        route = self.path.split("?", 1)[0]
        status, answer, extra = 200, b"ok", {}
        if m := _STATUS.fullmatch(route):
            status, answer = int(m.group(1)), m.group(1).encode()
        elif m := _SLOW.fullmatch(route):
            sink._stopping.wait(int(m.group(1)) / 1000)
        elif route.rstrip("/") == "/echo":
            answer = body
        elif route.rstrip("/") == "/redirect":
            status, answer, extra = 307, b"redirect", {"Location": "/landed"}
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        if status < 200 or status in (204, 304):
            # These never carry a body (RFC 9110 6.4.1); bytes sent anyway would be read as the next answer.
            answer = b""
            self.close_connection = status < 200  # a 1xx is not a final answer: end the exchange here
        else:
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
            while self.rfile.readline().strip():  # trailers, up to the blank line
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""


def _utf8(value: str) -> str:
    # http.server reads header bytes as latin-1; shardcron sends UTF-8.
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _print_request(r: Received) -> None:
    when = fmt_clock_ms(r.received_at_ms)  # UTC, as `make dev` streams ticks: the two lines compare
    if r.header("x-shardcron-job-id") is None:
        tick = "(no shardcron headers)"
    else:
        tick = (
            f"job={r.header('x-shardcron-job-id')} scheduled_at={r.header('x-shardcron-scheduled-at')} "
            f"fence={r.header('x-shardcron-fence')} attempt={r.header('x-shardcron-attempt')} "
            f"node={r.header('x-shardcron-node')}"
        )
    with _print_lock:
        print(f"{when} {r.method} {r.path} {tick}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shardcron.dev.sink", description="Receive and print the HTTP calls of shardcron jobs."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args(argv)
    sink = Sink(on_request=_print_request)
    try:
        sink.start(args.host, args.port)
    except OSError as e:
        print(f"devsink: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"devsink listening on {sink.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sink.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
