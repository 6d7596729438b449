"""The calendar RPCs (PutCalendar, GetCalendar, ListCalendars, DeleteCalendar), mixed into ``SchedulerService``.

Calendars are cluster-wide, not sharded: the node that receives a call validates
it and writes the store itself (no leader, no fence). After a write it tells its
backend, which knows the calendar at once and bumps the etcd key every node
watches (``coordination/calendar_watch.py``), so every job that names it follows
the new version without a restart. A bump that fails is logged, not returned:
the write is committed, and each node's periodic reload picks it up.
"""

from __future__ import annotations

import logging

import grpc

from shardcron import clock
from shardcron.abc import Backend
from shardcron.api import auth
from shardcron.api.routing import Router
from shardcron.errors import EtcdUnavailable
from shardcron.jobkey import split_key
from shardcron.spec.calendar_tables import check_calendar_name
from shardcron.store import calendars as calendar_store
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.calendar_convert import calendar_from_proto, calendar_to_proto
from shardcron.wire.messages import BadRequest

log = logging.getLogger(__name__)


def _name(name: str, field: str = "name") -> str:
    reason = check_calendar_name(name)
    if reason:
        raise BadRequest(field, reason)
    return name


class CalendarRpcs:
    backend: Backend
    router: Router

    def _announce(self, name: str, calendar, now_ms: int) -> None:
        try:
            self.backend.calendar_written(name, calendar, now_ms)
        except EtcdUnavailable as e:
            log.warning(
                "calendar %r written, but the other nodes were not told (%s); they reload it within "
                "their periodic reload",
                name,
                e,
            )

    async def PutCalendar(
        self, request: pb.PutCalendarRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutCalendarResponse:
        calendar = calendar_from_proto(request.calendar)
        expected = request.expected_version if request.HasField("expected_version") else None
        if expected is not None and expected < 0:
            raise BadRequest("expected_version", f"must be at least 0 (0: create only), got {expected}")

        def write() -> pb.PutCalendarResponse:
            now = clock.wall_ms()
            stored = calendar_store.put_calendar(
                self.backend.engine, calendar, node_id=self.backend.node_id, now_ms=now, expected_version=expected
            )
            self._announce(calendar.name, calendar, now)
            return pb.PutCalendarResponse(calendar=calendar_to_proto(calendar, stored.version, stored.updated_at_ms))

        return await self.router.blocking(write)

    async def GetCalendar(
        self, request: pb.GetCalendarRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCalendarResponse:
        name = _name(request.name)

        def read() -> pb.GetCalendarResponse:
            s = calendar_store.get_calendar(self.backend.engine, name)
            users = [
                split_key(k)
                for k in calendar_store.jobs_using(self.backend.engine, name, namespaces=auth.readable_namespaces())
            ]
            return pb.GetCalendarResponse(
                calendar=calendar_to_proto(s.calendar, s.version, s.updated_at_ms),
                jobs=[k.id for k in users],
                job_namespaces=[k.namespace for k in users],
            )

        return await self.router.blocking(read)

    async def ListCalendars(
        self, request: pb.ListCalendarsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCalendarsResponse:
        def read() -> pb.ListCalendarsResponse:
            return pb.ListCalendarsResponse(
                calendars=[
                    calendar_to_proto(s.calendar, s.version, s.updated_at_ms)
                    for s in calendar_store.list_calendars(self.backend.engine)
                ]
            )

        return await self.router.blocking(read)

    async def DeleteCalendar(
        self, request: pb.DeleteCalendarRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCalendarResponse:
        name = _name(request.name)

        def delete() -> pb.DeleteCalendarResponse:
            now = clock.wall_ms()
            calendar_store.delete_calendar(self.backend.engine, name, now_ms=now, force=request.force)
            self._announce(name, None, now)
            return pb.DeleteCalendarResponse()

        return await self.router.blocking(delete)


__all__ = ["CalendarRpcs"]
