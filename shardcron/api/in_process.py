"""The API's calls made in this process, as a caller: what the dashboard uses instead of a loopback channel.

``InProcessApi.as_caller(secret)`` answers as ``client.Client`` would for a
caller with that bearer secret, without a channel: on the node's loop it
does what the server does to a call that arrives, then awaits the same
servicer method (``service.SchedulerService``):

1. identify the caller with the node's tokens (none: UNAUTHENTICATED, as
   ``auth.Authorize`` answers); without a token file nothing is checked;
2. ``auth.admit``: the token's scope for every namespace the request names
   (PERMISSION_DENIED, audit-logged ``denied``);
3. the servicer method, in a task of its own whose context holds the caller
   (``auth.caller()``), with the caller's deadline. A call about a job whose
   shard another node leads is forwarded to that node over gRPC by
   ``routing.Router`` with the caller's secret, as any call is; store work
   runs on the API's pool (``Router.blocking``), never on the loop;
4. after an OK write, its audit line (``auth.audit_applied``).

A failure is raised as the ``client.errors.ApiError`` the client would raise
for the status the server would send (``status.status_for``); a bug is
logged with its traceback and is INTERNAL, never a traceback to the caller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc

from shardcron.api import auth
from shardcron.api.limits import StreamSlots
from shardcron.api.service import SchedulerService
from shardcron.api.status import clip, log_if_bug, status_for
from shardcron.api.token_source import NodeTokens
from shardcron.client.errors import ApiError, api_error
from shardcron.model import Tick
from shardcron.rules.scopes import Token
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.calls import CALL_NAMES, Calls, answered_async
from shardcron.wire.tick_convert import tick_from_proto

DEFAULT_TIMEOUT_S = 30.0  # as the dashboard's API client had
IN_PROCESS_PEER = "in-process"  # whose streams the ones opened here are, for --max-streams-per-peer


class _CallContext:
    """What the servicer methods ask of a call's context: the time the caller left it."""

    def __init__(self, timeout_s: float):
        self._ends = time.monotonic() + timeout_s

    def time_remaining(self) -> float:
        return max(0.0, self._ends - time.monotonic())


class InProcessApi:
    """The node's API servicer, called in this process; made by ``ApiServer`` on the node's loop."""

    def __init__(self, service: SchedulerService, tokens: NodeTokens | None, slots: StreamSlots):
        self.service = service
        self.tokens = tokens  # None: the node checks no tokens
        self.slots = slots  # the server's: a stream opened here counts against --max-streams too
        self.pool = service.router.pool  # the API's blocking work off the loop

    def as_caller(self, secret: str | None) -> CallerApi:
        return CallerApi(self, secret)

    async def call(self, secret: str | None, method: str, request, timeout_s: float | None = None):
        """The answer of RPC ``method`` to ``request`` for the caller with ``secret``; ApiError otherwise."""
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        # A task of its own: the caller set in its context stays there (asyncio copies the context for it).
        serving = asyncio.ensure_future(self._serve(secret, method, request, timeout))
        try:
            async with asyncio.timeout(timeout):
                return await serving
        except TimeoutError:
            raise api_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None

    async def _serve(self, secret: str | None, method: str, request, timeout_s: float):
        token = self._admit(secret, method, request)
        applied = auth.track_applied()
        try:
            answer = await getattr(self.service, method)(request, _CallContext(timeout_s))
        except Exception as e:  # noqa: BLE001 - every failure gets the status the server would send
            raise _failed(e, method) from None
        if token is not None:
            auth.audit_applied(method, token, request, answer, applied)
        return answer

    def _admit(self, secret: str | None, method: str, request) -> Token | None:
        """The caller, set in this task's context; ApiError when the server would refuse the call."""
        if self.tokens is None:
            auth.serving_as(None, None, forwarded=False)
            return None
        token = self.tokens.identify(secret) if secret else None
        if token is None:
            raise api_error(grpc.StatusCode.UNAUTHENTICATED, auth.HOW_TO_PASS)
        refused = auth.admit(method, token, secret, request)
        if refused is not None:
            raise api_error(*refused)
        return token

    async def watch_ticks(self, secret: str | None, job_id: str, namespace: str | None = None) -> AsyncIterator[Tick]:
        """WatchTicks of one job for the caller with ``secret``: its ticks as they are written, until the
        watch is closed (ApiError when refused or ended). Iterate it in a task of its own: the caller is set
        in the iterating task's context. A revoked token's watch is for the iterating code to end (the
        dashboard does: ``NodeTokens.when_revoked``)."""
        job_id, ns = Calls().ref(job_id, namespace)
        request = pb.WatchTicksRequest(job_id=job_id, namespace=ns)
        self._admit(secret, "WatchTicks", request)
        try:
            self.slots.acquire(IN_PROCESS_PEER, forwarded=False)
        except Exception as e:  # noqa: BLE001 - CallFailed: over --max-streams
            raise _failed(e, "WatchTicks") from None
        try:
            context = cast(grpc.aio.ServicerContext, _CallContext(DEFAULT_TIMEOUT_S))  # all the servicer asks of it
            async for event in self.service.WatchTicks(request, context):
                yield tick_from_proto(event.tick)
        except Exception as e:  # noqa: BLE001 - every failure gets the status the server would send
            raise _failed(e, "WatchTicks") from None
        finally:
            self.slots.release(IN_PROCESS_PEER)


def _failed(e: Exception, method: str) -> ApiError:
    """The ApiError a client would get for what serving ``method`` raised; a bug is logged with its traceback."""
    if isinstance(e, ApiError):
        return e
    log_if_bug(e, method)
    code, details = status_for(e)
    return api_error(code, clip(details))


class CallerApi:
    """``client.Client``'s calls about jobs (``wire.calls.Calls``), for one caller, in this process (async).

    ``await caller.call("pause_job", "nightly", namespace="team-a", timeout_s=10)`` answers as
    ``Client.pause_job("nightly", namespace="team-a", timeout_s=10)`` would: the same arguments, checked and
    built into the same request, the same result. A bare id is a ``default`` job, as for a ``Client`` made
    without a namespace.
    """

    def __init__(self, api: InProcessApi, secret: str | None):
        self._api = api
        self._secret = secret
        self._calls = Calls()

    async def call(self, name: str, *args: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """What ``Client.<name>(*args, **kwargs, timeout_s=timeout_s)`` returns; ApiError as it raises.

        ``name`` must be one of the calls (``wire.calls.CALL_NAMES``), not another attribute of ``Calls``.
        """
        if name not in CALL_NAMES:
            raise ValueError(f"no call named {name!r}; the calls are {', '.join(sorted(CALL_NAMES))}")
        exchange = getattr(self._calls, name)(*args, **kwargs)
        return await answered_async(
            exchange, lambda method, request: self._api.call(self._secret, method, request, timeout_s)
        )
