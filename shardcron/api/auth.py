"""Who is calling, and may they: the API's one check of scoped tokens, and its audit log of writes.

``Authorize`` is a server interceptor (on when the node has a token file):

1. it identifies the caller from ``authorization: Bearer <secret>`` (or the bare
   secret; ``api.tokens.secret_from_authorization``) with the node's
   ``NodeTokens`` (UNAUTHENTICATED, saying how to pass a token, when none or an
   unknown one; health checks stay open). A call another node forwarded carries
   the forwarded marker sealed with the cluster's secret (``api/peers.py``), the
   CALLER's secret, and the forwarding node's own in ``x-shardcron-node-token``:
   the identity checked is ``scopes.forwarded_identity(caller, node)``, never
   wider than the caller's. A marker without a valid seal is ignored: the call
   is checked, routed, limited and logged as the direct call it is;
2. it wraps the method's handler, so that once the request is deserialized it
   asks ``scopes.authorize(token, method, namespace)`` for every namespace the
   request names (``namespace_of_request``): PERMISSION_DENIED with the reason;
3. the servicer code then runs with the caller in a contextvar: ``caller()``
   (None when auth is off) and ``may_see(namespace)`` to filter reads of ``*``;
   forwarding passes ``caller_secret()`` on (``routing.Router.forward_metadata``);
4. after a write call returns OK it logs one INFO line on ``shardcron.audit``
   (``call= token= namespace= target=``) on the node that applied it, with the
   original caller's token name: a node that forwarded the write to its leader
   logs nothing for it (``Router.call`` says so through ``sent_elsewhere``), and
   the leader logs it. A ``denied`` line is logged for each refusal, wherever it
   is refused;
5. a stream ends as soon as its token is revoked (``NodeTokens.on_revoked``,
   told by the etcd watch of ``api/token_source.py``): UNAUTHENTICATED, "token
   revoked". The marker of a sealed forwarded call is kept for the servicer code
   in a contextvar: ``forwarded_by_peer()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from shardcron.api.peers import Seal
from shardcron.api.status import status_for
from shardcron.api.token_source import NodeTokens
from shardcron.api.tokens import secret_from_authorization
from shardcron.errors import InvalidJob
from shardcron.rules.scopes import ALL_NAMESPACES, Token, authorize, forwarded_identity, may_read
from shardcron.spec.namespaces import namespace_or_default

log = logging.getLogger(__name__)
audit_log = logging.getLogger("shardcron.audit")

OPEN_METHODS_PREFIX = "/grpc.health.v1.Health/"
SCHEDULER_PREFIX = "/shardcron.v1.Scheduler/"
AUTHORIZATION = "authorization"
NODE_TOKEN_HEADER = "x-shardcron-node-token"  # the forwarding node's own secret, next to its caller's
REVOKED = "token revoked: this stream's token was revoked; log in or pass another token"

HOW_TO_PASS = (
    "a valid bearer token is required: pass --token or set SHARDCRON_TOKEN (metadata 'authorization: Bearer <secret>')"
)

_caller: contextvars.ContextVar[Token | None] = contextvars.ContextVar("shardcron_caller", default=None)
_secret: contextvars.ContextVar[str | None] = contextvars.ContextVar("shardcron_caller_secret", default=None)
_forwarded: contextvars.ContextVar[bool] = contextvars.ContextVar("shardcron_forwarded_by_peer", default=False)


@dataclass
class _Applied:
    """Where the write being served was applied, as ``Router.call`` and the batch writer learn it:
    shared (not copied) by the tasks a call starts, so a forward made in one of them still counts."""

    elsewhere: bool = False  # the whole call went on to its shard's leader, which logs it
    items_elsewhere: set[int] = field(default_factory=set)  # PutJobs: the jobs (by index) a leader applied


_applied: contextvars.ContextVar[_Applied | None] = contextvars.ContextVar("shardcron_applied", default=None)


def forwarded_by_peer() -> bool:
    """Whether the call being served came from a member node (its forwarded marker's seal matched)."""
    return _forwarded.get()


def sent_elsewhere(elsewhere: bool = True) -> None:
    """The write being served was applied by another node (True), or here after all (False)."""
    applied = _applied.get()
    if applied is not None:
        applied.elsewhere = elsewhere


def item_sent_elsewhere(index: int) -> None:
    """Job ``index`` of the PutJobs being served was applied by its leader, which logs it."""
    applied = _applied.get()
    if applied is not None:
        applied.items_elsewhere.add(index)


def caller() -> Token | None:
    """The token of the call being served; None when the node checks no tokens."""
    return _caller.get()


def caller_secret() -> str | None:
    """The bearer secret the call being served arrived with: what forwarding passes on."""
    return _secret.get()


def may_see(namespace: str) -> bool:
    """Whether the caller may read ``namespace``'s jobs, ticks and backfills (everything when auth is off)."""
    token = _caller.get()
    return token is None or may_read(token, namespace)


def readable_namespaces() -> frozenset[str] | None:
    """The namespaces the caller may read; None: every one (auth off, or a token on ``*``)."""
    token = _caller.get()
    return None if token is None or token.everywhere else frozenset(token.namespaces)


def read_namespaces(requested: str) -> frozenset[str] | None:
    """The namespaces a read covers: the one it names (empty: default), or for ``*`` every one the
    caller may read (None: every namespace)."""
    if requested == ALL_NAMESPACES:
        return readable_namespaces()
    return frozenset({namespace_or_default(requested)})


# -- what a request names (pure) ---------------------------------------------------------


def _ns(text: str) -> str:
    return text if text == ALL_NAMESPACES else namespace_or_default(text)


def _field(name: str) -> Callable[[Any], tuple[str, ...]]:
    return lambda r: (_ns(getattr(r, name)),)


_NO_NAMESPACE: Callable[[Any], tuple[str, ...]] = lambda r: ()  # noqa: E731 - ANY and CLUSTER calls

# For every RPC: the namespaces its request names (each is checked). Empty: default.
_NAMESPACES_OF: dict[str, Callable[[Any], tuple[str, ...]]] = {
    "PutJob": lambda r: (_ns(r.job.namespace),),
    "PutJobs": lambda r: tuple(dict.fromkeys(_ns(j.namespace) for j in r.jobs)) or ("default",),
    **{
        m: _field("namespace")
        for m in (
            "GetJob",
            "DeleteJob",
            "ListJobs",
            "PauseJob",
            "ResumeJob",
            "TriggerJob",
            "AckTick",
            "BackfillJob",
            "GetBackfill",
            "ListBackfills",
            "ListTicks",
            "ListDeadlineMisses",
            "WatchTicks",
        )
    },
    "GetNamespace": _field("name"),
    **{
        m: _NO_NAMESPACE
        for m in (
            "GetShards",
            "PutJobEach",  # each PutJob it carries is checked on its own (item_refusal)
            "PutCalendar",
            "GetCalendar",
            "ListCalendars",
            "DeleteCalendar",
            "ListNamespaces",
            "CreateNamespace",
            "UpdateNamespace",
            "DeleteNamespace",
            "ListTokens",
            "CreateToken",
            "RevokeToken",
        )
    },
}

# The write calls, each with what it acts on (the audit line's target).
_TARGET_OF: dict[str, Callable[[Any], str]] = {
    "PutJob": lambda r: r.job.id,
    "PutJobs": lambda r: ",".join(j.id for j in r.jobs[:20]) + (f",+{len(r.jobs) - 20}" if len(r.jobs) > 20 else ""),
    **{m: (lambda r: r.id) for m in ("DeleteJob", "PauseJob", "ResumeJob", "TriggerJob", "BackfillJob")},
    "AckTick": lambda r: f"{r.id}@{r.scheduled_at_ms}" if r.HasField("scheduled_at_ms") else r.id,
    "PutCalendar": lambda r: r.calendar.name,
    "DeleteCalendar": lambda r: r.name,
    "CreateNamespace": lambda r: r.namespace.name,
    "UpdateNamespace": lambda r: r.namespace.name,
    "DeleteNamespace": lambda r: r.name,
    "CreateToken": lambda r: r.token.name,
    "RevokeToken": lambda r: r.name,
}
WRITE_CALLS = frozenset(_TARGET_OF)


def namespace_of_request(method: str, request) -> tuple[str, ...]:
    """The namespaces ``request`` of RPC ``method`` acts in (empty: ``default``; ``*`` kept); () for a call
    on cluster-wide data. KeyError for an RPC this table lacks (a test checks every RPC is in it)."""
    return _NAMESPACES_OF[method](request)


def check(token: Token, method: str, request) -> str | None:
    """None when ``token`` may make this call, else the reason to send with PERMISSION_DENIED."""
    names = namespace_of_request(method, request) if method in _NAMESPACES_OF else (None,)
    for namespace in names or (None,):
        denied = authorize(token, method, namespace)
        if denied is not None:
            return denied.reason
    return None


def audit_line(method: str, token: Token, request, outcome: str = "ok", target: str | None = None) -> str:
    names = namespace_of_request(method, request) if method in _NAMESPACES_OF else ()
    if target is None:
        target = _TARGET_OF[method](request) if method in _TARGET_OF else "-"
    return f"call={method} token={token.name} namespace={','.join(names) or '-'} target={target}" + (
        "" if outcome == "ok" else f" {outcome}"
    )


def applied_here_target(request, answer, applied: _Applied) -> str | None:
    """A PutJobs audit line's target: the jobs this node wrote (OK, and not applied by a leader it forwarded
    them to); None when it wrote none."""
    ids = [
        j.id
        for i, (j, r) in enumerate(zip(request.jobs, answer.results, strict=False))
        if r.code == 0 and i not in applied.items_elsewhere
    ]
    if not ids:
        return None
    return ",".join(ids[:20]) + (f",+{len(ids) - 20}" if len(ids) > 20 else "")


# -- serving a call as its caller (the interceptor's, and api/in_process.py's) ------------


def serving_as(token: Token | None, secret: str | None, forwarded: bool) -> None:
    """The call being served (in this task's context) is ``token``'s, which arrived with ``secret``."""
    _forwarded.set(forwarded)
    _caller.set(token)
    _secret.set(secret)


def admit(name: str, token: Token, secret: str | None, request) -> tuple[grpc.StatusCode, str] | None:
    """Sets ``token`` as the caller of RPC ``name``; or the status that refuses it: PERMISSION_DENIED
    (audit-logged as ``denied``), or INVALID_ARGUMENT for a namespace that breaks the name rule (the same
    answer the servicer would give)."""
    serving_as(token, secret, _forwarded.get())
    return item_refusal(name, request)


def item_refusal(name: str, request) -> tuple[grpc.StatusCode, str] | None:
    """What ``admit`` answers for RPC ``name`` with ``request``, for the caller being served: None (allowed,
    or auth is off), or the refusal, audit-logged as ``denied``. ``api/put_each.py`` asks it for each PutJob
    a combined call carries, as the interceptor would have asked for that PutJob alone."""
    token = _caller.get()
    if token is None:
        return None
    try:
        reason = check(token, name, request)
    except InvalidJob as e:
        return status_for(e)
    if reason is None:
        return None
    audit_log.info("%s", audit_line(name, token, request, "denied"))
    return grpc.StatusCode.PERMISSION_DENIED, reason


def audit_item(name: str, request) -> None:
    """The audit line of write ``name`` with ``request``, applied here for the caller being served (none when
    auth is off): one per PutJob a combined call carries, as that PutJob alone would have been logged."""
    token = _caller.get()
    if token is not None:
        audit_log.info("%s", audit_line(name, token, request))


def track_applied() -> _Applied:
    """Where the write about to be served is applied, as ``Router.call`` will say (``sent_elsewhere``)."""
    applied = _Applied()
    _applied.set(applied)
    return applied


# -- the interceptor ----------------------------------------------------------------------


def bearer_of(metadata: Sequence[tuple[str, str]] | None, header: str = AUTHORIZATION) -> str | None:
    """The secret ``header`` names (``Bearer`` in any case, or bare; surrounding whitespace dropped)."""
    value = next((v for k, v in metadata or () if k == header), None)
    return secret_from_authorization(value) if isinstance(value, str) else None


def identify(tokens: NodeTokens, metadata, seal: Seal) -> tuple[Token | None, str | None, bool]:
    """The identity a call is checked as, the caller's secret (to pass on when forwarding), and whether a
    member node forwarded it (its marker is sealed: else the marker is ignored)."""
    secret = bearer_of(metadata)
    token = tokens.identify(secret) if secret else None
    if not seal.sealed(metadata, secret):
        return token, secret, False
    node_secret = bearer_of(metadata, NODE_TOKEN_HEADER)
    node = tokens.identify(node_secret) if node_secret else None
    if token is None and node is None:
        return None, None, True
    return forwarded_identity(token, node), secret, True


class Authorize(grpc.aio.ServerInterceptor):
    """On every node: it checks a forwarded marker's seal (``forwarded_by_peer``). With ``tokens`` (the node
    has a token file) it also identifies, authorizes and audits every call, and ends a revoked token's streams."""

    def __init__(self, tokens: NodeTokens | None, seal: Seal):
        self.tokens = tokens
        self.seal = seal

        async def unauthenticated(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, HOW_TO_PASS)

        self._deny_unary = grpc.unary_unary_rpc_method_handler(unauthenticated)
        self._deny_stream = grpc.unary_stream_rpc_method_handler(unauthenticated)

    async def intercept_service(self, continuation, details):
        method = details.method
        if method.startswith(OPEN_METHODS_PREFIX):
            return await continuation(details)
        metadata = details.invocation_metadata
        if self.tokens is None:
            token, secret, forwarded = None, None, self.seal.sealed(metadata, bearer_of(metadata))
        else:
            token, secret, forwarded = identify(self.tokens, metadata, self.seal)
        handler = await continuation(details)
        if handler is None:
            return None
        if self.tokens is not None and token is None:
            return self._deny_stream if handler.response_streaming else self._deny_unary
        if not method.startswith(SCHEDULER_PREFIX):
            return handler  # reflection: any known token
        name = method[len(SCHEDULER_PREFIX) :]
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, name, token, secret, forwarded),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, name, token, secret, forwarded),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _admit(self, context, name: str, token: Token, secret: str | None, request) -> None:
        """Sets the caller for the servicer code, or aborts (``refusal``)."""
        refused = admit(name, token, secret, request)
        if refused is not None:
            await context.abort(*refused)

    def _unary(self, inner, name: str, token: Token | None, secret: str | None, forwarded: bool):
        async def checked(request, context):
            _forwarded.set(forwarded)
            if token is None or not hasattr(request, "DESCRIPTOR"):  # no tokens; or refused while parsing
                return await inner(request, context)
            await self._admit(context, name, token, secret, request)
            applied = track_applied()
            answer = await inner(request, context)  # a failure aborts: no audit line for it
            audit_applied(name, token, request, answer, applied)
            return answer

        return checked

    def _stream(self, inner, name: str, token: Token | None, secret: str | None, forwarded: bool):
        async def checked(request, context):
            _forwarded.set(forwarded)
            if token is None:
                async for event in inner(request, context):
                    yield event
                return
            if hasattr(request, "DESCRIPTOR"):
                await self._admit(context, name, token, secret, request)
            async for event in self._until_revoked(inner(request, context), token, context):
                yield event

        return checked

    async def _until_revoked(self, events, token: Token, context):
        """``events`` until ``token`` is revoked; then the stream ends UNAUTHENTICATED, saying so.

        The revocation comes from the tokens' reload thread. While the stream waits for its next event
        it is woken by cancelling the call's task (caught here, and only then); while an event is being
        sent, the flag is seen before the next one."""
        task = asyncio.current_task()
        state = _StreamState()

        def revoked() -> None:
            state.revoked = True
            if state.waiting and task is not None:
                task.cancel()

        assert self.tokens is not None
        unsubscribe = self.tokens.when_revoked(token.secret_hash, asyncio.get_running_loop(), revoked)
        try:
            async with contextlib.aclosing(events) as it:
                while not state.revoked:
                    state.waiting = True
                    try:
                        event = await it.__anext__()
                    except StopAsyncIteration:
                        return
                    except asyncio.CancelledError:
                        if not state.revoked:
                            raise
                        task.uncancel()
                        break
                    finally:
                        state.waiting = False
                    yield event
        finally:
            unsubscribe()
        log.info("a stream of token %r ended: the token was revoked", token.name)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, REVOKED)


@dataclass
class _StreamState:
    revoked: bool = False
    waiting: bool = False  # awaiting the next event (not sending one)


def audit_applied(name: str, token: Token, request, answer, applied: _Applied) -> None:
    """After a call of ``name`` returned OK: one audit line for a write applied here; none for a read, nor
    for a write its shard's leader applied (it logs it), nor for a PutJobs ``validate_only``, which wrote nothing."""
    if name not in WRITE_CALLS or applied.elsewhere or getattr(request, "validate_only", False):
        return
    target = None
    if name == "PutJobs":
        target = applied_here_target(request, answer, applied)
        if target is None:
            return
    audit_log.info("%s", audit_line(name, token, request, target=target))


__all__ = [
    "AUTHORIZATION",
    "Authorize",
    "NODE_TOKEN_HEADER",
    "REVOKED",
    "WRITE_CALLS",
    "admit",
    "audit_applied",
    "audit_item",
    "audit_line",
    "bearer_of",
    "caller",
    "caller_secret",
    "check",
    "forwarded_by_peer",
    "identify",
    "item_refusal",
    "item_sent_elsewhere",
    "may_see",
    "namespace_of_request",
    "readable_namespaces",
    "sent_elsewhere",
    "serving_as",
    "track_applied",
]
