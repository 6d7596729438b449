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
from typing import Any

import grpc

from shardcron.client.channel import MAX_MESSAGE_BYTES, ChannelSecurity
from shardcron.client.errors import code_name
from shardcron.client.results import PutResult, TokenInfo
from shardcron.client.targets import DEFAULT_TIMEOUT_S, Targets
from shardcron.client.watch import TickWatch
from shardcron.jobkey import DEFAULT_NAMESPACE, join_key, split_key
from shardcron.model import Backfill, Job, JobRuns, SlotRef, Tick
from shardcron.rules.namespace_settings import StoredNamespace
from shardcron.rules.scopes import ALL_NAMESPACES
from shardcron.spec.calendar import Calendar, StoredCalendar
from shardcron.spec.namespaces import namespace_or_default
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.backfill_convert import backfill_from_proto, overlap_to_proto
from shardcron.wire.calendar_convert import calendar_to_proto, stored_calendar_from_proto
from shardcron.wire.convert import job_to_proto, stored_job_from_proto
from shardcron.wire.namespace_convert import namespace_request, stored_namespace_from_proto
from shardcron.wire.shard_map_convert import shard_map_from_proto
from shardcron.wire.tick_convert import job_runs_from_proto, tick_from_proto

# PutJobs calls are cut to stay well inside the servers' message limit.
BATCH_JOBS = 1000
IN_FLIGHT_BATCHES = 4  # PutJobs calls of one put_jobs in flight at once
BATCH_BYTES = MAX_MESSAGE_BYTES // 2


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

    # -- namespaces of the calls ----------------------------------------------------------

    def _ref(self, job_id: str, namespace: str | None) -> tuple[str, str]:
        """``(id, namespace)`` of a job named by id (in ``namespace``, else the client's) or by key."""
        key = split_key(job_id)
        if job_id != key.id:  # a key: it names its namespace
            if namespace is not None and namespace_or_default(namespace) != key.namespace:
                raise ValueError(f"{job_id!r} is a key of namespace {key.namespace!r}, not of {namespace!r}")
            return key.id, key.namespace
        return job_id, namespace_or_default(namespace) if namespace is not None else self.namespace

    def _job_proto(self, job: Job, namespace: str | None) -> pb.Job:
        p = job_to_proto(job, redact=False)
        p.id, p.namespace = self._ref(job.id, namespace)
        return p

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
        req = pb.PutJobRequest(job=self._job_proto(job, namespace))
        if expected_version is not None:
            req.expected_version = expected_version
        return stored_job_from_proto(self._call("PutJob", req, timeout_s).job)

    def put_jobs(
        self,
        jobs: Iterable[Job],
        *,
        timeout_s: float | None = None,
        in_flight: int = IN_FLIGHT_BATCHES,
        namespace: str | None = None,
    ) -> list[PutResult]:
        """Create or replace many jobs (unchanged ones are left alone); one result per job, in order.

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
            for batch in _batches(self._job_proto(j, namespace) for j in jobs):
                pending.append(pool.submit(self._call, "PutJobs", pb.PutJobsRequest(jobs=batch), timeout_s))
                if len(pending) >= in_flight:
                    collect(pending.popleft().result())
            while pending:
                collect(pending.popleft().result())
        return results

    def get_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> Job:
        job_id, ns = self._ref(job_id, namespace)
        return stored_job_from_proto(self._call("GetJob", pb.GetJobRequest(id=job_id, namespace=ns), timeout_s).job)

    def get_job_runs(
        self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None
    ) -> tuple[Job, JobRuns]:
        """The job and its runs: the next owed slot (after jitter) and when it starts, the last
        recorded tick and its status, and its failures in a row (see ``model.JobRuns``)."""
        job_id, ns = self._ref(job_id, namespace)
        p = self._call("GetJob", pb.GetJobRequest(id=job_id, namespace=ns), timeout_s).job
        return stored_job_from_proto(p), job_runs_from_proto(p.runs)

    def delete_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> None:
        job_id, ns = self._ref(job_id, namespace)
        self._call("DeleteJob", pb.DeleteJobRequest(id=job_id, namespace=ns), timeout_s)

    def pause_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> Job:
        job_id, ns = self._ref(job_id, namespace)
        return stored_job_from_proto(self._call("PauseJob", pb.PauseJobRequest(id=job_id, namespace=ns), timeout_s).job)

    def resume_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> Job:
        job_id, ns = self._ref(job_id, namespace)
        return stored_job_from_proto(
            self._call("ResumeJob", pb.ResumeJobRequest(id=job_id, namespace=ns), timeout_s).job
        )

    def trigger_job(self, job_id: str, *, timeout_s: float | None = None, namespace: str | None = None) -> SlotRef:
        """Run the job now, as an extra tick; returns that tick's identity (the job's key and slot)."""
        job_id, ns = self._ref(job_id, namespace)
        r = self._call("TriggerJob", pb.TriggerJobRequest(id=job_id, namespace=ns), timeout_s)
        return SlotRef(join_key(r.namespace or DEFAULT_NAMESPACE, r.id), r.scheduled_at_ms)

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
        job_id, ns = self._ref(job_id, namespace)
        req = pb.BackfillJobRequest(
            id=job_id,
            namespace=ns,
            from_ms=from_ms,
            to_ms=to_ms,
            rate_per_s=rate_per_s,
            overlap=overlap_to_proto(overlap),
        )
        return backfill_from_proto(self._call("BackfillJob", req, timeout_s).backfill)

    def get_backfill(
        self, backfill_id: str, *, timeout_s: float | None = None, namespace: str | None = None
    ) -> Backfill:
        """``namespace``: its job's (None: the client's)."""
        ns = namespace_or_default(namespace) if namespace is not None else self.namespace
        req = pb.GetBackfillRequest(id=backfill_id, namespace=ns)
        return backfill_from_proto(self._call("GetBackfill", req, timeout_s).backfill)

    def list_backfills(
        self, job_id: str | None = None, *, timeout_s: float | None = None, namespace: str | None = None
    ) -> list[Backfill]:
        """A job's backfills, or every job's of ``namespace`` (``"*"``: of every namespace the caller may read)."""
        if job_id:
            job_id, ns = self._ref(job_id, namespace)
        else:
            ns = self._namespaces(namespace)
        r = self._call("ListBackfills", pb.ListBackfillsRequest(job_id=job_id or "", namespace=ns), timeout_s)
        return [backfill_from_proto(p) for p in r.backfills]

    def _namespaces(self, namespace: str | None) -> str:
        """What a read of many jobs names: one namespace (None: the client's), or ``*``."""
        if namespace == ALL_NAMESPACES:
            return namespace
        return namespace_or_default(namespace) if namespace is not None else self.namespace

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
            yield stored_job_from_proto(p), job_runs_from_proto(p.runs)

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
        req = self._list_request(labels, shard, page_size, namespace, id_prefix=id_prefix, paused=paused)
        req.page_token = page_token
        r = self._call("ListJobs", req, timeout_s)
        return [(stored_job_from_proto(p), job_runs_from_proto(p.runs)) for p in r.jobs], r.next_page_token

    def _list_request(
        self,
        labels: dict[str, str] | None,
        shard: int | None,
        page_size: int,
        namespace: str | None,
        *,
        id_prefix: str = "",
        paused: bool | None = None,
    ) -> pb.ListJobsRequest:
        req = pb.ListJobsRequest(
            page_size=page_size, labels=labels or {}, namespace=self._namespaces(namespace), id_prefix=id_prefix
        )
        if shard is not None:
            req.shard = shard
        if paused is not None:
            req.paused = paused
        return req

    def _job_pages(
        self, labels: dict[str, str] | None, shard: int | None, page_size: int, namespace: str | None
    ) -> Iterator[pb.Job]:
        req = self._list_request(labels, shard, page_size, namespace)
        while True:
            r = self._call("ListJobs", req)
            yield from r.jobs
            req.page_token = r.next_page_token
            if not req.page_token:
                return

    # -- ticks ----------------------------------------------------------------------

    def list_ticks(self, job_id: str, *, limit: int = 50, namespace: str | None = None) -> list[Tick]:
        """The job's ``limit`` latest ticks, newest first."""
        job_id, ns = self._ref(job_id, namespace)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit: must be a whole number of at least 1, got {limit!r}")
        out: list[Tick] = []
        token = ""
        while len(out) < limit:
            r = self._call(
                "ListTicks",
                pb.ListTicksRequest(
                    job_id=job_id, namespace=ns, page_size=min(limit - len(out), 1000), page_token=token
                ),
            )
            out += [tick_from_proto(t) for t in r.ticks]
            token = r.next_page_token
            if not token:
                break
        return out[:limit]

    def watch_ticks(self, job_id: str | None = None, *, namespace: str | None = None) -> TickWatch:
        """Tick results as they are written (of one job, or all of ``namespace``: None: the client's;
        ``"*"``: every namespace the caller may read), until ``cancel()``."""
        if job_id:
            job_id, ns = self._ref(job_id, namespace)
            return TickWatch(self.nodes, pb.WatchTicksRequest(job_id=job_id, namespace=ns))
        return TickWatch(self.nodes, pb.WatchTicksRequest(namespace=self._namespaces(namespace)))

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
        return shard_map_from_proto(self._call("GetShards", pb.GetShardsRequest(), timeout_s))

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
        r = self._call("ListNamespaces", pb.ListNamespacesRequest(), timeout_s)
        return [stored_namespace_from_proto(n) for n in r.namespaces]

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
