"""A thin adapter over etcd-sdk-python (``pyetcd``): with ``etcd_watch``, the only module that imports it.

Why a wrapper at all:
- every call gets an explicit timeout; the library's default is none;
- endpoints are built with ``time_retry=0``, else one error quarantines an
  endpoint for 300 s and a single-endpoint client goes dark for five minutes;
- the library's range request maps ``max_create_revision`` onto the wrong
  protobuf field, so ranges are built here;
- gRPC errors become ``EtcdUnavailable`` naming the endpoints, never a traceback;
- watches are tasks on an event loop (``etcd_watch``), not the library's three threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
import pyetcd
from pyetcd import etcdrpc
from pyetcd.client import EtcdTokenCallCredentials
from pyetcd.etcdrpc import kv_pb2
from pyetcd.utils import prefix_range_end

from shardcron import metrics
from shardcron.coordination.endpoint_choice import next_endpoint
from shardcron.coordination.etcd_watch import Member, WatchCreateFailed, Watches, error_reason
from shardcron.errors import ConfigError, EtcdUnavailable
from shardcron.runtime.node_loop import NodeLoop

log = logging.getLogger(__name__)

# After a member fails, other members are preferred over it for this long: about
# etcd's election time, so a dead leader is not retried before the others elect.
MEMBER_REST_S = 3.0
# Every channel to etcd pings the member every 5 s and gives up after 3 s without an answer, so a member
# that is gone without a word (a cut network) breaks the calls and the watches on it within about 8 s.
CHANNEL_OPTIONS = [("grpc.keepalive_time_ms", 5000), ("grpc.keepalive_timeout_ms", 3000)]


@dataclass(frozen=True)
class KV:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class WatchEvent:
    kind: str  # "put" or "delete"
    kv: KV


@dataclass(frozen=True)
class EtcdSecurity:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = None


def parse_endpoints(text: str) -> list[tuple[str, int, bool]]:
    """``"127.0.0.1:2379,https://etcd-2:2379"`` -> [(host, port, secure), ...]."""
    out = []
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        secure = raw.startswith("https://")
        hostport = raw.split("://", 1)[-1].rstrip("/")
        host, sep, port = hostport.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--etcd: {raw!r} is not host:port (for example 127.0.0.1:2379)")
        out.append((host.strip("[]"), int(port), secure))
    if not out:
        raise ConfigError("--etcd: no endpoint given (for example 127.0.0.1:2379)")
    return out


def _kv(m: Any) -> KV:  # m: pyetcd's KeyValue message (the library is untyped)
    return KV(m.key.decode(), bytes(m.value), m.create_revision, m.mod_revision, m.lease)


class Etcd:
    """The etcd operations shardcron needs, each with a deadline. The watches run on ``loop`` (the node's;
    None: a loop of its own, started by the first watch and closed by ``close``)."""

    def __init__(
        self,
        endpoints: str,
        *,
        timeout_s: float = 5.0,
        security: EtcdSecurity | None = None,
        loop: NodeLoop | None = None,
    ):
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        sec = security or EtcdSecurity()
        creds = None
        parsed = parse_endpoints(endpoints)
        if sec.ca_file or any(s for _, _, s in parsed):
            if not sec.ca_file:
                raise ConfigError("--etcd uses https:// but no --etcd-ca was given")
            creds = pyetcd.MultiEndpointEtcd3Client.get_secure_creds(sec.ca_file, sec.key_file, sec.cert_file)
        eps = [
            pyetcd.Endpoint(
                h,
                p,
                secure=creds is not None,
                creds=creds,
                time_retry=0,
                opts=CHANNEL_OPTIONS,
            )
            for h, p, _ in parsed
        ]
        try:
            self._client = pyetcd.MultiEndpointEtcd3Client(
                eps, timeout=timeout_s, user=sec.user, password=sec.password, failover=True
            )
        except Exception as e:  # authentication happens in the constructor
            raise EtcdUnavailable(f"etcd at {endpoints}: {error_reason(e)}") from None
        self._security = sec
        self._lock = threading.Lock()
        self._failed_at: dict[str, float] = {}
        self._closed = False
        self._owns_loop = loop is None
        self._watch_loop = NodeLoop("etcd-watch") if loop is None else loop
        self._watches = Watches(self._watch_loop, CHANNEL_OPTIONS)

    # -- plumbing -----------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """``fn(*args)`` on the current member, with a deadline; pyetcd's answers are untyped messages."""
        stub_timeout = self.timeout_s if timeout is None else timeout
        member = self._client._current_endpoint_label
        t0 = time.perf_counter()
        try:
            try:
                return fn(
                    *args, stub_timeout, credentials=self._client.call_credentials, metadata=self._client.metadata
                )
            except grpc.RpcError as e:
                # etcd's simple auth tokens expire (5 minutes by default): log in again, once.
                if not (self._security.user and _is_auth_expired(e)):
                    raise
                self._reauthenticate()
                return fn(
                    *args, stub_timeout, credentials=self._client.call_credentials, metadata=self._client.metadata
                )
        except grpc.RpcError as e:
            self._failover(e.code(), member)
            raise EtcdUnavailable(f"etcd {what} at {self.endpoints}: {error_reason(e)}") from None
        except ValueError as e:  # pyetcd raises this when every endpoint is marked failed
            raise EtcdUnavailable(f"etcd {what} at {self.endpoints}: {e}") from None
        finally:
            metrics.etcd_call.labels(what).observe(time.perf_counter() - t0)

    def _reauthenticate(self) -> None:
        req = etcdrpc.AuthenticateRequest(name=self._security.user, password=self._security.password)
        resp = self._client.authstub.Authenticate(req, self.timeout_s)
        self._client.metadata = (("token", resp.token),)
        self._client.call_credentials = grpc.metadata_call_credentials(EtcdTokenCallCredentials(resp.token))
        self._client._clear_old_stubs()

    def _failover(self, code: grpc.StatusCode, member: str) -> None:
        """After a connection-level error on ``member``, move to another (see ``endpoint_choice``).

        pyetcd's own failover skips endpoints marked failed within ``time_retry``;
        with ``time_retry=0`` (needed so a single endpoint is never quarantined)
        nothing ever counts as failed and it would stay on a dead member. So the
        choice is made here; the next call reconnects on the chosen member.
        """
        if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL):
            return
        with self._lock:
            now = time.monotonic()
            self._failed_at[member] = now
            current = self._client._current_endpoint_label
            if current != member:
                return  # another call already moved the client off it
            labels = list(self._client.endpoints)
            nxt = next_endpoint(labels, member, self._failed_at, now, MEMBER_REST_S)
            if nxt == current:
                return
            log.warning("etcd endpoint %s failed (%s); switching to %s", current, code.name, nxt)
            self._client._current_endpoint_label = nxt  # also drops the old stubs and watcher

    @property
    def _kv_stub(self) -> Any:
        return self._client.kvstub

    # -- key-value ------------------------------------------------------------

    def status(self) -> tuple[int, int]:
        """Header of a cheap linearizable read: proves a quorum answers. Returns (cluster_id, revision)."""
        req = etcdrpc.RangeRequest(key=b"\0", count_only=True)
        resp = self._call("status", self._kv_stub.Range, req)
        return resp.header.cluster_id, resp.header.revision

    def get(self, key: str) -> KV | None:
        resp = self._call("get", self._kv_stub.Range, etcdrpc.RangeRequest(key=key.encode()))
        return _kv(resp.kvs[0]) if resp.kvs else None

    def get_prefix(self, prefix: str, *, sort_by_create: bool = False) -> tuple[int, list[KV]]:
        """All keys under ``prefix`` and the revision they were read at."""
        req = etcdrpc.RangeRequest(key=prefix.encode(), range_end=prefix_range_end(prefix.encode()))
        if sort_by_create:
            req.sort_target = etcdrpc.RangeRequest.CREATE
            req.sort_order = etcdrpc.RangeRequest.ASCEND
        resp = self._call("range", self._kv_stub.Range, req)
        return resp.header.revision, [_kv(m) for m in resp.kvs]

    def newest_created_before(self, prefix: str, create_revision: int) -> KV | None:
        """The key under ``prefix`` created last before ``create_revision``, if any (linearizable).

        Like Go's ``waitDeletes``: sort by create revision, newest first, limit 1.
        (etcd's ``count`` ignores revision filters, so the key itself is fetched.)
        """
        req = etcdrpc.RangeRequest(
            key=prefix.encode(),
            range_end=prefix_range_end(prefix.encode()),
            keys_only=True,
            limit=1,
            sort_target=etcdrpc.RangeRequest.CREATE,
            sort_order=etcdrpc.RangeRequest.DESCEND,
            max_create_revision=create_revision - 1,
        )
        resp = self._call("range", self._kv_stub.Range, req)
        return _kv(resp.kvs[0]) if resp.kvs else None

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        req = etcdrpc.PutRequest(key=key.encode(), value=value, lease=lease)
        revision: int = self._call("put", self._kv_stub.Put, req).header.revision
        return revision

    def delete(self, key: str) -> bool:
        req = etcdrpc.DeleteRangeRequest(key=key.encode())
        deleted: int = self._call("delete", self._kv_stub.DeleteRange, req).deleted
        return deleted > 0

    def _txn(self, compare: list[Any], success: list[Any], failure: Iterable[Any] = ()) -> Any:
        req = etcdrpc.TxnRequest(compare=compare, success=success, failure=list(failure))
        return self._call("txn", self._kv_stub.Txn, req)

    @staticmethod
    def _cmp_create(key: str, rev: int) -> Any:
        return etcdrpc.Compare(
            key=key.encode(), result=etcdrpc.Compare.EQUAL, target=etcdrpc.Compare.CREATE, create_revision=rev
        )

    def put_if_absent(self, key: str, value: bytes, lease: int = 0) -> tuple[bool, KV | None]:
        """Create ``key`` only if it does not exist. Returns (created, the key as it now stands)."""
        put = etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key.encode(), value=value, lease=lease))
        get = etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=key.encode()))
        resp = self._txn([self._cmp_create(key, 0)], [put, get], [get])
        kvs = resp.responses[-1].response_range.kvs
        return resp.succeeded, (_kv(kvs[0]) if kvs else None)

    def put_if_created_at(self, key: str, value: bytes, create_revision: int, lease: int = 0) -> bool:
        """Overwrite ``key`` only while it is the same incarnation (etcd's ``Proclaim``)."""
        put = etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key.encode(), value=value, lease=lease))
        ok: bool = self._txn([self._cmp_create(key, create_revision)], [put]).succeeded
        return ok

    def put_if_unchanged(self, key: str, value: bytes, mod_revision: int, *, unless_exists: str) -> bool:
        """Overwrite ``key`` only while it is still at ``mod_revision`` and ``unless_exists`` is absent
        (a compare-and-swap that also yields to a pending request, such as a reshard)."""
        compare = [
            etcdrpc.Compare(
                key=key.encode(), result=etcdrpc.Compare.EQUAL, target=etcdrpc.Compare.MOD, mod_revision=mod_revision
            ),
            self._cmp_create(unless_exists, 0),
        ]
        put = etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=key.encode(), value=value))
        ok: bool = self._txn(compare, [put]).succeeded
        return ok

    def delete_if_created_at(self, key: str, create_revision: int) -> bool:
        """Delete ``key`` only while it is the same incarnation (etcd's ``Resign``)."""
        rm = etcdrpc.RequestOp(request_delete_range=etcdrpc.DeleteRangeRequest(key=key.encode()))
        ok: bool = self._txn([self._cmp_create(key, create_revision)], [rm]).succeeded
        return ok

    # -- leases ---------------------------------------------------------------

    def grant(self, ttl_s: int) -> tuple[int, int]:
        resp = self._call("lease grant", self._client.leasestub.LeaseGrant, etcdrpc.LeaseGrantRequest(TTL=ttl_s))
        if resp.error:
            raise EtcdUnavailable(f"etcd lease grant at {self.endpoints}: {resp.error}")
        return resp.ID, resp.TTL

    def keepalive_once(self, lease_id: int, timeout_s: float) -> int:
        """Renew the lease once. Returns the remaining TTL; <= 0 means the lease is gone."""

        def call(req_iter: Any, timeout: float, **kw: Any) -> int:
            for resp in self._client.leasestub.LeaseKeepAlive(req_iter, timeout, **kw):
                ttl: int = resp.TTL
                return ttl
            return 0

        remaining: int = self._call(
            "lease keepalive", call, iter([etcdrpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=timeout_s
        )
        return remaining

    def revoke(self, lease_id: int, timeout_s: float = 2.0) -> None:
        self._call(
            "lease revoke",
            self._client.leasestub.LeaseRevoke,
            etcdrpc.LeaseRevokeRequest(ID=lease_id),
            timeout=timeout_s,
        )

    # -- watches ----------------------------------------------------------------

    def watch_prefix(
        self,
        prefix: str,
        start_revision: int,
        on_events: Callable[[int, list[WatchEvent]], None],
        on_error: Callable[[str], None],
    ) -> Callable[[], None]:
        """Deliver every change under ``prefix`` from ``start_revision`` on; returns once etcd has created the
        watch, with the function that cancels it. Call it from a thread, not from the watch loop. A start
        revision compacted away ends the watch at once, through ``on_error``.

        ``on_events(revision, events)`` runs on the watch loop, so it must not
        block. After any stream error ``on_error`` is called once and the
        watch is dead: the caller re-reads and re-watches from the revision it read.
        """

        def events_of(resp: Any) -> None:  # an etcd WatchResponse message (the library is untyped)
            evs = [WatchEvent("delete" if ev.type == kv_pb2.Event.DELETE else "put", _kv(ev.kv)) for ev in resp.events]
            on_events(resp.header.revision, evs)

        if self._closed:
            raise EtcdUnavailable(f"etcd watch at {self.endpoints}: the client is closed")
        label = self._client._current_endpoint_label
        endpoint = self._client.endpoints[label]
        member = Member(endpoint.netloc, endpoint.credentials if endpoint.secure else None)
        try:
            return self._watches.start(
                member,
                self._client.metadata,
                prefix,
                start_revision,
                events_of,
                on_error,
                self.timeout_s,
            )
        except WatchCreateFailed as e:
            if e.code is not None:  # the stream broke on this member: the next try goes to another
                self._failover(e.code, label)
            raise EtcdUnavailable(f"etcd watch at {self.endpoints}: {e}") from None
        except TimeoutError as e:  # the member did not create it in time: likewise
            self._failover(grpc.StatusCode.DEADLINE_EXCEEDED, label)
            raise EtcdUnavailable(f"etcd watch at {self.endpoints}: {e}") from None
        except RuntimeError as e:  # the watch loop is closed
            raise EtcdUnavailable(f"etcd watch at {self.endpoints}: {e}") from None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._watches.close(self.timeout_s)
        if self._owns_loop:
            self._watch_loop.close()
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a broken channel may fail; nothing to do
            pass


def _is_auth_expired(e: grpc.RpcError) -> bool:
    code = e.code() if hasattr(e, "code") else None
    details = (e.details() or "") if hasattr(e, "details") else ""
    return code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT) and "token" in details
