"""Forwarding is a peer's privilege: the cluster's forwarding secret, and the seal of a forwarded call.

A node that forwards a call (or opens a watch feed for itself) marks it
``x-shardcron-forwarded: v1.<seal>``. The seal is the HMAC-SHA256, keyed with the
cluster's forwarding secret, of the bearer secret the call carries (empty: none),
so a seal lifted from one call does not vouch for another caller's token. The
secret lives in etcd under the cluster's prefix (``KeyLayout.forwarding_secret``):
the first node to start creates it, atomically (put if absent), and every node
reads it. Only members, which hold etcd credentials, know it.

A marker whose seal does not match is ignored (``Seal.sealed`` is False): the call
is a direct call, authorized on the caller's token, routed normally, held to the
per-peer limits and audit-logged. The seal is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from shardcron.errors import ShardcronError

FORWARDED_HEADER = "x-shardcron-forwarded"
SEAL_PREFIX = "v1."
SECRET_BYTES = 32


class Seal:
    """Seals and checks forwarded calls with one cluster's forwarding secret."""

    def __init__(self, secret: bytes):
        if len(secret) < 16:
            raise ValueError("a forwarding secret must be at least 16 bytes")
        self._secret = secret

    def seal(self, bearer: str | None) -> str:
        """The marker's value for a forwarded call carrying ``bearer`` (the secret, not the header)."""
        return SEAL_PREFIX + hmac.new(self._secret, (bearer or "").strip().encode(), hashlib.sha256).hexdigest()

    def marker(self, bearer: str | None) -> tuple[str, str]:
        return FORWARDED_HEADER, self.seal(bearer)

    def sealed(self, metadata: Sequence[tuple[str, str]] | None, bearer: str | None) -> bool:
        """Whether ``metadata`` carries a forwarded marker sealed by a member for ``bearer``."""
        given = next((v for k, v in metadata or () if k == FORWARDED_HEADER), None)
        if not isinstance(given, str):
            return False
        return hmac.compare_digest(given.encode(), self.seal(bearer).encode())


def cluster_seal(etcd, key: str) -> Seal:
    """The cluster's seal: its secret read from ``key``, created there first if no node has yet (the
    create is atomic, so every node ends up with the same one). A ShardcronError when etcd does not answer."""
    _created, kv = etcd.put_if_absent(key, secrets.token_hex(SECRET_BYTES).encode())
    if kv is None or not kv.value:
        raise ShardcronError(f"etcd holds no forwarding secret at {key} right after creating it")
    return Seal(kv.value)


def node_local_seal() -> Seal:
    """A seal no other node knows: for a node without etcd (tests' stand-ins), which forwards to no one."""
    return Seal(secrets.token_bytes(SECRET_BYTES))


__all__ = ["FORWARDED_HEADER", "Seal", "cluster_seal", "node_local_seal"]
