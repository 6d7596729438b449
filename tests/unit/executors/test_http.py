"""The http executor's pure decisions, table-driven: headers, limits, URLs, phases, error messages."""

from __future__ import annotations

import socket
import ssl

import httpx
import pytest

from shardcron.executors.http_errors import Limits, Phase, explain, limits_for, target_of, url_problem
from shardcron.executors.http_request import request_headers
from shardcron.model import HttpSpec, TickContext
from shardcron.spec.headers import scrub_password

CTX = TickContext(job_id="job-1", scheduled_at_ms=1_767_225_605_000, attempt=2, fence=7, shard=3, node_id="node-a")
TICK_HEADERS = {
    "X-Shardcron-Job-Id",
    "X-Shardcron-Scheduled-At",
    "X-Shardcron-Scheduled-At-Ms",
    "X-Shardcron-Attempt",
    "X-Shardcron-Fence",
    "X-Shardcron-Shard",
    "X-Shardcron-Node",
    "Idempotency-Key",
}


@pytest.mark.parametrize(
    "user, body, kept",
    [
        ((), "", {}),
        ((("X-Env", "prod"),), "", {"X-Env": "prod"}),
        ((("x-shardcron-fence", "999"), ("X-SHARDCRON-NEW", "1"), ("idempotency-key", "forged")), "", {}),
        ((), "{}", {"Content-Type": "text/plain; charset=utf-8"}),
        ((("content-type", "application/json"),), "{}", {"content-type": "application/json"}),
        ((("Content-Type", "application/json"),), "", {"Content-Type": "application/json"}),
    ],
)
def test_request_headers_drop_reserved_names_and_default_the_content_type(user, body, kept):
    headers = request_headers(HttpSpec("http://h/", headers=user, body=body), CTX)
    assert {k: v for k, v in headers.items() if k not in TICK_HEADERS} == kept
    assert set(headers) >= TICK_HEADERS
    assert headers["X-Shardcron-Fence"] == "7" and headers["Idempotency-Key"] == "job-1:1767225605000"


@pytest.mark.parametrize(
    "total, connect, read, expected",
    [
        (60.0, 5.0, None, Limits(total=60.0, connect=5.0, read=60.0)),  # the defaults
        (2.0, 5.0, None, Limits(total=2.0, connect=2.0, read=2.0)),  # a short job: all bounded by its total
        (60.0, 5.0, 10.0, Limits(total=60.0, connect=5.0, read=10.0)),
        (3.0, 5.0, 10.0, Limits(total=3.0, connect=3.0, read=3.0)),
        (0.0, 5.0, None, Limits(total=0.001, connect=0.001, read=0.001)),  # never 0: httpx reads 0 as "at once"
    ],
)
def test_limits_are_bounded_by_the_jobs_timeout(total, connect, read, expected):
    limits = limits_for(total, connect, read)
    assert limits == expected
    timeout = limits.as_httpx()
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (
        expected.connect,
        expected.read,
        expected.total,
        expected.total,
    )


@pytest.mark.parametrize(
    "url, problem",
    [
        ("http://example.com/x", None),
        ("https://user:pw@example.com:8443/x?y=1", None),
        ("http://[::1]:8080/", None),
        ("ftp://example.com/x", "only http:// and https:// URLs are requested, not ftp://"),
        ("file:///etc/passwd", "only http:// and https:// URLs are requested, not file://"),
        ("example.com/x", "only http:// and https:// URLs are requested, not 'example.com/x'"),
        ("http:///x", "the URL has no host"),
        ("http://example.com:http/", "bad URL: Port could not be cast to integer value as 'http'"),
    ],
)
def test_url_problem(url, problem):
    assert url_problem(url) == problem


