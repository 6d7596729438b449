"""Ticks, tick events and a job's runs between protobuf and ``model.Tick`` / ``model.JobRuns``."""

from __future__ import annotations

from shardcron.jobkey import DEFAULT_NAMESPACE, join_key, split_key
from shardcron.model import JobRuns, RecordedMiss, Tick, TickStatus
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.messages import optional

_STATUS_TO_PB = {
    TickStatus.CLAIMED: pb.TICK_STATUS_CLAIMED,
    TickStatus.RUNNING: pb.TICK_STATUS_RUNNING,
    TickStatus.SUCCEEDED: pb.TICK_STATUS_SUCCEEDED,
    TickStatus.FAILED: pb.TICK_STATUS_FAILED,
    TickStatus.SKIPPED: pb.TICK_STATUS_SKIPPED,
    TickStatus.ABANDONED: pb.TICK_STATUS_ABANDONED,
}
_STATUS_FROM_PB = {v: k for k, v in _STATUS_TO_PB.items()}


OPTIONAL_FIELDS = (
    "claimed_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "exit_code",
    "http_status",
    "output",
    "error",
    "acked_at_ms",
)


def tick_to_proto(t: Tick) -> pb.Tick:
    key = split_key(t.job_id)
    p = pb.Tick(
        job_id=key.id,
        namespace=key.namespace,
        scheduled_at_ms=t.scheduled_at_ms,
        shard=t.shard,
        fence=t.fence,
        node_id=t.node_id,
        status=_STATUS_TO_PB[t.status],
        attempt=t.attempt,
        manual=t.manual,
    )
    for name in OPTIONAL_FIELDS:
        value = getattr(t, name)
        if value is not None:
            setattr(p, name, value)
    p.missed_deadlines.extend(t.missed_deadlines)
    return p


def tick_from_proto(p: pb.Tick) -> Tick:
    return Tick(
        job_id=join_key(p.namespace or DEFAULT_NAMESPACE, p.job_id),
        scheduled_at_ms=p.scheduled_at_ms,
        shard=p.shard,
        fence=p.fence,
        node_id=p.node_id,
        status=_STATUS_FROM_PB.get(p.status, TickStatus.CLAIMED),
        attempt=p.attempt,
        manual=p.manual,
        claimed_at_ms=optional(p, "claimed_at_ms"),
        started_at_ms=optional(p, "started_at_ms"),
        finished_at_ms=optional(p, "finished_at_ms"),
        exit_code=optional(p, "exit_code"),
        http_status=optional(p, "http_status"),
        output=optional(p, "output"),
        error=optional(p, "error"),
        acked_at_ms=optional(p, "acked_at_ms"),
        missed_deadlines=tuple(p.missed_deadlines),
    )


def tick_event_to_proto(t: Tick, dropped: int = 0) -> pb.TickEvent:
    return pb.TickEvent(tick=tick_to_proto(t), dropped=dropped)


def job_runs_to_proto(runs: JobRuns) -> pb.JobRuns:
    p = pb.JobRuns(as_of_ms=runs.as_of_ms, failures_in_a_row=runs.failures_in_a_row)
    if runs.next_slot_ms is not None:
        p.next_slot_ms = runs.next_slot_ms
        if runs.next_start_ms is not None:
            p.next_start_ms = runs.next_start_ms
    if runs.last_scheduled_at_ms is not None:
        p.last_scheduled_at_ms = runs.last_scheduled_at_ms
    if runs.last_status is not None:
        p.last_status = _STATUS_TO_PB[runs.last_status]
    if runs.next_reason:
        p.next_reason = runs.next_reason
    p.last_missed_deadlines.extend(runs.last_missed_deadlines)
    return p


def job_runs_from_proto(p: pb.JobRuns) -> JobRuns:
    return JobRuns(
        as_of_ms=p.as_of_ms,
        next_slot_ms=p.next_slot_ms if p.HasField("next_slot_ms") else None,
        next_start_ms=p.next_start_ms if p.HasField("next_start_ms") else None,
        last_scheduled_at_ms=p.last_scheduled_at_ms if p.HasField("last_scheduled_at_ms") else None,
        last_status=_STATUS_FROM_PB.get(p.last_status),
        failures_in_a_row=p.failures_in_a_row,
        next_reason=p.next_reason or None,
        last_missed_deadlines=tuple(p.last_missed_deadlines),
    )


__all__ = ["job_runs_from_proto", "job_runs_to_proto", "tick_event_to_proto", "tick_from_proto", "tick_to_proto"]


def deadline_miss_to_proto(m: RecordedMiss) -> pb.DeadlineMiss:
    key = split_key(m.job_id)
    return pb.DeadlineMiss(
        job_id=key.id,
        namespace=key.namespace,
        scheduled_at_ms=m.scheduled_at_ms,
        kind=m.kind,
        missed_at_ms=m.missed_at_ms,
    )


def deadline_miss_from_proto(p: pb.DeadlineMiss) -> RecordedMiss:
    return RecordedMiss(
        join_key(p.namespace or DEFAULT_NAMESPACE, p.job_id),
        p.scheduled_at_ms,
        p.kind,
        p.missed_at_ms,
    )
