"""PutJobEach on the leader: the PutJob calls a member node combined, each answered as it would be alone.

A node that forwards PutJob calls to one leader combines the ones in flight
at once for one caller (``api/put_combining.py``) into one PutJobEach. Here,
each PutJob it carries goes through what that PutJob alone goes through on
this node, concurrently (so they share the leader's transaction, as
concurrent PutJob calls do: ``api/job_puts.py``):

1. the size the server's request parser would have checked
   (``--max-request-bytes``, RESOURCE_EXHAUSTED naming it);
2. the caller's scope for the job's namespace, as the interceptor checks it
   (``auth.item_refusal``: the caller's scope capped by the forwarding node's,
   a ``denied`` audit line when refused);
3. the servicer's PutJob itself (admission, ``expected_version``, the fence);
4. after it is written, the one audit line PutJob gets, with the caller's name
   (``auth.audit_item``).

Each answer is the status PutJob would have answered (``status.status_for``),
with ``retry`` where its answer would have carried ``x-shardcron-retry``: the
forwarding node then sends that call (only it) to the shard's new leader.

Only a member node may call it (its forwarded marker is sealed: ``api/peers.py``);
anyone else is refused PERMISSION_DENIED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc

from shardcron.api import auth
from shardcron.api.status import CallFailed, clip, log_if_bug, retry_hint, status_for
from shardcron.v1 import scheduler_pb2 as pb

# Far more than a forwarding node sends (put_combining.MAX_BATCH): a bound on what one call may ask of the loop.
MAX_CALLS = 1024
MEMBERS_ONLY = "PutJobEach is a call between member nodes (a forwarded marker sealed with the cluster's secret)"

PutJob = Callable[[pb.PutJobRequest, grpc.aio.ServicerContext], Awaitable[pb.PutJobResponse]]


async def put_each(
    request: pb.PutJobEachRequest,
    context: grpc.aio.ServicerContext,
    put_job: PutJob,
    *,
    node_id: str,
    max_request_bytes: int,
) -> pb.PutJobEachResponse:
    """Every call of ``request`` through ``put_job`` (the servicer's PutJob), each with its own outcome."""
    if not auth.forwarded_by_peer():
        raise CallFailed(grpc.StatusCode.PERMISSION_DENIED, MEMBERS_ONLY)
    if len(request.calls) > MAX_CALLS:
        raise CallFailed(
            grpc.StatusCode.RESOURCE_EXHAUSTED, f"{len(request.calls)} calls in one PutJobEach; at most {MAX_CALLS}"
        )
    outcomes = await asyncio.gather(*(_one(call, context, put_job, max_request_bytes) for call in request.calls))
    return pb.PutJobEachResponse(outcomes=outcomes, node=node_id)


async def _one(
    call: pb.PutJobRequest, context: grpc.aio.ServicerContext, put_job: PutJob, max_request_bytes: int
) -> pb.PutJobOutcome:
    size = call.ByteSize()
    if size > max_request_bytes:  # what the request parser answers for a PutJob this big (api/server.py)
        return _failed(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"request: {size} bytes; this node's --max-request-bytes is {max_request_bytes}",
        )
    refused = auth.item_refusal("PutJob", call)
    if refused is not None:
        return _failed(*refused)
    try:
        answer = await put_job(call, context)
    except Exception as e:  # noqa: BLE001 - every failure is this call's status, as the server's wrapper makes it
        log_if_bug(e, "PutJob")
        return _failed(*status_for(e), retry=retry_hint(e))
    auth.audit_item("PutJob", call)
    return pb.PutJobOutcome(code=grpc.StatusCode.OK.value[0], job=answer.job)


def _failed(code: grpc.StatusCode, details: str, *, retry: bool = False) -> pb.PutJobOutcome:
    return pb.PutJobOutcome(code=code.value[0], message=clip(details), retry=retry)


__all__ = ["MAX_CALLS", "MEMBERS_ONLY", "put_each"]
