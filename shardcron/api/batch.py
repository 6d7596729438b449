"""PutJobs: many jobs in one call, each written by its shard's leader, with one result per job.

The receiving node checks every job's id and groups the jobs by shard; it
parses, checks and writes the jobs of the shards it leads (one fenced
transaction for all of them), and forwards the rest as one PutJobs per
leader, in parallel, whose node checks them in turn. Jobs whose shard has no
reachable leader are checked at once, then retried until the deadline, like
single calls.

This is ``store.jobs.import_jobs``'s semantics: a job whose stored
definition is unchanged keeps its version and its schedule position, so
applying one file twice changes nothing; and an existing job keeps its paused
state (PauseJob and ResumeJob change it, a file re-applied does not).

With ``validate_only`` every leg runs as for the write, on the same leaders
(forwards carry the flag), and each leader's transaction is rolled back
(``import_jobs_many``): the results are the write's, and nothing is written,
announced to the scheduler or audit-logged as applied.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

import grpc
from sqlalchemy import exc as sa_exc

from shardcron import clock
from shardcron.abc import Backend
from shardcron.api import admission
from shardcron.api.auth import item_sent_elsewhere
from shardcron.api.limits import exhausted
from shardcron.api.routing import (
    Deadline,
    Router,
    is_forwarded,
    leader_moved,
    unavailable_message,
    why_not_served,
)
from shardcron.api.status import clip, retry_hint, status_for
from shardcron.errors import FencedOut, InvalidJob, job_named
from shardcron.jobkey import split_key
from shardcron.model import Job
from shardcron.sharding import shard_for
from shardcron.spec.namespaces import store_key
from shardcron.store import jobs as job_store
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import job_from_proto, job_to_proto


@dataclass
class _Item:
    index: int
    id: str
    shard: int
    proto: pb.Job
    job: Job | None = None  # parsed and checked only where it is needed: see BatchWriter._parsed

    @property
    def parsed(self) -> Job:
        """The job of an item ``BatchWriter._parsed`` let through."""
        assert self.job is not None, "an item is written only once parsed"
        return self.job


def _result(job_id: str, code: grpc.StatusCode, message: str, *, retryable: bool = False) -> pb.PutJobResult:
    """``job_id``: the job's key (or, for one refused before it had one, the id as given)."""
    return pb.PutJobResult(id=split_key(job_id).id, code=code.value[0], message=clip(message), retryable=retryable)


def _ok(job: Job, *, unchanged: bool) -> pb.PutJobResult:
    return pb.PutJobResult(
        id=job.key.id, code=grpc.StatusCode.OK.value[0], job=job_to_proto(job, redact=True), unchanged=unchanged
    )


