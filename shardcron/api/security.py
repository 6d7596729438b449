"""The gRPC server's side of TLS, mutual TLS and bearer tokens: its certificate and its token file.

How a caller reaches a node (``ChannelSecurity``, ``open_channel``) is
``client/channel.py``; node-to-node forwarding uses it too, so forwarding presents the
same credentials as any caller. Tokens travel as ``authorization: Bearer <token>``
metadata; a node with a token file checks them, and each call's scope, in
``api/auth.py``. The health service stays open, so load balancers and orchestrators
can probe a node without a token.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from shardcron.api.tokens import TokenBook, parse_token_file
from shardcron.client.channel import read_file
from shardcron.errors import ConfigError

OPEN_METHODS_PREFIX = "/grpc.health.v1.Health/"


@dataclass(frozen=True)
class ServerSecurity:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None  # set: clients must present a certificate it signed (mTLS)
    tokens: TokenBook | None = None  # set: every call but health checks needs a token (api/auth.py)


def load_tokens(path: str | None) -> tuple[TokenBook | None, str | None]:
    """The token file's tokens (``api.tokens.parse_token_file``), and one legacy bare secret of it if
    it has any (a node of an old cluster forwards with it when given no --node-token)."""
    raw = read_file(path, "--auth-token-file")
    if raw is None:
        return None, None
    text = raw.decode("utf-8-sig", "replace")  # an editor's byte-order mark is not part of the first name
    book = parse_token_file(text, f"--auth-token-file {path}")
    bare = sorted(
        line.strip() for line in text.splitlines() if len(line.split()) == 1 and not line.strip().startswith("#")
    )
    return book, (bare[0] if bare else None)


def server_credentials(sec: ServerSecurity) -> grpc.ServerCredentials | None:
    if not (sec.cert_file or sec.key_file):
        if sec.client_ca_file:
            raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not (sec.cert_file and sec.key_file):
        raise ConfigError("--tls-cert and --tls-key go together")
    cert, key = read_file(sec.cert_file, "--tls-cert"), read_file(sec.key_file, "--tls-key")
    assert cert is not None and key is not None  # both paths are set: read, or ConfigError
    ca = read_file(sec.client_ca_file, "--tls-client-ca")
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)
