"""Channels to a node: TLS, mutual TLS, bearer tokens and the options every caller's channel uses.

One ``ChannelSecurity`` describes how to call a node (CA to trust, client
certificate, token); the CLI, the Python client and node-to-node forwarding all
build their channels with ``open_channel`` / ``open_aio_channel`` and
``CHANNEL_OPTIONS``, so forwarding uses the same credentials as any caller.
Tokens travel as ``authorization: Bearer <token>`` metadata. The server's side
(its certificate, the token file) is ``api/security.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from shardcron.errors import ConfigError

# Set on every answer a shardcron node gives (trailing metadata), so a client
# can tell "the cluster said UNAVAILABLE" from "nothing answered at that address".
NODE_HEADER = "x-shardcron-node"
# On an UNAVAILABLE answer: the node was not (or no longer) the shard's leader,
# so the same call sent to the current leader may succeed.
RETRY_HEADER = "x-shardcron-retry"

# What a request may hold by default (a node's --max-request-bytes): big enough for a
# job with a 1 MiB payload plus headers, so that an oversized payload is refused by
# validation (INVALID_ARGUMENT naming the field), not by the transport; and for
# PutJobs batches of a few such jobs.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# What a caller accepts in an answer: pages are bounded by bytes well below it
# (service.PAGE_BYTES), so this only guards against a peer gone wrong.
MAX_ANSWER_BYTES = 64 * 1024 * 1024

KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000

ChannelOptions = Sequence[tuple[str, Any]]


def channel_options(
    keepalive_time_ms: int = KEEPALIVE_TIME_MS, keepalive_timeout_ms: int = KEEPALIVE_TIMEOUT_MS
) -> tuple[tuple[str, int], ...]:
    """Options of every channel to a node: the CLI's, the client's and node-to-node forwarding."""
    return (
        # The node decides what it accepts (--max-request-bytes) and says so by name.
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", MAX_ANSWER_BYTES),
        # A restarted node must be reachable again within a failover, not after
        # grpc's default reconnect backoff (up to two minutes).
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # A peer that is frozen (SIGSTOP), or a connection that is half-open after a
        # network fault, fails the calls on it within time + timeout: without pings a
        # stream on it would hang until its deadline, and a watch has none.
        ("grpc.keepalive_time_ms", keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
        # grpc >= 1.5x waits for a ping's answer this long, whatever keepalive_timeout says
        # (60 s by default: seen here, a frozen peer's stream ended only with this set).
        ("grpc.http2.ping_timeout_ms", keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    )


CHANNEL_OPTIONS = channel_options()


def read_file(path: str | None, flag: str) -> bytes | None:
    """The bytes of a certificate, key or token file named by ``flag``; ``ConfigError`` naming it if unreadable."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"{flag}: cannot read {path}: {e.strerror}") from None


@dataclass(frozen=True)
class ChannelSecurity:
    """How a caller reaches a node: TLS trust, an optional client certificate, an optional token."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        # A secret read from a file or an environment variable often ends in a newline, which gRPC
        # refuses in metadata ("Invalid metadata"): it is the secret without surrounding whitespace.
        if self.token is not None:
            object.__setattr__(self, "token", self.token.strip() or None)

    @property
    def tls(self) -> bool:
        return bool(self.ca_file or self.cert_file)


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the token to every call, over TLS or not (gRPC's call credentials demand TLS)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        md = list(details.metadata or []) + [self._header]
        return details._replace(metadata=md) if hasattr(details, "_replace") else _Details(details, md)

    def intercept_unary_unary(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._with_token(details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, d: grpc.ClientCallDetails, metadata: list[tuple[str, str | bytes]]):
        self.method, self.timeout, self.metadata = d.method, d.timeout, tuple(metadata)
        self.credentials = d.credentials
        self.wait_for_ready = getattr(d, "wait_for_ready", None)
        self.compression = getattr(d, "compression", None)


def open_channel(target: str, sec: ChannelSecurity | None, options: ChannelOptions = ()) -> grpc.Channel:
    sec = sec or ChannelSecurity()
    if sec.tls:
        channel = grpc.secure_channel(target, _channel_credentials(sec), options=list(options))
    else:
        channel = grpc.insecure_channel(target, options=list(options))
    return grpc.intercept_channel(channel, _BearerToken(sec.token)) if sec.token else channel


def open_aio_channel(target: str, sec: ChannelSecurity | None, options: ChannelOptions = ()) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel (node-to-node forwarding); its calls carry ``token_metadata(sec)`` themselves."""
    sec = sec or ChannelSecurity()
    if sec.tls:
        return grpc.aio.secure_channel(target, _channel_credentials(sec), options=list(options))
    return grpc.aio.insecure_channel(target, options=list(options))


def token_metadata(sec: ChannelSecurity | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {sec.token}"),) if sec and sec.token else ()


def _channel_credentials(sec: ChannelSecurity) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=read_file(sec.ca_file, "--tls-ca"),
        private_key=read_file(sec.key_file, "--tls-key"),
        certificate_chain=read_file(sec.cert_file, "--tls-cert"),
    )


def trailing_metadata(e: grpc.RpcError) -> tuple[tuple[str, Any], ...]:
    """The trailing metadata of a failed call; none for an ``RpcError`` that is not a call."""
    try:
        metadata = e.trailing_metadata() or ()
        # grpc-stubs type each item as a `_Metadatum` object: a call gives (key, value) pairs.
        return tuple(metadata)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - an RpcError that is not a Call has none
        return ()


def answered_by_a_node(e: grpc.RpcError) -> bool:
    """Whether a shardcron node gave this status (rather than the transport, for a node that is down)."""
    return any(k == NODE_HEADER for k, _ in trailing_metadata(e))


__all__ = [
    "CHANNEL_OPTIONS",
    "KEEPALIVE_TIMEOUT_MS",
    "KEEPALIVE_TIME_MS",
    "MAX_ANSWER_BYTES",
    "MAX_MESSAGE_BYTES",
    "NODE_HEADER",
    "RETRY_HEADER",
    "ChannelSecurity",
    "answered_by_a_node",
    "channel_options",
    "open_aio_channel",
    "open_channel",
    "read_file",
    "token_metadata",
    "trailing_metadata",
]