class BatchWriter:
    """Runs on the API server's loop; parsing and writing run on its pool, forwards as coroutines."""

    def __init__(self, backend: Backend, router: Router, max_jobs_per_call: int):
        self.backend = backend
        self.router = router
        self.max_jobs_per_call = max_jobs_per_call

    async def put_jobs(self, request: pb.PutJobsRequest, context: grpc.aio.ServicerContext) -> pb.PutJobsResponse:
        if len(request.jobs) > self.max_jobs_per_call:
            raise exhausted(
                f"{len(request.jobs)} jobs in one PutJobs call; this node's --max-jobs-per-call is "
                f"{self.max_jobs_per_call}: send them in several calls"
            )
        deadline = Deadline.of(context)
        results: list[pb.PutJobResult | None] = [None] * len(request.jobs)
        pending = await self.router.blocking(self._validate, request, results)
        forwarded = is_forwarded(context)
        why: dict[int, str | None] = {}
        while pending:
            retry: list[_Item] = []
            remote: dict[str, list[_Item]] = defaultdict(list)
            by_shard: dict[int, list[_Item]] = defaultdict(list)
            for it in pending:
                by_shard[it.shard].append(it)
            local: dict[int, tuple[int, list[_Item]]] = {}
            waiting: list[_Item] = []
            for shard, items in sorted(by_shard.items()):
                fence = self.backend.fence_if_leader(shard)
                if fence is not None:
                    local[shard] = (fence, items)
                elif forwarded:
                    for it in items:
                        results[it.index] = _result(
                            it.id,
                            grpc.StatusCode.UNAVAILABLE,
                            f"node {self.backend.node_id} does not lead shard {shard} (leadership moved)",
                            retryable=True,
                        )
                elif addr := self.router.leader_elsewhere(shard):
                    remote[addr] += items
                else:
                    why[shard] = None if not self.backend.leader_address(shard) else "this node is taking it over"
                    waiting += items
            forwards = [
                (
                    addr,
                    items,
                    asyncio.ensure_future(self._forward(addr, items, deadline.remaining(), request.validate_only)),
                )
                for addr, items in remote.items()
            ]
            try:
                retry += await self.router.blocking(
                    self._parse_and_write, local, waiting, results, why, forwarded, request.validate_only
                )
                for addr, items, fut in forwards:
                    retry += self._forwarded_results(addr, items, await _outcome(fut), results, why)
            finally:
                for _, _, fut in forwards:
                    fut.cancel()
            pending = retry
            if not pending or not await deadline.wait_to_retry(self.router.closed):
                break
        for it in pending:
            results[it.index] = _result(
                it.id,
                grpc.StatusCode.UNAVAILABLE,
                unavailable_message(it.shard, why.get(it.shard), deadline.elapsed()),
                retryable=True,
            )
        answered = [r for r in results if r is not None]
        assert len(answered) == len(results), "every job of the call has its result"
        return pb.PutJobsResponse(results=answered)

    def _validate(self, request: pb.PutJobsRequest, results: list) -> list[_Item]:
        """The call's items by id and shard. Only the id is checked here: a job is parsed
        where it is written (its leader checks it with its own flags and clock), so a
        node that forwards most of a batch does not parse it twice."""
        first: dict[str, int] = {}
        items = []
        for i, p in enumerate(request.jobs):
            try:
                job_id = store_key(p.namespace, p.id)
            except InvalidJob as e:
                results[i] = _result(p.id, grpc.StatusCode.INVALID_ARGUMENT, str(e))
                continue
            if job_id in first:
                results[i] = _result(
                    job_id,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"id: {job_named(job_id)} appears more than once in this call (first as jobs[{first[job_id]}])",
                )
                continue
            first[job_id] = i
            items.append(_Item(i, job_id, shard_for(job_id, self.backend.shard_count), p))
        return items

    def _parsed(self, items: list[_Item], results: list) -> list[_Item]:
        """The items whose job parses and is admissible here; the others get INVALID_ARGUMENT."""
        now = clock.wall_ms()
        ok = []
        for it in items:
            if it.job is None:
                try:
                    job = job_from_proto(it.proto)
                    admission.check_job(self.backend, job, now)
                except InvalidJob as e:
                    results[it.index] = _result(it.id, grpc.StatusCode.INVALID_ARGUMENT, str(e))
                    continue
                it.job = job
            ok.append(it)
        return ok

    def _parse_and_write(
        self,
        local: dict[int, tuple[int, list[_Item]]],
        waiting: list[_Item],
        results: list,
        why: dict,
        forwarded: bool,
        validate_only: bool,
    ) -> list[_Item]:
        """On the pool: write (or only check) the jobs this node leads; parse the ones whose shard has
        no leader now, so that a bad job is answered at once, not after the wait. The items to retry."""
        parsed = {shard: (fence, ok) for shard, (fence, items) in local.items() if (ok := self._parsed(items, results))}
        retry = self._write_here(parsed, results, why, forwarded, validate_only) if parsed else []
        return retry + self._parsed(waiting, results)

    # -- on the leader ---------------------------------------------------------------

    def _write_here(
        self, local: dict[int, tuple[int, list[_Item]]], results: list, why: dict, forwarded: bool, validate_only: bool
    ) -> list[_Item]:
        """Write the jobs of the shards this node leads, under their fences, in one transaction (rolled
        back when ``validate_only``); returns the items to retry elsewhere (their shard's leadership moved)."""
        b = self.backend
        now = clock.wall_ms()
        try:
            try:
                outcome = job_store.import_jobs_many(
                    b.engine,
                    {shard: (fence, [it.parsed for it in items]) for shard, (fence, items) in local.items()},
                    node_id=b.node_id,
                    now_ms=now,
                    order={it.parsed.id: it.index for _, items in local.values() for it in items},
                    validate_only=validate_only,
                )  # quotas: in order
                written, fenced_out = outcome.written, outcome.fenced_out
                refused = outcome.refused
            except (InvalidJob, sa_exc.DataError):
                written, fenced_out = self._write_one_by_one(local, results, now, validate_only)
                refused = {}
        except Exception as e:  # noqa: BLE001 - mapped per job, like a single call's status
            code, message = status_for(e)
            if code is grpc.StatusCode.INTERNAL:
                raise
            for _, items in local.values():
                for it in items:
                    results[it.index] = _result(it.id, code, message, retryable=retry_hint(e))
            return []
        retry: list[_Item] = []
        for shard, (fence, items) in local.items():
            if shard in fenced_out:
                moved = f"leadership moved during the call ({FencedOut(shard, fence, fenced_out[shard])})"
                if forwarded:
                    for it in items:
                        results[it.index] = _result(it.id, grpc.StatusCode.UNAVAILABLE, moved, retryable=True)
                else:
                    why[shard] = moved
                    retry += items
                continue
            for it in items:
                done = written.get(it.id)
                if done is None:
                    if it.parsed.id in refused:  # over its namespace's quota (RESOURCE_EXHAUSTED), or no namespace
                        results[it.index] = _result(it.id, *status_for(refused[it.parsed.id]))
                    continue  # refused on its own (a result is set)
                if not done.unchanged and not validate_only:
                    b.job_written(shard, done.job)
                results[it.index] = _ok(done.job, unchanged=done.unchanged)
        return retry

    def _write_one_by_one(
        self, local: dict[int, tuple[int, list[_Item]]], results: list, now: int, validate_only: bool
    ) -> tuple[dict[str, job_store.Imported], dict[int, int | None]]:
        """A job the store refuses (a value the database cannot hold) failed the whole
        transaction: one per job instead, so that each gets its own answer."""
        b = self.backend
        written: dict[str, job_store.Imported] = {}
        fenced_out: dict[int, int | None] = {}
        for shard, (fence, items) in local.items():
            for it in items:
                if shard in fenced_out:
                    break
                try:
                    outcome = job_store.import_jobs_many(
                        b.engine,
                        {shard: (fence, [it.parsed])},
                        node_id=b.node_id,
                        now_ms=now,
                        validate_only=validate_only,
                    )
                except (InvalidJob, sa_exc.DataError) as e:
                    results[it.index] = _result(it.id, *status_for(e))
                    continue
                for why in outcome.refused.values():
                    results[it.index] = _result(it.id, *status_for(why))
                written.update(outcome.written)
                fenced_out.update(outcome.fenced_out)
        return written, fenced_out

    # -- elsewhere ---------------------------------------------------------------------

    async def _forward(
        self, addr: str, items: list[_Item], timeout_s: float, validate_only: bool
    ) -> pb.PutJobsResponse:
        request = pb.PutJobsRequest(jobs=[it.proto for it in items], validate_only=validate_only)
        return await self.router.stub(addr).PutJobs(
            request, timeout=max(timeout_s, 0.001), metadata=self.router.forward_metadata()
        )

    def _forwarded_results(self, addr: str, items: list[_Item], outcome, results: list, why: dict) -> list[_Item]:
        response = outcome
        if isinstance(outcome, grpc.RpcError):
            e = outcome
            if leader_moved(e) or e.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                for it in items:
                    why[it.shard] = why_not_served(addr, e)
                return items
            for it in items:
                results[it.index] = _result(it.id, e.code(), e.details() or "")
            return []
        retry = []
        for it, r in zip(items, response.results, strict=False):
            if r.code == grpc.StatusCode.UNAVAILABLE.value[0] and r.retryable:
                why[it.shard] = f"its leader at {addr} answered: {r.message}"
                retry.append(it)
            else:
                results[it.index] = r
                item_sent_elsewhere(it.index)  # its leader applied (or refused) it, and audit-logs it
        if len(response.results) != len(items):
            for it in items[len(response.results) :]:
                results[it.index] = _result(it.id, grpc.StatusCode.INTERNAL, f"{addr} returned too few results")
        return retry


async def _outcome(fut: asyncio.Future):
    """A forward's answer, or the RpcError it failed with (any other error is raised)."""
    try:
        return await fut
    except grpc.RpcError as e:
        return e
