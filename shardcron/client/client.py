"""``shardcron.Client``: the Python client of the Scheduler API.

    from shardcron import Client
    from shardcron.spec.job import job_from_dict

    with Client(["10.0.0.1:7070", "10.0.0.2:7070"]) as c:
        c.put_job(job_from_dict({"id": "nightly", "cron": "0 3 * * *", "executor": {"kind": "noop"}}))
        for tick in c.list_ticks("nightly", limit=10):
            print(tick.scheduled_at_ms, tick.status)

It speaks shardcron's own dataclasses (``model.Job``, ``model.Tick``); protobuf
stops here. Any node serves any call, so the client uses one target and moves
to the next when nothing answers there. Failures are ``ApiError`` subclasses
(``ShardcronError``s) carrying the server's one-line message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from fractions import Fraction
from typing import Any, TypeVar

import grpc

from shardcron.client.channel import MAX_MESSAGE_BYTES, ChannelSecurity
from shardcron.client.errors import code_name
from shardcron.client.results import PutResult, TokenInfo
from shardcron.client.targets import DEFAULT_TIMEOUT_S, Targets
from shardcron.client.watch import TickWatch
from shardcron.jobkey import DEFAULT_NAMESPACE, join_key
from shardcron.model import Acked, Backfill, Job, JobRuns, RecordedMiss, SlotRef, Tick
from shardcron.rules.namespace_settings import StoredNamespace
from shardcron.spec.calendar import Calendar, StoredCalendar
from shardcron.spec.namespaces import namespace_or_default
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.calendar_convert import calendar_to_proto, stored_calendar_from_proto
from shardcron.wire.calls import Calls, Exchange, answered, job_and_runs_from_proto
from shardcron.wire.convert import stored_job_from_proto
from shardcron.wire.namespace_convert import namespace_request, stored_namespace_from_proto

# PutJobs calls are cut to stay well inside the servers' message limit.
BATCH_JOBS = 1000
IN_FLIGHT_BATCHES = 4  # PutJobs calls of one put_jobs in flight at once
BATCH_BYTES = MAX_MESSAGE_BYTES // 2

T = TypeVar("T")


class Client:
    """The Scheduler API's calls, in shardcron's own dataclasses, on whichever of ``targets`` answers."""

    def __init__(
        self,
        targets: str | Sequence[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        security: ChannelSecurity | None = None,
        namespace: str | None = None,
    ):
        """``security``: TLS trust, client certificate and bearer token (``ChannelSecurity``).
        ``namespace``: of the jobs this client names by id (None: ``default``); each call may name another.
        A job's key (``Job.id`` of a job this client returned) names its namespace itself."""
        self.namespace = namespace_or_default(namespace)
        self.nodes = Targets(targets, security, timeout_s)

    @property
    def targets(self) -> list[str]:
        return self.nodes.targets

    @property
    def security(self) -> ChannelSecurity | None:
        return self.nodes.security

    @property
    def timeout_s(self) -> float:
        return self.nodes.timeout_s

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.nodes.close()

    def _call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        return self.nodes.call(method, request, timeout_s)

    @property
    def _calls(self) -> Calls:
        """The calls about jobs, built as the dashboard's in-process API builds them; bare ids in ``namespace``."""
        return Calls(self.namespace)

    def _run(self, exchange: Exchange[T], timeout_s: float | None = None) -> T:
        return answered(exchange, lambda method, request: self._call(method, request, timeout_s))

    # -- jobs ------------------------------------------------------------------------

    def put_job(
        self,
        job: Job,
        *,
        expected_version: int | None = None,
        timeout_s: float | None = None,
        namespace: str | None = None,
    ) -> Job:
        """Create or replace ``job``; with ``expected_version``, only if the stored one is at that
        version (0: only if it does not exist), else ``Conflict``. Returns the stored job."""
        return self._run(self._calls.put_job(job, expected_version=expected_version, namespace=namespace), timeout_s)

    def put_jobs(
        self,
        jobs: Iterable[Job],
        *,
        timeout_s: float | None = None,
        in_flight: int = IN_FLIGHT_BATCHES,
        namespace: str | None = None,
        validate_only: bool = False,
    ) -> list[PutResult]:
        """Create or replace many jobs (unchanged ones are left alone); one result per job, in order.
        ``validate_only``: every job is checked as its write would be, and nothing is written.

        The jobs go in batches of up to 1,000, ``in_flight`` of them at a time, so
        that the nodes' cores work on one batch while the next is on the wire.
        """
        results: list[PutResult] = []
        pending: deque[Future] = deque()

        def collect(response: pb.PutJobsResponse) -> None:
            for r in response.results:
                ok = r.code == 0
                results.append(
                    PutResult(
                        id=r.id,
                        ok=ok,
                        stored=r.job if ok else None,
                        code=grpc.StatusCode.OK.name if ok else code_name(r.code),
                        message=r.message,
                        retryable=r.retryable,
                        unchanged=r.unchanged,
                    )
                )

        with ThreadPoolExecutor(max(1, in_flight), thread_name_prefix="put-jobs") as pool:
            for batch in _batches(self._calls.job_proto(j, namespace) for j in jobs):
                pending.append(
                    pool.submit(
                        self._call, "PutJobs", pb.PutJobsRequest(jobs=batch, validate_only=validate_only), timeout_s
                    )
                )
                if len(pending) >= in_flight:
                    collect(pending.popleft().result())
            while pending:
                collect(pending.popleft().result())
        return results

    def get_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> Job:
        return self._run(self._calls.get_job(job_id, namespace=namespace), timeout_s)

    def get_job_runs(
        self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None
    ) -> tuple[Job, JobRuns]:
        """The job and its runs: the next owed slot (after jitter) and when it starts, the last
        recorded tick and its status, and its failures in a row (see ``model.JobRuns``)."""
        return self._run(self._calls.get_job_runs(job_id, namespace=namespace), timeout_s)

    def delete_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> None:
        self._run(self._calls.delete_job(job_id, namespace=namespace), timeout_s)

    def pause_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> Job:
        return self._run(self._calls.pause_job(job_id, namespace=namespace), timeout_s)

    def resume_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> Job:
        return self._run(self._calls.resume_job(job_id, namespace=namespace), timeout_s)

    def trigger_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> SlotRef:
        """Run the job now, as an extra tick; returns that tick's identity (the job's key and slot)."""
        return self._run(self._calls.trigger_job(job_id, namespace=namespace), timeout_s)

    def ack_tick(
        self,
        job_id: str,
        scheduled_at_ms: int | None = None,
        *,
        timeout_s: float | None = None,
        namespace: str | None = None,
    ) -> Acked:
        """Report a slot's work done: the job's heartbeat, and its deadline when it has a heartbeat, count it.
        ``scheduled_at_ms`` None: the job's newest slot at or before now that has a tick. A slot keeps its
        first ack (``Acked.already`` says this one came after it)."""
        return self._run(self._calls.ack_tick(job_id, scheduled_at_ms, namespace=namespace), timeout_s)

    def backfill_job(
        self,
        job_id: str,
        from_ms: int,
        to_ms: int,
        *,
        rate_per_s: float,
        overlap: str = "skip",
        timeout_s: float | None = None,
        namespace: str | None = None,
    ) -> Backfill:
        """Run the job's slots in ``[from_ms, to_ms)`` that have no tick yet (see ``BackfillJob``)."""
        backfill = self._calls.backfill_job(
            job_id, from_ms, to_ms, rate_per_s=rate_per_s, overlap=overlap, namespace=namespace
        )
        return self._run(backfill, timeout_s)

    def get_backfill(
        self, backfill_id: str, *, timeout_s: float | None = None, namespace: str | None = None
    ) -> Backfill:
        """``namespace``: its job's (None: the client's)."""
        return self._run(self._calls.get_backfill(backfill_id, namespace=namespace), timeout_s)

    def list_backfills(
        self, job_id: str | None = None, *, timeout_s: float | None = None, namespace: str | None = None
    ) -> list[Backfill]:
        """A job's backfills, or every job's of ``namespace`` (``"*"``: of every namespace the caller may read)."""
        return self._run(self._calls.list_backfills(job_id, namespace=namespace), timeout_s)

    def list_jobs(
        self,
        *,
        labels: dict[str, str] | None = None,
        shard: int | None = None,
        page_size: int = 500,
        namespace: str | None = None,
    ) -> Iterator[Job]:
        """Every matching job, by key (fetched a page at a time); of ``namespace`` (None: the client's;
        ``"*"``: every namespace the caller may read)."""
        for p in self._job_pages(labels, shard, page_size, namespace):
            yield stored_job_from_proto(p)

    def list_jobs_runs(
        self,
        *,
        labels: dict[str, str] | None = None,
        shard: int | None = None,
        page_size: int = 500,
        namespace: str | None = None,
    ) -> Iterator[tuple[Job, JobRuns]]:
        """``list_jobs``, each job with its runs (as ``get_job_runs``)."""
        for p in self._job_pages(labels, shard, page_size, namespace):
            yield job_and_runs_from_proto(p)

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
        timeout_s: float | None = None,
    ) -> tuple[list[tuple[Job, JobRuns]], str]:
        """One page of jobs with their runs, and the token of the next page ("" after the last).
        ``id_prefix``: only ids that start with it; ``paused``: only paused (True) or active (False) jobs."""
        page = self._calls.job_page(
            page_token=page_token,
            page_size=page_size,
            labels=labels,
            shard=shard,
            namespace=namespace,
            id_prefix=id_prefix,
            paused=paused,
        )
        return self._run(page, timeout_s)

    def _job_pages(
        self, labels: dict[str, str] | None, shard: int | None, page_size: int, namespace: str | None
    ) -> Iterator[pb.Job]:
        req = self._calls.list_jobs_request(labels, shard, page_size, namespace)
        while True:
            r = self._call("ListJobs", req)
            yield from r.jobs
            req.page_token = r.next_page_token
            if not req.page_token:
                return

    # -- ticks ----------------------------------------------------------------------

    def list_deadline_misses(
        self, since_ms: int, *, limit: int = 100, namespace: str | None = None
    ) -> list[RecordedMiss]:
        """The deadlines missed since ``since_ms`` across the cluster, the newest ``limit`` (at most 1000)
        first; ``namespace``: one, or ``"*"`` for every namespace the caller may read (None: the client's)."""
        return self._run(self._calls.list_deadline_misses(since_ms, limit=limit, namespace=namespace))

    def list_ticks(self, job_id: str, *, limit: int = 50, namespace: str | None = None) -> list[Tick]:
        """The job's ``limit`` latest ticks, newest first."""
        return self._run(self._calls.list_ticks(job_id, limit=limit, namespace=namespace))

    def watch_ticks(self, job_id: str | None = None, *, namespace: str | None = None) -> TickWatch:
        """Tick results as they are written (of one job, or all of ``namespace``: None: the client's;
        ``"*"``: every namespace the caller may read), until ``cancel()``."""
        return TickWatch(self.nodes, self._calls.watch_ticks_request(job_id, namespace))

    # -- calendars ----------------------------------------------------------------------

    def put_calendar(
        self, calendar: Calendar, *, expected_version: int | None = None, timeout_s: float | None = None
    ) -> StoredCalendar:
        """Create or replace a named calendar (``spec.calendar_tables.parse_calendar`` builds one from plain data);
        with ``expected_version``, only over that version (0: only create), else ``Conflict``."""
        req = pb.PutCalendarRequest(calendar=calendar_to_proto(calendar))
        if expected_version is not None:
            req.expected_version = expected_version
        return stored_calendar_from_proto(self._call("PutCalendar", req, timeout_s).calendar)

    def get_calendar(self, name: str, *, timeout_s: float | None = None) -> tuple[StoredCalendar, list[str]]:
        """The calendar and the keys of the jobs that name it (at most 100, of namespaces the caller may read)."""
        r = self._call("GetCalendar", pb.GetCalendarRequest(name=name), timeout_s)
        namespaces = list(r.job_namespaces) or [DEFAULT_NAMESPACE] * len(r.jobs)
        return stored_calendar_from_proto(r.calendar), [
            join_key(ns, i) for ns, i in zip(namespaces, r.jobs, strict=False)
        ]

    def list_calendars(self, *, timeout_s: float | None = None) -> list[StoredCalendar]:
        r = self._call("ListCalendars", pb.ListCalendarsRequest(), timeout_s)
        return [stored_calendar_from_proto(c) for c in r.calendars]

    def delete_calendar(self, name: str, *, force: bool = False, timeout_s: float | None = None) -> None:
        """Refused while jobs name it (the error names them), unless ``force``."""
        self._call("DeleteCalendar", pb.DeleteCalendarRequest(name=name, force=force), timeout_s)

    # -- cluster ----------------------------------------------------------------------

    def shards(self, *, timeout_s: float | None = None) -> dict:
        """The shard-to-leader map, as ``shardcron shards --json`` prints it."""
        return self._run(self._calls.shards(), timeout_s)

    # -- tokens (cluster admin) -------------------------------------------------------

    def list_tokens(self, *, timeout_s: float | None = None) -> list[TokenInfo]:
        """Every token the nodes accept: their token file's (source "file") and the store's."""
        r = self._call("ListTokens", pb.ListTokensRequest(), timeout_s)
        return [TokenInfo.of(t) for t in r.tokens]

    def create_token(
        self, name: str, role: str, namespaces: Iterable[str], *, timeout_s: float | None = None
    ) -> tuple[TokenInfo, str]:
        """A new token and its secret: shown this once, only its hash is stored."""
        req = pb.CreateTokenRequest(token=pb.ApiToken(name=name, role=role, namespaces=list(namespaces)))
        r = self._call("CreateToken", req, timeout_s)
        return TokenInfo.of(r.token), r.secret

    def revoke_token(self, name: str, *, timeout_s: float | None = None) -> None:
        """Every node refuses the token, and ends its open streams, within 2 seconds (etcd tells each node at once)."""
        self._call("RevokeToken", pb.RevokeTokenRequest(name=name), timeout_s)

    # -- namespaces --------------------------------------------------------------------

    def list_namespaces(self, *, timeout_s: float | None = None) -> list[StoredNamespace]:
        """Every namespace the caller may see, by name, with its settings and usage."""
        return self._run(self._calls.list_namespaces(), timeout_s)

    def get_namespace(self, name: str, *, timeout_s: float | None = None) -> StoredNamespace:
        r = self._call("GetNamespace", pb.GetNamespaceRequest(name=name), timeout_s)
        return stored_namespace_from_proto(r.namespace)

    def create_namespace(
        self,
        name: str,
        *,
        weight: float | None = None,
        quota: dict[str, int | Fraction | None] | None = None,
        timeout_s: float | None = None,
    ) -> StoredNamespace:
        """A new namespace (``Conflict``-free: ALREADY_EXISTS when it exists); ``quota`` by
        ``rules.quotas.QUOTA_KEYS``, a missing one is no limit."""
        req = pb.CreateNamespaceRequest(namespace=namespace_request(name, weight=weight, quota=quota))
        return stored_namespace_from_proto(self._call("CreateNamespace", req, timeout_s).namespace)

    def update_namespace(
        self,
        name: str,
        *,
        weight: float | None = None,
        quota: dict[str, int | Fraction | None] | None = None,
        timeout_s: float | None = None,
    ) -> StoredNamespace:
        """Change the weight (None: unchanged) and the quotas named in ``quota`` (a value of None removes
        that limit); quotas not named stay as they are."""
        quota = quota or {}
        req = pb.UpdateNamespaceRequest(
            namespace=namespace_request(name, weight=weight, quota=quota),
            quota_fields=list(quota),
            keep_quotas=not quota,
        )
        return stored_namespace_from_proto(self._call("UpdateNamespace", req, timeout_s).namespace)

    def delete_namespace(self, name: str, *, force: bool = False, timeout_s: float | None = None) -> int:
        """Refused while it holds jobs, unless ``force`` (its jobs are deleted with it); how many jobs went."""
        r = self._call("DeleteNamespace", pb.DeleteNamespaceRequest(name=name, force=force), timeout_s)
        return r.jobs_deleted


def _batches(protos: Iterable[pb.Job]) -> Iterator[list[pb.Job]]:
    batch: list[pb.Job] = []
    size = 0
    for p in protos:
        n = p.ByteSize()
        if batch and (len(batch) >= BATCH_JOBS or size + n > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(p)
        size += n
    if batch:
        yield batch
