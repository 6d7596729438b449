"""The limits that protect a node from its callers: open streams, request size, jobs per call, triggers.

Each limit is a ``shardcron node`` flag. A call that crosses one is refused with
RESOURCE_EXHAUSTED and a message that names the flag, so whoever reads it knows
what to change (or what they did). Everything here is pure bookkeeping under a
lock: no I/O, no clock of its own (callers pass ``now``), table-tested in
tests/unit/api/test_limits.py.

Streams are counted per node and per caller address (the peer's IP, not its
port: one client opening many connections is still one client). A stream a
node opens to another node on a caller's behalf (``x-shardcron-forwarded``,
sealed with the cluster's secret: ``api/peers.py``; a marker from anyone else is
ignored, so a client cannot claim it) counts against the node-wide limit
only: nodes share one feed per member for every all-jobs watcher, so what they
open is already bounded by what their own callers were allowed to open.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardcron.api.status import CallFailed

MIB = 1024 * 1024

DEFAULT_MAX_STREAMS = 10_000
DEFAULT_MAX_STREAMS_PER_PEER = 1_000
DEFAULT_MAX_REQUEST_BYTES = 8 * MIB
DEFAULT_MAX_JOBS_PER_CALL = 10_000
DEFAULT_TRIGGER_RATE = "6/1m"

# Jobs whose trigger budget is remembered; the least recently triggered are forgotten first
# (a forgotten job starts again with a full budget, which only ever errs towards allowing).
TRIGGER_BUCKETS_KEPT = 100_000


@dataclass(frozen=True)
class Rate:
    """``count`` events per ``period_ms``, with bursts of up to ``count``."""

    count: int
    period_ms: int

    def __str__(self) -> str:
        return f"{self.count}/{_duration_text(self.period_ms)}"


@dataclass(frozen=True)
class ApiLimits:
    max_streams: int = DEFAULT_MAX_STREAMS
    max_streams_per_peer: int = DEFAULT_MAX_STREAMS_PER_PEER
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_jobs_per_call: int = DEFAULT_MAX_JOBS_PER_CALL
    trigger_rate: Rate | None = None  # None: TriggerJob is not limited

    @classmethod
    def defaults(cls) -> ApiLimits:
        return cls(trigger_rate=parse_rate(DEFAULT_TRIGGER_RATE, "--trigger-rate"))


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(ms|s|m|h)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_rate(raw: str, flag: str) -> Rate | None:
    """``"6/1m"``, ``"10/s"``, ``"100/30s"`` -> Rate; ``"off"`` or ``"0"`` -> None (no limit).

    Raises ValueError with a message naming ``flag``."""
    text = str(raw).strip().lower()
    if text in ("off", "none", "0"):
        return None
    m = _RATE.match(text)
    if not m:
        raise ValueError(f"{flag}: expected COUNT/PERIOD such as 6/1m, 10/s or 100/30s (or off), got {raw!r}")
    count, amount, unit = int(m.group(1)), int(m.group(2) or 1), m.group(3)
    period_ms = amount * _UNIT_MS[unit]
    if count < 1 or period_ms < 1:
        raise ValueError(f"{flag}: the count and the period must be at least 1, got {raw!r}")
    return Rate(count, period_ms)


def _duration_text(ms: int) -> str:
    for unit in ("h", "m", "s"):
        if ms % _UNIT_MS[unit] == 0:
            n = ms // _UNIT_MS[unit]
            return unit if n == 1 else f"{n}{unit}"
    return f"{ms}ms"


def exhausted(message: str) -> CallFailed:
    # grpc imported here: `shardcron node --help` and `shardcron shards` read the defaults above without it.
    import grpc

    from shardcron.api.status import CallFailed  # grpc: see above

    return CallFailed(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def peer_host(peer: str | None) -> str:
    """grpc's ``ipv4:10.0.0.7:53124`` / ``ipv6:[::1]:53124`` / ``unix:/path`` -> the address without the port."""
    if not peer:
        return "unknown"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = rest.rpartition(":")[0] if rest.startswith("[") else rest
        return host.strip("[]") or rest
    return peer


class StreamSlots:
    """Open server streams, per node and per caller address."""

    def __init__(self, max_streams: int, max_per_peer: int):
        self.max_streams = max_streams
        self.max_per_peer = max_per_peer
        self._lock = threading.Lock()
        self._open = 0
        self._by_peer: dict[str, int] = {}

    @property
    def open(self) -> int:
        return self._open

    def acquire(self, peer: str, *, forwarded: bool) -> None:
        """Take a slot for a stream from ``peer``; RESOURCE_EXHAUSTED naming the limit if none is free."""
        with self._lock:
            if self._open >= self.max_streams:
                raise exhausted(
                    f"this node already serves {self._open} streams, its --max-streams; close some or call another node"
                )
            held = self._by_peer.get(peer, 0)
            if not forwarded and held >= self.max_per_peer:
                raise exhausted(
                    f"{peer} already has {held} open streams on this node, its --max-streams-per-peer; close some first"
                )
            self._open += 1
            self._by_peer[peer] = held + 1

    def release(self, peer: str) -> None:
        with self._lock:
            self._open -= 1
            left = self._by_peer.get(peer, 1) - 1
            if left > 0:
                self._by_peer[peer] = left
            else:
                self._by_peer.pop(peer, None)


class TriggerBudget:
    """A token bucket per job: ``rate.count`` manual triggers at once, then one per ``period/count``."""

    def __init__(self, rate: Rate | None, kept: int = TRIGGER_BUCKETS_KEPT):
        self.rate = rate
        self._kept = kept
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, int]] = OrderedDict()  # job -> (tokens, at ms)

    def take(self, job_id: str, now_ms: int) -> None:
        """Spend one trigger of ``job_id``'s budget, or raise RESOURCE_EXHAUSTED naming --trigger-rate."""
        rate = self.rate
        if rate is None:
            return
        with self._lock:
            tokens, at = self._buckets.pop(job_id, (float(rate.count), now_ms))
            tokens = min(float(rate.count), tokens + max(0, now_ms - at) * rate.count / rate.period_ms)
            if tokens < 1.0:
                self._buckets[job_id] = (tokens, now_ms)
                wait_ms = (1.0 - tokens) * rate.period_ms / rate.count
                raise exhausted(
                    f"job {job_id!r} was triggered too often: this node's --trigger-rate is {rate} "
                    f"per job; the next trigger is allowed in {wait_ms / 1000:.1f}s"
                )
            self._buckets[job_id] = (tokens - 1.0, now_ms)
            while len(self._buckets) > self._kept:
                self._buckets.popitem(last=False)
