"""The namespace RPCs (List/Get/Create/Update/DeleteNamespace), mixed into ``SchedulerService``.

Namespaces are cluster-wide, not sharded: the node that receives a call writes the
store itself (no leader, no fence), then tells its backend, which bumps the etcd key
every node watches (``coordination/store_watch.py``) so that each node's scheduler
runs with the new weights and quotas. A bump that fails is logged, not returned:
the write is committed, and each node's periodic reload picks it up.

A forced delete deletes the namespace's jobs first, each through its shard's leader
under its fence (the DeleteJob path, so the scheduler and the usage follow), a
page at a time in key order, then the row; a put that raced in is found under the
row's lock (``store.namespaces.delete_namespace``) and swept in another pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc

from shardcron import clock
from shardcron.abc import Backend
from shardcron.api.auth import may_see
from shardcron.api.routing import Router
from shardcron.api.status import CallFailed
from shardcron.errors import EtcdUnavailable, JobNotFound
from shardcron.jobkey import split_key
from shardcron.rules.quotas import QUOTA_KEYS
from shardcron.spec.namespaces import delete_refusal
from shardcron.store import namespaces as namespace_store
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import BadRequest
from shardcron.wire.namespace_convert import (
    namespace_name,
    namespace_to_proto,
    quota_values,
    settings_from_proto,
)

log = logging.getLogger(__name__)

DELETE_PAGE = 100  # jobs of a forced delete read, and deleted concurrently, at a time
DELETE_PASSES = 3  # sweeps of a forced delete before puts that keep racing in make it give up


class NamespaceRpcs:
    backend: Backend
    router: Router
    # SchedulerService's: a namespace deleted with force deletes its jobs one call each.
    DeleteJob: Callable[[pb.DeleteJobRequest, grpc.aio.ServicerContext], Awaitable[pb.DeleteJobResponse]]

    def _namespace_changed(self, name: str, now_ms: int) -> None:
        try:
            self.backend.namespace_written(name, now_ms)
        except EtcdUnavailable as e:
            log.warning(
                "namespace %r written, but the other nodes were not told (%s); they reload it within "
                "their periodic reload",
                name,
                e,
            )

    async def ListNamespaces(
        self, request: pb.ListNamespacesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListNamespacesResponse:
        found = await self.router.blocking(namespace_store.list_namespaces, self.backend.engine)
        # Only the caller's namespaces (scopes: ListNamespaces), judged here on the call's own context.
        return pb.ListNamespacesResponse(namespaces=[namespace_to_proto(n) for n in found if may_see(n.name)])

    async def GetNamespace(
        self, request: pb.GetNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetNamespaceResponse:
        name = namespace_name(request.name)
        return pb.GetNamespaceResponse(
            namespace=namespace_to_proto(
                await self.router.blocking(namespace_store.get_namespace, self.backend.engine, name)
            )
        )

    async def CreateNamespace(
        self, request: pb.CreateNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateNamespaceResponse:
        name = namespace_name(request.namespace.name, "namespace.name")
        settings = settings_from_proto(request.namespace)

        def write() -> pb.CreateNamespaceResponse:
            now = clock.wall_ms()
            stored = namespace_store.create_namespace(
                self.backend.engine, name, settings, node_id=self.backend.node_id, now_ms=now
            )
            self._namespace_changed(name, now)
            return pb.CreateNamespaceResponse(namespace=namespace_to_proto(stored))

        return await self.router.blocking(write)

    async def UpdateNamespace(
        self, request: pb.UpdateNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateNamespaceResponse:
        p = request.namespace
        name = namespace_name(p.name, "namespace.name")
        weight = None
        if p.weight:
            weight = settings_from_proto(p).weight  # checked as on create
        fields = list(request.quota_fields)
        if not fields and not request.keep_quotas:
            fields = list(QUOTA_KEYS)  # every quota replaced by the request's
        if len(set(fields)) != len(fields):
            raise BadRequest("quota_fields", f"names a quota twice: {', '.join(fields)}")
        quota = quota_values(p.quota, fields)

        def write() -> pb.UpdateNamespaceResponse:
            now = clock.wall_ms()
            stored = namespace_store.update_namespace(
                self.backend.engine, name, weight=weight, quota=quota, node_id=self.backend.node_id, now_ms=now
            )
            self._namespace_changed(name, now)
            return pb.UpdateNamespaceResponse(namespace=namespace_to_proto(stored))

        return await self.router.blocking(write)

    async def DeleteNamespace(
        self, request: pb.DeleteNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteNamespaceResponse:
        name = namespace_name(request.name)
        engine = self.backend.engine
        deleted = 0
        for _ in range(DELETE_PASSES):
            count = await self.router.blocking(namespace_store.count_jobs, engine, name)
            refusal = delete_refusal(name, count, force=request.force)
            if refusal:
                raise namespace_store.NamespaceInUse(refusal)
            if count:
                deleted += await self._delete_jobs(name, context)
            try:
                await self.router.blocking(namespace_store.delete_namespace, engine, name)
            except namespace_store.NamespaceInUse:
                if request.force:
                    continue  # a put raced in after the sweep: sweep again
                raise
            await self.router.blocking(self._namespace_changed, name, clock.wall_ms())  # etcd: off the loop
            return pb.DeleteNamespaceResponse(jobs_deleted=deleted)
        raise namespace_store.NamespaceInUse(
            f"namespace {name!r} still receives jobs while it is deleted ({deleted} deleted in {DELETE_PASSES} "
            "passes): stop what puts them, then delete it again"
        )

    async def _delete_jobs(self, name: str, context) -> int:
        """Every job of the namespace, through its shard's leader (the DeleteJob path); how many went."""
        deleted, after = 0, None
        while True:
            keys = await self.router.blocking(
                lambda after=after: namespace_store.job_keys(self.backend.engine, name, after=after, limit=DELETE_PAGE)
            )
            if not keys:
                return deleted
            results = await asyncio.gather(*(self._delete_job(key, context) for key in keys))
            deleted += sum(results)
            after = keys[-1]

    async def _delete_job(self, key: str, context) -> bool:
        namespace, job_id = split_key(key)
        try:
            await self.DeleteJob(pb.DeleteJobRequest(namespace=namespace, id=job_id), context)
        except JobNotFound:
            return False  # deleted by another call meanwhile
        except CallFailed as e:  # the leader's answer, forwarded
            if e.code is grpc.StatusCode.NOT_FOUND:
                return False
            raise
        return True


__all__ = ["NamespaceRpcs"]
