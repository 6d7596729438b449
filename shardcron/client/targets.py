"""The nodes a client calls: one channel each, opened on first use, and failover between them.

Any node serves any call, so a call goes to the node that answered last and
moves to the next when nothing answers there; the time budget is shared by all
tries. A node's own answer (even UNAVAILABLE: its shard had no leader in time)
is the call's answer: only silence moves the call on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import grpc

from shardcron.client.channel import CHANNEL_OPTIONS, ChannelSecurity, answered_by_a_node, open_channel
from shardcron.client.errors import ApiError, Unavailable, api_error
from shardcron.errors import ShardcronError
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc

DEFAULT_TIMEOUT_S = 30.0


class BadToken(ShardcronError):
    """A token that cannot be sent: empty, or holding a character a bearer token cannot hold."""


def bearer_secret(token: str, source: str = "the token") -> str:
    """The secret ``token`` names, as it goes into ``authorization: Bearer <secret>``.

    Surrounding whitespace is dropped (the newline of a file read with ``$(cat ...)``, a
    pasted tab), and so is a ``Bearer`` scheme in any case, as the API and the dashboard
    read it. What is left must be printable ASCII without spaces: gRPC refuses anything
    else in metadata with an opaque error, so it is refused here, naming ``source``. The
    message never quotes the token: it is a secret.
    """
    secret = token.strip()
    words = secret.split(maxsplit=1)
    if len(words) == 2 and words[0].lower() == "bearer":
        secret = words[1]
    if not secret:
        raise BadToken(f"{source} is empty (only whitespace)")
    if secret.lower() == "bearer":
        raise BadToken(f"{source} is the word Bearer alone, with no token after it")
    bad = next((i for i, c in enumerate(secret) if not "!" <= c <= "~"), None)
    if bad is not None:
        raise BadToken(
            f"{source} holds {_char_name(secret[bad])} at character {bad + 1}: a token is printable "
            "ASCII with no whitespace inside (check how it was copied)"
        )
    return secret


def _char_name(c: str) -> str:
    return {" ": "a space", "\t": "a tab", "\n": "a line break", "\r": "a carriage return"}.get(c, f"U+{ord(c):04X}")


def parse_targets(targets: str | Sequence[str]) -> list[str]:
    """``"a:1,b:2"`` or ``["a:1", "b:2"]`` -> ``["a:1", "b:2"]``."""
    raw = [targets] if isinstance(targets, str) else list(targets)
    out = [t.strip() for item in raw for t in item.split(",") if t.strip()]
    if not out:
        raise ShardcronError("no server address given: pass host:port (or set SHARDCRON_SERVER)")
    return out


def check_timeout(value: object, name: str) -> None:
    """A time budget in seconds must be above 0."""
    # 0 would mean "the default" to `timeout_s or ...`, and a negative one a call
    # that gives up before it starts: neither is what the caller meant.
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name}: must be a number of seconds above 0, got {value!r}")


class Targets:
    """The nodes at ``targets``, each reached through a channel opened on first use with ``security``."""

    def __init__(
        self,
        targets: str | Sequence[str],
        security: ChannelSecurity | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        check_timeout(timeout_s, "timeout_s")
        self.targets = parse_targets(targets)
        if security is not None and security.token:
            security = replace(security, token=bearer_secret(security.token))
        self.security = security
        self.timeout_s = timeout_s
        self.preferred = 0  # the node that answered last: the first one asked
        self._channels: list[grpc.Channel | None] = [None] * len(self.targets)
        self._stubs: list[pb_grpc.SchedulerStub | None] = [None] * len(self.targets)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            channels = [c for c in self._channels if c is not None]
            self._channels = [None] * len(self.targets)
            self._stubs = [None] * len(self.targets)
        for c in channels:
            c.close()

    def stub(self, i: int) -> pb_grpc.SchedulerStub:
        with self._lock:
            stub = self._stubs[i]
            if stub is None:
                channel = self._channels[i] = open_channel(self.targets[i], self.security, CHANNEL_OPTIONS)
                stub = self._stubs[i] = pb_grpc.SchedulerStub(channel)
            return stub

    def order(self) -> list[int]:
        """The nodes' indexes, the preferred one first."""
        n = len(self.targets)
        return [(self.preferred + k) % n for k in range(n)]

    def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """Call ``method`` on the first target that answers; the time budget is shared by all tries."""
        if timeout_s is not None:
            check_timeout(timeout_s, "timeout_s")
        ends = time.monotonic() + (timeout_s or self.timeout_s)
        unreachable = []
        for i in self.order():
            left = ends - time.monotonic()
            if left <= 0:
                break
            try:
                response = getattr(self.stub(i), method)(request, timeout=left)
            except grpc.RpcError as e:
                if e.code() is grpc.StatusCode.UNAVAILABLE and not answered_by_a_node(e):
                    unreachable.append(f"{self.targets[i]} ({e.details()})")
                    continue
                raise api_error(e.code(), e.details() or "") from None
            self.preferred = i
            return response
        if not unreachable:
            raise ApiError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout_s or self.timeout_s:.1f}s")
        raise Unavailable(grpc.StatusCode.UNAVAILABLE, "no shardcron node answers at " + "; ".join(unreachable))


__all__ = ["DEFAULT_TIMEOUT_S", "BadToken", "Targets", "bearer_secret", "check_timeout", "parse_targets"]