@pytest.mark.parametrize(
    "url, target",
    [
        ("http://example.com/x", "example.com:80"),
        ("https://bot:hunter2@example.com/x", "example.com:443"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("http://[::1/", "an invalid URL"),
    ],
)
def test_target_of_never_shows_credentials(url, target):
    assert target_of(url) == target


def trace(*events: str) -> Phase:
    phase = Phase()
    for event in events:
        coro = phase.trace(event, {})
        try:
            coro.send(None)
        except StopIteration:
            pass
    return phase


@pytest.mark.parametrize(
    "events, clause",
    [
        ((), "waiting for a free connection to h:80"),
        (("connection.connect_tcp.started",), "connecting to h:80"),
        (
            ("connection.connect_tcp.started", "connection.connect_tcp.complete", "connection.start_tls.started"),
            "in the TLS handshake with h:80",
        ),
        (("http11.send_request_headers.started",), "sending POST to h:80"),
        (("http2.send_connection_init.started",), "sending POST to h:80"),
        (
            ("http11.send_request_body.complete", "http11.receive_response_headers.started"),
            "waiting for h:80 to answer POST",
        ),
        (
            ("http2.receive_response_headers.started", "http2.receive_response_body.started"),
            "reading the answer of h:80 to POST",
        ),
        (
            ("http11.receive_response_headers.started", "http11.response_closed.started"),
            "waiting for h:80 to answer POST",
        ),  # an event that is not a phase changes nothing
    ],
)
def test_the_phase_follows_httpcores_trace_events(events, clause):
    assert trace(*events).clause("POST", "h:80") == clause


def caused(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


LIMITS = Limits(total=30.0, connect=5.0, read=30.0)


@pytest.mark.parametrize(
    "exc, events, message",
    [
        (
            httpx.ConnectTimeout("t"),
            ("connection.connect_tcp.started",),
            "timed out after 5s (connect timeout) connecting to h:80",
        ),
        (
            httpx.ConnectTimeout("t"),
            ("connection.start_tls.started",),
            "timed out after 5s (connect timeout) in the TLS handshake with h:80",
        ),
        (
            httpx.ReadTimeout("t"),
            ("http11.receive_response_headers.started",),
            "timed out after 30s (the job's timeout) waiting for h:80 to answer POST",
        ),
        (
            httpx.ReadTimeout("t"),
            ("http11.receive_response_body.started",),
            "timed out after 30s (the job's timeout) reading the answer of h:80 to POST",
        ),
        (httpx.PoolTimeout("t"), (), "timed out after 30s (the job's timeout) waiting for a free connection to h:80"),
        (
            caused(
                httpx.ConnectError("All connection attempts failed"),
                caused(OSError("All connection attempts failed"), ConnectionRefusedError(111, "refused")),
            ),
            (),
            "connection refused by h:80",
        ),
        (
            caused(httpx.ConnectError("x"), socket.gaierror(-2, "Name or service not known")),
            (),
            "DNS lookup failed for h:80: Name or service not known",
        ),
        (
            caused(httpx.ConnectError("x"), ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")),
            (),
            "TLS error with h:80: [SSL: WRONG_VERSION_NUMBER] wrong version number",
        ),
        (
            caused(httpx.ReadError("x"), ConnectionResetError(104, "Connection reset by peer")),
            (),
            "connection reset by h:80",
        ),
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            (),
            "h:80 closed the connection without answering",
        ),
        (
            httpx.RemoteProtocolError("illegal status line: bytearray(b'SSH-2.0')"),
            (),
            "bad HTTP response from h:80: illegal status line: bytearray(b'SSH-2.0')",
        ),
        (
            httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'."),
            (),
            "invalid request: Request URL has an unsupported protocol 'ftp://'.",
        ),
        (
            caused(httpx.ConnectError("x"), OSError(101, "Network is unreachable")),
            (),
            "request to h:80 failed: Network is unreachable",
        ),
        (RuntimeError("boom"), (), "request to h:80 failed: RuntimeError: boom"),
    ],
)
def test_explain(exc, events, message):
    assert explain(exc, LIMITS, trace(*events), "POST", "h:80") == message


def test_a_read_limit_shorter_than_the_job_is_named_as_such():
    limits = Limits(total=30.0, connect=5.0, read=2.0)
    phase = trace("http11.receive_response_headers.started")
    assert explain(httpx.ReadTimeout("t"), limits, phase, "GET", "h:80") == (
        "timed out after 2s (read timeout: no byte came) waiting for h:80 to answer GET"
    )


def test_explain_a_certificate_that_does_not_verify():
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.verify_message = "self-signed certificate"
    assert explain(caused(httpx.ConnectError("x"), error), LIMITS, Phase(), "POST", "h:443") == (
        "TLS certificate verification failed for h:443: self-signed certificate"
    )


@pytest.mark.parametrize(
    "message, url, scrubbed",
    [
        ("bad URL http://bot:hunter2@h/", "http://bot:hunter2@h/", "bad URL http://bot:***@h/"),
        ("connection refused by h:80", "http://bot:hunter2@h/", "connection refused by h:80"),
        ("nothing secret", "http://h/", "nothing secret"),
        ("a 2-letter password is not hunted for: ab", "http://u:ab@h/", "a 2-letter password is not hunted for: ab"),
        ("decoded too: s3cr@t", "http://u:s3cr%40t@h/", "decoded too: ***"),
        ("bad http://u:p4ss@[::1/", "http://u:p4ss@[::1/", "bad http://u:***@[::1/"),  # httpx cannot parse it
    ],
)
def test_scrub_masks_the_urls_password(message, url, scrubbed):
    assert scrub_password(message, url) == scrubbed
