"""TLS, mutual TLS and bearer tokens for the gRPC API: the server side, and every channel that calls it.

One ``ChannelSecurity`` describes how to call a node (CA to trust, client
certificate, token); the CLI, the Python client and node-to-node forwarding
all build their channels with ``open_channel``, so forwarding uses the same
credentials as any caller. Tokens travel as ``authorization: Bearer <token>``
metadata; a node with a token file checks them, and each call's scope, in ``api/auth.py``. The health service stays open,
so load balancers and orchestrators can probe a node without a token.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from shardcron.config import add_env_flag
from shardcron.errors import ConfigError
from shardcron.api.tokens import TokenBook, parse_token_file

OPEN_METHODS_PREFIX = "/grpc.health.v1.Health/"


def _read(path: str | None, flag: str) -> bytes | None:
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

    def __post_init__(self):
        # A secret read from a file or an environment variable often ends in a newline, which gRPC
        # refuses in metadata ("Invalid metadata"): it is the secret without surrounding whitespace.
        if self.token is not None:
            object.__setattr__(self, "token", self.token.strip() or None)

    @property
    def tls(self) -> bool:
        return bool(self.ca_file or self.cert_file)


@dataclass(frozen=True)
class ServerSecurity:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None  # set: clients must present a certificate it signed (mTLS)
    tokens: TokenBook | None = None  # set: every call but health checks needs a token (api/auth.py)


def load_tokens(path: str | None) -> tuple[TokenBook | None, str | None]:
    """The token file's tokens (``tenancy.tokens.parse_token_file``), and one legacy bare secret of it if
    it has any (a node of an old cluster forwards with it when given no --node-token)."""
    raw = _read(path, "--auth-token-file")
    if raw is None:
        return None, None
    text = raw.decode("utf-8-sig", "replace")  # an editor's byte-order mark is not part of the first name
    book = parse_token_file(text, f"--auth-token-file {path}")
    bare = sorted(line.strip() for line in text.splitlines()
                  if len(line.split()) == 1 and not line.strip().startswith("#"))
    return book, (bare[0] if bare else None)


def server_credentials(sec: ServerSecurity) -> grpc.ServerCredentials | None:
    if not (sec.cert_file or sec.key_file):
        if sec.client_ca_file:
            raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not (sec.cert_file and sec.key_file):
        raise ConfigError("--tls-cert and --tls-key go together")
    cert, key = _read(sec.cert_file, "--tls-cert"), _read(sec.key_file, "--tls-key")
    ca = _read(sec.client_ca_file, "--tls-client-ca")
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the token to every call, over TLS or not (gRPC's call credentials demand TLS)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        md = list(details.metadata or []) + [self._header]
        return details._replace(metadata=md) if hasattr(details, "_replace") else _Details(details, md)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, d, metadata):
        self.method, self.timeout, self.metadata = d.method, d.timeout, metadata
        self.credentials = d.credentials
        self.wait_for_ready = getattr(d, "wait_for_ready", None)
        self.compression = getattr(d, "compression", None)


def open_channel(target: str, sec: ChannelSecurity | None, options: Sequence[tuple] = ()) -> grpc.Channel:
    sec = sec or ChannelSecurity()
    if sec.tls:
        channel = grpc.secure_channel(target, _channel_credentials(sec), options=list(options))
    else:
        channel = grpc.insecure_channel(target, options=list(options))
    return grpc.intercept_channel(channel, _BearerToken(sec.token)) if sec.token else channel


def open_aio_channel(target: str, sec: ChannelSecurity | None, options: Sequence[tuple] = ()) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel (node-to-node forwarding); its calls carry ``token_metadata(sec)`` themselves."""
    sec = sec or ChannelSecurity()
    if sec.tls:
        return grpc.aio.secure_channel(target, _channel_credentials(sec), options=list(options))
    return grpc.aio.insecure_channel(target, options=list(options))


def token_metadata(sec: ChannelSecurity | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {sec.token}"),) if sec and sec.token else ()


def _channel_credentials(sec: ChannelSecurity) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(sec.ca_file, "--tls-ca"), private_key=_read(sec.key_file, "--tls-key"),
        certificate_chain=_read(sec.cert_file, "--tls-cert"))


def channel_security_from_args(a) -> ChannelSecurity:
    """The CLI's --tls-ca/--tls-cert/--tls-key/--token (token also from SHARDCRON_TOKEN)."""
    token = getattr(a, "token", None) or os.environ.get("SHARDCRON_TOKEN") or None
    if bool(getattr(a, "tls_cert", None)) != bool(getattr(a, "tls_key", None)):
        raise ConfigError("--tls-cert and --tls-key go together")
    return ChannelSecurity(getattr(a, "tls_ca", None), getattr(a, "tls_cert", None), getattr(a, "tls_key", None),
                           token)


def add_client_flags(p) -> None:
    add_env_flag(p, "--tls-ca", "CA that signed the nodes' certificates (enables TLS)")
    add_env_flag(p, "--tls-cert", "client certificate, for nodes that require mTLS")
    add_env_flag(p, "--tls-key", "client key")
    p.add_argument("--token", default=None, help="bearer token (prefer SHARDCRON_TOKEN: argv is visible in ps)")
