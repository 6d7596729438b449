"""Who is calling, and may they: the API's one check of scoped tokens, and its audit log of writes.

``Authorize`` is a server interceptor (on when the node has a token file):

1. it identifies the caller from ``authorization: Bearer <secret>`` with the
   node's ``NodeTokens`` (UNAUTHENTICATED, saying how to pass a token, when none
   or an unknown one; health checks stay open). A call another node forwarded
   (``x-shardcron-forwarded``) carries the CALLER's secret there and the
   forwarding node's own in ``x-shardcron-node-token``: the identity checked is
   ``scopes.forwarded_identity(caller, node)``, never wider than the caller's;
2. it wraps the method's handler, so that once the request is deserialized it
   asks ``scopes.authorize(token, method, namespace)`` for every namespace the
   request names (``namespace_of_request``): PERMISSION_DENIED with the reason;
3. the servicer code then runs with the caller in a contextvar: ``caller()``
   (None when auth is off) and ``may_see(namespace)`` to filter reads of ``*``;
   forwarding passes ``caller_secret()`` on (``routing.Router.forward_metadata``);
4. after a write call returns OK it logs one INFO line on ``shardcron.audit``
   (``call= token= namespace= target=``) on the node the caller reached (not
   again on the leader it was forwarded to), and a ``denied`` line for each
   refusal, wherever it is refused.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Sequence

import grpc

from shardcron.api.status import status_for
from shardcron.api.token_source import NodeTokens
from shardcron.errors import InvalidJob
from shardcron.tenancy.namespaces import namespace_or_default
from shardcron.tenancy.scopes import ALL_NAMESPACES, Token, authorize, forwarded_identity, may_read

audit_log = logging.getLogger("shardcron.audit")

OPEN_METHODS_PREFIX = "/grpc.health.v1.Health/"
SCHEDULER_PREFIX = "/shardcron.v1.Scheduler/"
AUTHORIZATION = "authorization"
BEARER = "Bearer "
NODE_TOKEN_HEADER = "x-shardcron-node-token"  # the forwarding node's own secret, next to its caller's
FORWARDED_HEADER = "x-shardcron-forwarded"  # routing.FORWARDED_HEADER (not imported: routing imports us)

HOW_TO_PASS = ("a valid bearer token is required: pass --token or set SHARDCRON_TOKEN "
               "(metadata 'authorization: Bearer <secret>')")

_caller: contextvars.ContextVar[Token | None] = contextvars.ContextVar("shardcron_caller", default=None)
_secret: contextvars.ContextVar[str | None] = contextvars.ContextVar("shardcron_caller_secret", default=None)


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


# -- what a request names (pure) ---------------------------------------------------------

def _ns(text: str) -> str:
    return text if text == ALL_NAMESPACES else namespace_or_default(text)


def _field(name: str) -> Callable[[object], tuple[str, ...]]:
    return lambda r: (_ns(getattr(r, name)),)


_NO_NAMESPACE: Callable[[object], tuple[str, ...]] = lambda r: ()  # noqa: E731 - ANY and CLUSTER calls

# For every RPC: the namespaces its request names (each is checked). Empty: default.
_NAMESPACES_OF: dict[str, Callable[[object], tuple[str, ...]]] = {
    "PutJob": lambda r: (_ns(r.job.namespace),),
    "PutJobs": lambda r: tuple(dict.fromkeys(_ns(j.namespace) for j in r.jobs)) or ("default",),
    **{m: _field("namespace") for m in (
        "GetJob", "DeleteJob", "ListJobs", "PauseJob", "ResumeJob", "TriggerJob", "BackfillJob", "GetBackfill",
        "ListBackfills", "ListTicks", "WatchTicks")},
    "GetNamespace": _field("name"),
    **{m: _NO_NAMESPACE for m in (
        "GetShards", "PutCalendar", "GetCalendar", "ListCalendars", "DeleteCalendar", "ListNamespaces",
        "CreateNamespace", "UpdateNamespace", "DeleteNamespace", "ListTokens", "CreateToken", "RevokeToken")},
}

# The write calls, each with what it acts on (the audit line's target).
_TARGET_OF: dict[str, Callable[[object], str]] = {
    "PutJob": lambda r: r.job.id,
    "PutJobs": lambda r: ",".join(j.id for j in r.jobs[:20]) + (f",+{len(r.jobs) - 20}" if len(r.jobs) > 20 else ""),
    **{m: (lambda r: r.id) for m in ("DeleteJob", "PauseJob", "ResumeJob", "TriggerJob", "BackfillJob")},
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


def audit_line(method: str, token: Token, request, outcome: str = "ok") -> str:
    names = namespace_of_request(method, request) if method in _NAMESPACES_OF else ()
    target = _TARGET_OF[method](request) if method in _TARGET_OF else "-"
    return (f"call={method} token={token.name} namespace={','.join(names) or '-'} target={target}"
            + ("" if outcome == "ok" else f" {outcome}"))


# -- the interceptor ----------------------------------------------------------------------

def _bearer(metadata: Sequence[tuple[str, str]] | None, header: str) -> str | None:
    for k, v in metadata or ():
        if k == header:
            return v[len(BEARER):] if v.startswith(BEARER) else v
    return None


def identify(tokens: NodeTokens, metadata) -> tuple[Token | None, str | None]:
    """The identity a call is checked as, and the caller's secret (to pass on when forwarding)."""
    secret = _bearer(metadata, AUTHORIZATION)
    token = tokens.identify(secret) if secret else None
    if not any(k == FORWARDED_HEADER for k, _ in metadata or ()):
        return token, secret
    node_secret = _bearer(metadata, NODE_TOKEN_HEADER)
    node = tokens.identify(node_secret) if node_secret else None
    if token is None and node is None:
        return None, None
    return forwarded_identity(token, node), secret


