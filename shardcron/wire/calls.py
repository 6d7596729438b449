"""The calls about jobs that ``client.Client`` and the dashboard's in-process API (``api.in_process.CallerApi``)
both make, built once: from a caller's Python arguments to the requests, and from the answers to shardcron's
dataclasses.

Each call is an ``Exchange``: a generator that yields ``(method, request)``, is sent each answer, and returns
the call's result. It does no I/O itself; the caller runs it with ``answered`` over a blocking channel or
``answered_async`` on an event loop. So both check the same arguments, resolve a job's namespace the same
way and read the answers the same way::

    calls = Calls("default")
    answered(calls.pause_job("nightly"), lambda method, request: channel_call(method, request))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeAlias, TypeVar

from google.protobuf.message import Message

from shardcron.jobkey import DEFAULT_NAMESPACE, join_key, split_key
from shardcron.model import Acked, Backfill, Job, JobRuns, RecordedMiss, SlotRef, Tick
from shardcron.rules.namespace_settings import StoredNamespace
from shardcron.rules.scopes import ALL_NAMESPACES
from shardcron.spec.namespaces import namespace_or_default
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.backfill_convert import backfill_from_proto, overlap_to_proto
from shardcron.wire.convert import job_to_proto, stored_job_from_proto
from shardcron.wire.messages import PAGE_MAX
from shardcron.wire.namespace_convert import stored_namespace_from_proto
from shardcron.wire.shard_map_convert import shard_map_from_proto
from shardcron.wire.tick_convert import deadline_miss_from_proto, job_runs_from_proto, tick_from_proto

T = TypeVar("T")

# Yields (RPC method name, request), is sent that request's answer, returns the call's result.
Exchange: TypeAlias = Generator[tuple[str, Message], Any, T]


def answered(exchange: Exchange[T], send: Callable[[str, Message], Any]) -> T:
    """The result of ``exchange``, each of its requests sent with ``send(method, request)`` (answer or raise)."""
    answer = None
    try:
        while True:
            method, request = exchange.send(answer)
            answer = send(method, request)
    except StopIteration as done:
        return done.value


async def answered_async(exchange: Exchange[T], send: Callable[[str, Message], Awaitable[Any]]) -> T:
    """``answered`` for a ``send`` to await."""
    answer = None
    try:
        while True:
            method, request = exchange.send(answer)
            answer = await send(method, request)
    except StopIteration as done:
        return done.value


class Calls:
    """The calls of a caller whose jobs named by bare id are in ``namespace`` (a job's key names its own)."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE):
        self.namespace = namespace

    # -- what a call names ----------------------------------------------------------------

    def ref(self, job_id: str, namespace: str | None) -> tuple[str, str]:
        """``(id, namespace)`` of a job named by id (in ``namespace``, else the caller's) or by key."""
        key = split_key(job_id)
        if job_id != key.id:  # a key: it names its namespace
            if namespace is not None and namespace_or_default(namespace) != key.namespace:
                raise ValueError(f"{job_id!r} is a key of namespace {key.namespace!r}, not of {namespace!r}")
            return key.id, key.namespace
        return job_id, self._one_namespace(namespace)

    def namespaces(self, namespace: str | None) -> str:
        """What a read of many jobs names: one namespace (None: the caller's), or ``*``."""
        return namespace if namespace == ALL_NAMESPACES else self._one_namespace(namespace)

    def _one_namespace(self, namespace: str | None) -> str:
        return namespace_or_default(namespace) if namespace is not None else self.namespace

    def job_proto(self, job: Job, namespace: str | None) -> pb.Job:
        """``job`` as PutJob and PutJobs send it, its id and namespace resolved as ``ref`` does."""
        p = job_to_proto(job, redact=False)
        p.id, p.namespace = self.ref(job.id, namespace)
        return p

    def list_jobs_request(
        self,
        labels: dict[str, str] | None,
        shard: int | None,
        page_size: int,
        namespace: str | None,
        *,
        id_prefix: str = "",
        paused: bool | None = None,
        page_token: str = "",
    ) -> pb.ListJobsRequest:
        req = pb.ListJobsRequest(
            page_size=page_size,
            labels=labels or {},
            namespace=self.namespaces(namespace),
            id_prefix=id_prefix,
            page_token=page_token,
        )
        if shard is not None:
            req.shard = shard
        if paused is not None:
            req.paused = paused
        return req

    def watch_ticks_request(self, job_id: str | None, namespace: str | None) -> pb.WatchTicksRequest:
        """Of one job, or (no ``job_id``) of every job of ``namespace``."""
        if job_id:
            job_id, ns = self.ref(job_id, namespace)
            return pb.WatchTicksRequest(job_id=job_id, namespace=ns)
        return pb.WatchTicksRequest(namespace=self.namespaces(namespace))

    # -- the calls --------------------------------------------------------------------------

    def shards(self) -> Exchange[dict]:
        answer = yield "GetShards", pb.GetShardsRequest()
        return shard_map_from_proto(answer)

    def list_namespaces(self) -> Exchange[list[StoredNamespace]]:
        answer = yield "ListNamespaces", pb.ListNamespacesRequest()
        return [stored_namespace_from_proto(n) for n in answer.namespaces]

    def put_job(self, job: Job, *, expected_version: int | None = None, namespace: str | None = None) -> Exchange[Job]:
        req = pb.PutJobRequest(job=self.job_proto(job, namespace))
        if expected_version is not None:
            req.expected_version = expected_version
        answer = yield "PutJob", req
        return stored_job_from_proto(answer.job)

    def get_job(self, job_id: str, *, namespace: str | None = None) -> Exchange[Job]:
        answer = yield "GetJob", self._naming(pb.GetJobRequest, job_id, namespace)
        return stored_job_from_proto(answer.job)

    def get_job_runs(self, job_id: str, *, namespace: str | None = None) -> Exchange[tuple[Job, JobRuns]]:
        answer = yield "GetJob", self._naming(pb.GetJobRequest, job_id, namespace)
        return job_and_runs_from_proto(answer.job)

    def delete_job(self, job_id: str, *, namespace: str | None = None) -> Exchange[None]:
        yield "DeleteJob", self._naming(pb.DeleteJobRequest, job_id, namespace)

    def pause_job(self, job_id: str, *, namespace: str | None = None) -> Exchange[Job]:
        answer = yield "PauseJob", self._naming(pb.PauseJobRequest, job_id, namespace)
        return stored_job_from_proto(answer.job)

    def resume_job(self, job_id: str, *, namespace: str | None = None) -> Exchange[Job]:
        answer = yield "ResumeJob", self._naming(pb.ResumeJobRequest, job_id, namespace)
        return stored_job_from_proto(answer.job)

    def trigger_job(self, job_id: str, *, namespace: str | None = None) -> Exchange[SlotRef]:
        answer = yield "TriggerJob", self._naming(pb.TriggerJobRequest, job_id, namespace)
        return SlotRef(join_key(answer.namespace or DEFAULT_NAMESPACE, answer.id), answer.scheduled_at_ms)

    def ack_tick(
        self, job_id: str, scheduled_at_ms: int | None = None, *, namespace: str | None = None
    ) -> Exchange[Acked]:
        """Report the slot's work done (None: the job's newest slot at or before now that has a tick)."""
        request = self._naming(pb.AckTickRequest, job_id, namespace)
        if scheduled_at_ms is not None:
            request.scheduled_at_ms = scheduled_at_ms
        answer = yield "AckTick", request
        slot = SlotRef(join_key(answer.namespace or DEFAULT_NAMESPACE, answer.id), answer.scheduled_at_ms)
        return Acked(slot, answer.acked_at_ms, answer.already)

    def _naming(self, request_type: type[Any], job_id: str, namespace: str | None) -> Any:
        """A request of ``request_type`` whose ``id`` and ``namespace`` name one job."""
        job_id, ns = self.ref(job_id, namespace)
        return request_type(id=job_id, namespace=ns)

    def backfill_job(
        self,
        job_id: str,
        from_ms: int,
        to_ms: int,
        *,
        rate_per_s: float,
        overlap: str = "skip",
        namespace: str | None = None,
    ) -> Exchange[Backfill]:
        job_id, ns = self.ref(job_id, namespace)
        req = pb.BackfillJobRequest(
            id=job_id,
            namespace=ns,
            from_ms=from_ms,
            to_ms=to_ms,
            rate_per_s=rate_per_s,
            overlap=overlap_to_proto(overlap),
        )
        answer = yield "BackfillJob", req
        return backfill_from_proto(answer.backfill)

    def get_backfill(self, backfill_id: str, *, namespace: str | None = None) -> Exchange[Backfill]:
        answer = yield "GetBackfill", pb.GetBackfillRequest(id=backfill_id, namespace=self._one_namespace(namespace))
        return backfill_from_proto(answer.backfill)

    def list_backfills(self, job_id: str | None = None, *, namespace: str | None = None) -> Exchange[list[Backfill]]:
        if job_id:
            job_id, ns = self.ref(job_id, namespace)
        else:
            ns = self.namespaces(namespace)
        answer = yield "ListBackfills", pb.ListBackfillsRequest(job_id=job_id or "", namespace=ns)
        return [backfill_from_proto(p) for p in answer.backfills]

    def job_page(
        self,
        *,
        page_token: str = "",
        page_size: int = 100,
        labels: dict[str, str] | None = None,
        shard: int | None = None,
        namespace: str | None = None,
        id_prefix: str = "",
        paused: bool | None = None,
    ) -> Exchange[tuple[list[tuple[Job, JobRuns]], str]]:
        req = self.list_jobs_request(
            labels, shard, page_size, namespace, id_prefix=id_prefix, paused=paused, page_token=page_token
        )
        answer = yield "ListJobs", req
        return [job_and_runs_from_proto(p) for p in answer.jobs], answer.next_page_token

    def list_deadline_misses(
        self, since_ms: int, *, limit: int = 100, namespace: str | None = None
    ) -> Exchange[list[RecordedMiss]]:
        """The deadlines missed since ``since_ms`` across the cluster, the newest ``limit`` (at most 1000)
        first; ``namespace``: one, or "*" for every namespace the token may read (None: the client's)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_MAX:
            raise ValueError(f"limit: must be a whole number from 1 to {PAGE_MAX}, got {limit!r}")
        answer = yield (
            "ListDeadlineMisses",
            pb.ListDeadlineMissesRequest(since_ms=since_ms, page_size=limit, namespace=self.namespaces(namespace)),
        )
        return [deadline_miss_from_proto(m) for m in answer.misses]

    def list_ticks(self, job_id: str, *, limit: int = 50, namespace: str | None = None) -> Exchange[list[Tick]]:
        """The job's ``limit`` latest ticks, newest first, a page at a time."""
        job_id, ns = self.ref(job_id, namespace)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit: must be a whole number of at least 1, got {limit!r}")
        out: list[Tick] = []
        token = ""
        while len(out) < limit:
            size = min(limit - len(out), PAGE_MAX)
            answer = yield (
                "ListTicks",
                pb.ListTicksRequest(job_id=job_id, namespace=ns, page_size=size, page_token=token),
            )
            out += [tick_from_proto(t) for t in answer.ticks]
            token = answer.next_page_token
            if not token:
                break
        return out[:limit]


# The calls: each method of ``Calls`` that returns an ``Exchange`` (the others build a call's parts).
CALL_NAMES: frozenset[str] = frozenset(
    name
    for name, method in vars(Calls).items()
    if callable(method) and str(method.__annotations__.get("return", "")).startswith("Exchange[")
)


def job_and_runs_from_proto(p: pb.Job) -> tuple[Job, JobRuns]:
    """A job as GetJob and ListJobs answer it, with its runs (see ``model.JobRuns``)."""
    return stored_job_from_proto(p), job_runs_from_proto(p.runs)


__all__ = ["CALL_NAMES", "Calls", "Exchange", "answered", "answered_async", "job_and_runs_from_proto"]
