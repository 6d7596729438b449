"""BackfillJob, GetBackfill and ListBackfills, and their messages <-> ``store.backfills.Backfill``.

BackfillJob runs on the leader of the job's shard (``Router.call``, like
TriggerJob): it checks the request against the job's schedule
(``backfill_plan.validate_backfill``: every refusal is INVALID_ARGUMENT naming
the field), counts the slots still owed, writes the backfill's row under the
fence and hands it to the node's ``BackfillRunner``. The two reads are served
by whichever node receives them, from the store.
"""

from __future__ import annotations

from dataclasses import replace

import grpc

from shardcron import clock
from shardcron.abc import Backend
from shardcron.api.auth import read_namespaces
from shardcron.api.routing import Router
from shardcron.coordination.calendar_book import CalendarBook, Unknown
from shardcron.errors import job_named
from shardcron.jobkey import namespace_of
from shardcron.model import Backfill, BackfillState
from shardcron.rules.backfill_plan import BackfillError, owed_slots, validate_backfill
from shardcron.rules.scopes import ALL_NAMESPACES
from shardcron.rules.triggers import trigger_for
from shardcron.sharding import shard_for
from shardcron.spec.namespaces import namespace_or_default, store_key
from shardcron.store import backfills as backfill_store
from shardcron.store import job_reads
from shardcron.store.backfills import BackfillNotFound
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.backfill_convert import backfill_to_proto, overlap_from_proto
from shardcron.wire.messages import BadRequest

LIST_DEFAULT = 100
LIST_MAX = 1000

# The planner names the CLI's options; the API names its own fields.
_FIELD = {
    "--from": "from_ms",
    "--to": "to_ms",
    "--rate": "rate_per_s",
    "--overlap": "overlap",
    "--from/--to": "from_ms/to_ms",
}


def plan_backfill(
    engine, request: pb.BackfillJobRequest, *, shard: int, now_ms: int, calendars: CalendarBook
) -> Backfill:
    """The backfill the request asks for, checked, with its owed slots counted (not yet stored): the
    slots the job's calendars (as they are now) allow, as the leader will run them."""
    job_id = store_key(request.namespace, request.id)
    if request.to_ms > now_ms:
        raise BadRequest(
            "to_ms",
            f"must not be in the future ({request.to_ms} > now {now_ms}): slots from now on are the live schedule's",
        )
    overlap = overlap_from_proto(request.overlap)
    job = job_reads.get_job(engine, job_id)  # NOT_FOUND for a job that does not exist
    trigger = trigger_for(job.schedule)
    try:
        checked = validate_backfill(trigger, request.from_ms, request.to_ms, request.rate_per_s, overlap=overlap)
    except BackfillError as e:
        raise BadRequest(_FIELD.get(e.field, e.field), e.reason) from None
    recorded = backfill_store.recorded_slots(engine, job_id, checked.from_ms, checked.to_ms)
    cals = calendars.resolve(job.calendars) if job.calendars else ()
    if isinstance(cals, Unknown):
        raise BadRequest("id", f"{job_named(job_id)}: {cals.reason}")
    planned = sum(1 for _ in owed_slots(trigger, cals, checked.from_ms, checked.to_ms, recorded))
    return Backfill(
        backfill_store.new_backfill_id(),
        job_id,
        shard,
        checked.from_ms,
        checked.to_ms,
        checked.overlap,
        checked.rate_per_s,
        planned,
        now_ms,
    )


class BackfillService:
    """The backfill RPCs of ``SchedulerService`` (which provides backend and router)."""

    backend: Backend
    router: Router

    async def BackfillJob(
        self, request: pb.BackfillJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.BackfillJobResponse:
        job_id = store_key(request.namespace, request.id)
        shard = shard_for(job_id, self.backend.shard_count)
        b = self.backend

        def here(fence: int) -> pb.BackfillJobResponse:
            bf = plan_backfill(b.engine, request, shard=shard, now_ms=clock.wall_ms(), calendars=b.calendars)
            if not bf.planned:  # nothing owed: stored as done at once, so it is listed and audited like any
                bf = replace(bf, state=BackfillState.DONE)
            bf = backfill_store.create_backfill(b.engine, bf, fence=fence, node_id=b.node_id)
            if bf.state is BackfillState.ACTIVE:
                b.backfill_added(shard)
            return pb.BackfillJobResponse(backfill=backfill_to_proto(bf))

        return await self.router.call(
            shard,
            context,
            self.router.on_pool(here),
            lambda stub, timeout, md: stub.BackfillJob(request, timeout=timeout, metadata=md),
        )

    async def GetBackfill(
        self, request: pb.GetBackfillRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetBackfillResponse:
        if not request.id:
            raise BadRequest("id", "must name a backfill (as BackfillJob answered it)")

        namespace = namespace_or_default(request.namespace)

        def answer() -> pb.GetBackfillResponse:
            bf = backfill_store.get_backfill(self.backend.engine, request.id)
            if namespace_of(bf.job_id) != namespace:  # as if absent: its namespace may be one the caller cannot read
                raise BackfillNotFound(request.id)
            return pb.GetBackfillResponse(backfill=backfill_to_proto(bf))

        return await self.router.blocking(answer)

    async def ListBackfills(
        self, request: pb.ListBackfillsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListBackfillsResponse:
        if request.job_id and request.namespace == ALL_NAMESPACES:
            raise BadRequest("namespace", "the backfills of one job name its namespace (or none: default), not '*'")
        job_id = store_key(request.namespace, request.job_id, "job_id") if request.job_id else None
        namespaces = None if job_id else read_namespaces(request.namespace)
        if request.page_size < 0:
            raise BadRequest("page_size", f"must not be negative, got {request.page_size}")
        size = min(request.page_size or LIST_DEFAULT, LIST_MAX)

        def answer() -> pb.ListBackfillsResponse:
            found = backfill_store.list_backfills(self.backend.engine, job_id=job_id, limit=size, namespaces=namespaces)
            return pb.ListBackfillsResponse(backfills=[backfill_to_proto(bf) for bf in found])

        return await self.router.blocking(answer)


__all__ = ["BackfillService", "plan_backfill"]