class Authorize(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: NodeTokens):
        self.tokens = tokens

        async def unauthenticated(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, HOW_TO_PASS)

        self._deny_unary = grpc.unary_unary_rpc_method_handler(unauthenticated)
        self._deny_stream = grpc.unary_stream_rpc_method_handler(unauthenticated)

    async def intercept_service(self, continuation, details):
        method = details.method
        if method.startswith(OPEN_METHODS_PREFIX):
            return await continuation(details)
        token, secret = identify(self.tokens, details.invocation_metadata)
        handler = await continuation(details)
        if handler is None:
            return None
        if token is None:
            return self._deny_stream if handler.response_streaming else self._deny_unary
        if not method.startswith(SCHEDULER_PREFIX):
            return handler  # reflection: any known token
        name = method[len(SCHEDULER_PREFIX):]
        forwarded = any(k == FORWARDED_HEADER for k, _ in details.invocation_metadata or ())
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, name, token, secret, audited=not forwarded),
                request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, name, token, secret),
                request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        return handler

    async def _admit(self, context, name: str, token: Token, secret: str | None, request) -> None:
        """Sets the caller for the servicer code, or aborts: PERMISSION_DENIED, or INVALID_ARGUMENT for a
        namespace that breaks the name rule (the same answer the servicer would give)."""
        _caller.set(token)
        _secret.set(secret)
        try:
            reason = check(token, name, request)
        except InvalidJob as e:
            code, details = status_for(e)
            await context.abort(code, details)
        if reason is not None:
            await self._refuse(context, name, token, request, reason)

    async def _refuse(self, context, name: str, token: Token, request, reason: str):
        audit_log.info("%s", audit_line(name, token, request, "denied"))
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason)

    def _unary(self, inner, name: str, token: Token, secret: str | None, audited: bool):
        async def checked(request, context):
            if not hasattr(request, "DESCRIPTOR"):  # refused while parsing (too big): the inner handler says so
                return await inner(request, context)
            await self._admit(context, name, token, secret, request)
            answer = await inner(request, context)  # a failure aborts: no audit line for it
            if audited and name in WRITE_CALLS:  # a forwarded write is logged once, by the node it reached
                audit_log.info("%s", audit_line(name, token, request))
            return answer
        return checked

    def _stream(self, inner, name: str, token: Token, secret: str | None):
        async def checked(request, context):
            if hasattr(request, "DESCRIPTOR"):
                await self._admit(context, name, token, secret, request)
            async for event in inner(request, context):
                yield event
        return checked


__all__ = ["Authorize", "NODE_TOKEN_HEADER", "WRITE_CALLS", "audit_line", "caller", "caller_secret", "check",
           "identify", "may_see", "namespace_of_request", "readable_namespaces"]
