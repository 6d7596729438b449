"""Real certificates made at test time with trustme: a CA, a server certificate for 127.0.0.1, a client one."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme


def make_pki(directory: Path, client_name: str = "shardcron-client") -> dict[str, str]:
    """Write ca.pem, server.pem, server-key.pem, client.pem, client-key.pem; return their paths by name."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert(client_name)
    paths = {}
    for name, blob in (
        ("ca.pem", ca.cert_pem),
        ("server.pem", server.cert_chain_pems[0]),
        ("server-key.pem", server.private_key_pem),
        ("client.pem", client.cert_chain_pems[0]),
        ("client-key.pem", client.private_key_pem),
    ):
        blob.write_to_path(str(directory / name))
        paths[name] = str(directory / name)
    return paths


def trusted_server_context(directory: Path, monkeypatch, alpn: list[str] | None = None) -> ssl.SSLContext:
    """A server context for 127.0.0.1 from a fresh CA that this process trusts: its certificate is put in
    SSL_CERT_FILE, which ``ssl.create_default_context()`` reads when an HTTP client is made."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    if alpn:
        context.set_alpn_protocols(alpn)
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(directory / "ca.pem"))
    return context
