"""The Scheduler servicer: every RPC of ``protos/shardcron/v1/scheduler.proto``.

Reads (GetJob, ListJobs, ListTicks, GetShards) are served by whichever node
receives them, from the store or the node's view of etcd. Writes and
TriggerJob run on the leader of the job's shard, under its fence
(``routing.Router.call``). Each handler is a coroutine on the API server's
loop; what touches the store runs on the server's pool (``Router.blocking``).
It returns a response or raises; the server (``server.py``) turns what it
raises into a status (``status.py``).

List answers are bounded by bytes as well as by count (``PAGE_BYTES``), so a
page of big jobs or long tick outputs is shorter, never too large to send.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from shardcron import clock
from shardcron.abc import Backend
from shardcron.api import admission, auth
from shardcron.api.backfills import BackfillService
from shardcron.api.batch import BatchWriter
from shardcron.api.calendar_rpcs import CalendarRpcs
from shardcron.api.job_puts import JobPuts
from shardcron.api.limits import ApiLimits, TriggerBudget
from shardcron.api.namespace_rpcs import NamespaceRpcs
from shardcron.api.put_combining import PutJobCombiner
from shardcron.api.put_each import put_each
from shardcron.api.routing import Router, is_forwarded
from shardcron.api.token_rpcs import TokenRpcs
from shardcron.api.watch import Watches
from shardcron.coordination.calendar_book import Unknown
from shardcron.errors import InvalidJob, JobNotFound, NotLeader
from shardcron.jobkey import split_key
from shardcron.model import Job
from shardcron.rules.runs import job_runs
from shardcron.rules.scopes import ALL_NAMESPACES
from shardcron.rules.triggers import trigger_for
from shardcron.runtime.lifeline import UNWATCHED, Lifeline
from shardcron.sharding import shard_for
from shardcron.spec.bounds import INT64_MAX
from shardcron.spec.job import MAX_LABELS
from shardcron.spec.namespaces import store_key
from shardcron.store import deadlines as deadline_store
from shardcron.store import job_reads, tick_reads
from shardcron.store import jobs as job_store
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import job_from_proto, job_to_proto
from shardcron.wire.messages import PAGE_MAX, BadRequest, decode_page_token, encode_page_token
from shardcron.wire.shard_map_convert import shard_map_to_proto
from shardcron.wire.tick_convert import deadline_miss_to_proto, job_runs_to_proto, tick_to_proto

T = TypeVar("T")
M = TypeVar("M", bound=Message)

JOBS_PAGE_DEFAULT = 100
TICKS_PAGE_DEFAULT = 50
MISSES_PAGE_DEFAULT = 100
MAX_ID_PREFIX_BYTES = 256  # an id is at most 256 bytes (spec.job)
# A page ends before the one that would take it past this many bytes (it always holds at
# least one: a job is at most a few MiB, and callers accept client.channel.MAX_ANSWER_BYTES).
PAGE_BYTES = 4 * 1024 * 1024


def _page_size(value: int, default: int, field: str = "page_size") -> int:
    if value < 0:
        raise BadRequest(field, f"must not be negative, got {value}")
    return min(value or default, PAGE_MAX)


def bounded_page(
    items: Sequence[T], size: int, to_proto: Callable[[T], M], max_bytes: int = PAGE_BYTES
) -> tuple[list[M], bool]:
    """(protos of the first items that fit in ``size`` entries and ``max_bytes``, whether more follow).

    ``items`` holds up to ``size + 1`` entries: one more than the page tells that there is a next one."""
    page: list[M] = []
    total = 0
    for item in items[:size]:
        proto = to_proto(item)
        total += proto.ByteSize() + 8  # the field's tag and length
        if page and total > max_bytes:
            return page, True
        page.append(proto)
    return page, len(items) > size


class SchedulerService(CalendarRpcs, NamespaceRpcs, BackfillService, TokenRpcs):
    """Made on the API server's loop (its watches hold the loop). The calendar and backfill RPCs are in
    ``api/calendar_rpcs.py`` and ``api/backfills.py``."""

    def __init__(
        self,
        backend: Backend,
        router: Router,
        stopping: threading.Event,
        limits: ApiLimits,
        lifeline: Lifeline = UNWATCHED,
    ):
        self.backend = backend
        self.router = router
        self.stopping = stopping
        self.limits = limits
        self.batch = BatchWriter(backend, router, limits.max_jobs_per_call)
        self.job_puts = JobPuts(
            backend.engine,
            backend.node_id,
            pool=router.pool,
            written=lambda shard, job: backend.job_written(shard, job),
            lifeline=lifeline,
        )
        self.combiner = PutJobCombiner()  # PutJob forwards to one leader for one caller share a call
        self.watches = Watches(backend, router, stopping, lifeline)
        self.triggers = TriggerBudget(limits.trigger_rate)

    def close(self) -> None:
        self.combiner.close()
        self.watches.close()

    # -- helpers ------------------------------------------------------------------

    def _shard(self, job_id: str) -> int:
        return shard_for(job_id, self.backend.shard_count)

    def _admissible(self, job: Job) -> None:
        admission.check_job(self.backend, job)

    def _job_answer(self, job: Job) -> pb.Job:
        return job_to_proto(job, redact=True)

    def _with_runs(self, jobs: list[Job]):
        """A to_proto for these jobs that adds each one's runs (next slot, last tick, failures in a
        row): one statement for the page's last ticks (``last_runs``), not one per job."""
        now = clock.wall_ms()
        last = tick_reads.last_runs(self.backend.engine, [j.id for j in jobs], now_ms=now)
        triggers: dict = {}  # jobs of one schedule share its trigger for the page

        def to_proto(job: Job) -> pb.Job:
            p = self._job_answer(job)
            trigger = triggers.get(job.schedule) or triggers.setdefault(job.schedule, trigger_for(job.schedule))
            lr = last.get(job.id)
            cals = self.backend.calendars.resolve(job.calendars) if job.calendars else ()
            runs = job_runs(
                job,
                now,
                trigger=trigger,
                last_scheduled_at_ms=lr and lr.scheduled_at_ms,
                last_status=lr and lr.status,
                failures=lr.failures_in_a_row if lr else 0,
                last_missed_deadlines=lr.missed_deadlines if lr else (),
                calendars=() if isinstance(cals, Unknown) else cals,
            )
            if isinstance(cals, Unknown):  # deleted with --force: nothing is owed until it is put again
                runs = replace(runs, next_slot_ms=None, next_start_ms=None, next_reason=cals.reason)
            p.runs.CopyFrom(job_runs_to_proto(runs))
            return p

        return to_proto

    # -- jobs ------------------------------------------------------------------------

    async def PutJob(self, request: pb.PutJobRequest, context: grpc.aio.ServicerContext) -> pb.PutJobResponse:
        job = job_from_proto(request.job)
        expected = request.expected_version if request.HasField("expected_version") else None
        if expected is not None and expected < 0:
            raise BadRequest("expected_version", f"must be at least 0 (0: create only), got {expected}")
        self._admissible(job)  # here for a quick answer; the leader checks again with its own flag and clock
        shard = self._shard(job.id)

        async def here(fence: int) -> pb.PutJobResponse:
            self._admissible(job)
            # Queued on this loop; one pool thread writes the batch and tells the scheduler.
            stored = await self.job_puts.submit(job_store.Put(job, shard, fence, expected))
            return pb.PutJobResponse(job=self._job_answer(stored))

        # Forwarded, it may share one call to the leader with others of the same caller (api/put_combining.py).
        return await self.router.call(
            shard, context, here, lambda stub, timeout, md: self.combiner.put(stub, request, timeout, md)
        )

    async def PutJobEach(
        self, request: pb.PutJobEachRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutJobEachResponse:
        return await put_each(
            request,
            context,
            self.PutJob,
            node_id=self.backend.node_id,
            max_request_bytes=self.limits.max_request_bytes,
        )

    async def PutJobs(self, request: pb.PutJobsRequest, context: grpc.aio.ServicerContext) -> pb.PutJobsResponse:
        return await self.batch.put_jobs(request, context)

    async def GetJob(self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext) -> pb.GetJobResponse:
        job_id = store_key(request.namespace, request.id)

        def answer() -> pb.GetJobResponse:
            job = job_reads.get_job(self.backend.engine, job_id)
            return pb.GetJobResponse(job=self._with_runs([job])(job))

        return await self.router.blocking(answer)

    async def DeleteJob(self, request: pb.DeleteJobRequest, context: grpc.aio.ServicerContext) -> pb.DeleteJobResponse:
        job_id = store_key(request.namespace, request.id)
        shard = self._shard(job_id)
        b = self.backend

        def here(fence: int) -> pb.DeleteJobResponse:
            job_store.delete_job(b.engine, job_id, shard=shard, fence=fence)
            b.job_deleted(shard, job_id)
            return pb.DeleteJobResponse()

        return await self.router.call(
            shard,
            context,
            self.router.on_pool(here),
            lambda stub, timeout, md: stub.DeleteJob(request, timeout=timeout, metadata=md),
        )

    async def _set_paused(self, job_id: str, paused: bool, context, forward):
        shard = self._shard(job_id)
        b = self.backend

        def here(fence: int) -> pb.Job:
            job = job_store.set_paused(
                b.engine, job_id, paused, shard=shard, fence=fence, node_id=b.node_id, now_ms=clock.wall_ms()
            )
            b.job_written(shard, job)
            return self._job_answer(job)

        return await self.router.call(shard, context, self.router.on_pool(here), forward)

    async def PauseJob(self, request: pb.PauseJobRequest, context: grpc.aio.ServicerContext) -> pb.PauseJobResponse:
        job_id = store_key(request.namespace, request.id)

        async def forward(stub, timeout, md):
            return (await stub.PauseJob(request, timeout=timeout, metadata=md)).job

        return pb.PauseJobResponse(job=await self._set_paused(job_id, True, context, forward))

    async def ResumeJob(self, request: pb.ResumeJobRequest, context: grpc.aio.ServicerContext) -> pb.ResumeJobResponse:
        job_id = store_key(request.namespace, request.id)

        async def forward(stub, timeout, md):
            return (await stub.ResumeJob(request, timeout=timeout, metadata=md)).job

        return pb.ResumeJobResponse(job=await self._set_paused(job_id, False, context, forward))

    async def TriggerJob(
        self, request: pb.TriggerJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.TriggerJobResponse:
        job_id = store_key(request.namespace, request.id)
        shard = self._shard(job_id)
        b = self.backend

        def here(fence: int) -> pb.TriggerJobResponse:
            job_reads.get_job(b.engine, job_id)  # NOT_FOUND for a job that does not exist
            # Counted where the run starts (the shard's leader), after NOT_FOUND: a typo spends nothing.
            self.triggers.take(job_id, clock.wall_ms())
            try:
                slot = b.trigger_now(shard, job_id)
            except KeyError:
                if b.fence_if_leader(shard) is None:  # the shard moved away since: its new leader will answer
                    raise NotLeader(shard) from None
                raise JobNotFound(job_id) from None
            key = split_key(slot.job_id)
            return pb.TriggerJobResponse(
                id=key.id, namespace=key.namespace, scheduled_at_ms=slot.scheduled_at_ms, shard=shard
            )

        return await self.router.call(
            shard,
            context,
            self.router.on_pool(here),
            lambda stub, timeout, md: stub.TriggerJob(request, timeout=timeout, metadata=md),
        )

    async def AckTick(self, request: pb.AckTickRequest, context: grpc.aio.ServicerContext) -> pb.AckTickResponse:
        job_id = store_key(request.namespace, request.id)
        slot = request.scheduled_at_ms if request.HasField("scheduled_at_ms") else None
        shard = self._shard(job_id)
        b = self.backend

        def here(fence: int) -> pb.AckTickResponse:
            job_reads.get_job(b.engine, job_id)  # NOT_FOUND for a job that does not exist
            ack = deadline_store.ack_tick(b.engine, job_id, slot, shard=shard, fence=fence, now_ms=clock.wall_ms())
            key = split_key(job_id)
            return pb.AckTickResponse(
                id=key.id,
                namespace=key.namespace,
                scheduled_at_ms=ack.scheduled_at_ms,
                acked_at_ms=ack.acked_at_ms,
                already=ack.already,
            )

        return await self.router.call(
            shard,
            context,
            self.router.on_pool(here),
            lambda stub, timeout, md: stub.AckTick(request, timeout=timeout, metadata=md),
        )

    async def ListJobs(self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext) -> pb.ListJobsResponse:
        size = _page_size(request.page_size, JOBS_PAGE_DEFAULT)
        shard = None
        if request.HasField("shard"):
            shard = request.shard
            if not 0 <= shard < self.backend.shard_count:
                raise BadRequest("shard", f"must be between 0 and {self.backend.shard_count - 1}, got {shard}")
        if len(request.labels) > MAX_LABELS:
            raise BadRequest("labels", f"at most {MAX_LABELS} labels to match, got {len(request.labels)}")
        if any("\x00" in k + v for k, v in request.labels.items()):
            raise BadRequest("labels", "must not contain NUL characters")  # no stored label can hold one
        namespaces = auth.read_namespaces(request.namespace)
        after = decode_page_token(request.page_token)
        if after is not None:
            try:  # a token is the last key of a page
                store_key(split_key(after).namespace, split_key(after).id, "page_token")
            except InvalidJob:
                raise BadRequest("page_token", "is not a token this API returned") from None
        labels = dict(request.labels) or None
        if len(request.id_prefix.encode()) > MAX_ID_PREFIX_BYTES or "\x00" in request.id_prefix:
            raise BadRequest("id_prefix", f"must be at most {MAX_ID_PREFIX_BYTES} bytes, without NUL characters")
        paused = request.paused if request.HasField("paused") else None

        def page() -> pb.ListJobsResponse:
            jobs = job_reads.list_jobs(
                self.backend.engine,
                shard=shard,
                labels=labels,
                limit=size + 1,
                after_id=after,
                namespaces=namespaces,
                id_prefix=request.id_prefix,
                paused=paused,
            )
            protos, more = bounded_page(jobs, size, self._with_runs(jobs[:size]))
            token = encode_page_token(jobs[len(protos) - 1].id) if more else ""
            return pb.ListJobsResponse(jobs=protos, next_page_token=token)

        return await self.router.blocking(page)

    # -- ticks --------------------------------------------------------------------------

    async def ListTicks(self, request: pb.ListTicksRequest, context: grpc.aio.ServicerContext) -> pb.ListTicksResponse:
        job_id = store_key(request.namespace, request.job_id, "job_id")
        size = _page_size(request.page_size, TICKS_PAGE_DEFAULT)
        before = decode_page_token(request.page_token)
        if before is not None:
            try:
                before_ms = int(before)
            except ValueError:
                before_ms = None
            if before_ms is None or not -INT64_MAX <= before_ms <= INT64_MAX:
                raise BadRequest("page_token", "is not a token this API returned")
        else:
            before_ms = None

        def page() -> pb.ListTicksResponse:
            ticks = tick_reads.list_ticks(self.backend.engine, job_id, limit=size + 1, before_ms=before_ms)
            protos, more = bounded_page(ticks, size, tick_to_proto)
            token = encode_page_token(str(protos[-1].scheduled_at_ms)) if more else ""
            return pb.ListTicksResponse(ticks=protos, next_page_token=token)

        return await self.router.blocking(page)

    async def ListDeadlineMisses(
        self, request: pb.ListDeadlineMissesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDeadlineMissesResponse:
        size = _page_size(request.page_size, MISSES_PAGE_DEFAULT)
        namespaces = auth.read_namespaces(request.namespace)

        def page() -> pb.ListDeadlineMissesResponse:
            misses = deadline_store.recent_misses(
                self.backend.engine, since_ms=request.since_ms, namespaces=namespaces, limit=size
            )
            return pb.ListDeadlineMissesResponse(misses=[deadline_miss_to_proto(m) for m in misses])

        return await self.router.blocking(page)

    def WatchTicks(
        self, request: pb.WatchTicksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TickEvent]:
        if request.job_id:
            if request.namespace == ALL_NAMESPACES:
                raise BadRequest("namespace", "a watch of one job names its namespace (or none: default), not '*'")
            job_id = store_key(request.namespace, request.job_id, "job_id")
            if request.local_only:
                return self.watches.local(job_id)
            if is_forwarded(context):
                return self.watches.forwarded_job(job_id)
            return self.watches.job(job_id)
        namespaces = auth.read_namespaces(request.namespace)
        if request.local_only:  # another member's fan-in: it filters for each of its watchers
            return self.watches.local("", namespaces=namespaces)
        return self.watches.all(namespaces)

    # -- shards -----------------------------------------------------------------------

    async def GetShards(self, request: pb.GetShardsRequest, context: grpc.aio.ServicerContext) -> pb.GetShardsResponse:
        return shard_map_to_proto(await self.router.blocking(self.backend.shard_map))
