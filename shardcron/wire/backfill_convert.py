"""Backfill messages <-> ``model.Backfill``: for the servicer and the client alike."""

from __future__ import annotations

from shardcron.jobkey import DEFAULT_NAMESPACE, join_key, split_key
from shardcron.model import Backfill, BackfillState, Overlap
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import OVERLAP_FROM_PB, OVERLAP_TO_PB
from shardcron.wire.messages import BadRequest

_STATE_TO_PB = {
    BackfillState.ACTIVE: pb.BACKFILL_STATE_ACTIVE,
    BackfillState.DONE: pb.BACKFILL_STATE_DONE,
    BackfillState.FAILED: pb.BACKFILL_STATE_FAILED,
}
_STATE_FROM_PB = {v: k for k, v in _STATE_TO_PB.items()}


def backfill_to_proto(bf: Backfill) -> pb.Backfill:
    key = split_key(bf.job_id)
    p = pb.Backfill(
        id=bf.id,
        job_id=key.id,
        namespace=key.namespace,
        shard=bf.shard,
        from_ms=bf.from_ms,
        to_ms=bf.to_ms,
        overlap=OVERLAP_TO_PB[bf.overlap],
        rate_per_s=bf.rate_per_s,
        state=_STATE_TO_PB[bf.state],
        planned=bf.planned,
        done=bf.done,
        skipped=bf.skipped,
        created_at_ms=bf.created_at_ms,
        updated_at_ms=bf.updated_at_ms,
        node_id=bf.node_id,
        error=bf.error or "",
    )
    if bf.cursor_ms is not None:
        p.cursor_ms = bf.cursor_ms
    return p


def backfill_from_proto(p: pb.Backfill) -> Backfill:
    return Backfill(
        p.id,
        join_key(p.namespace or DEFAULT_NAMESPACE, p.job_id),
        p.shard,
        p.from_ms,
        p.to_ms,
        OVERLAP_FROM_PB.get(p.overlap, Overlap.SKIP),
        p.rate_per_s,
        p.planned,
        p.created_at_ms,
        _STATE_FROM_PB.get(p.state, BackfillState.ACTIVE),
        p.cursor_ms if p.HasField("cursor_ms") else None,
        p.done,
        p.skipped,
        0,
        p.node_id,
        p.updated_at_ms,
        p.error or None,
    )


def overlap_from_proto(value: int) -> Overlap:
    if value == pb.OVERLAP_UNSPECIFIED:
        return Overlap.SKIP
    if value not in OVERLAP_FROM_PB:
        raise BadRequest("overlap", f"unknown value {value}")
    return OVERLAP_FROM_PB[value]


def overlap_to_proto(overlap: str | Overlap) -> pb.Overlap:
    return OVERLAP_TO_PB[Overlap(overlap)]


__all__ = ["backfill_from_proto", "backfill_to_proto", "overlap_from_proto", "overlap_to_proto"]
