"""Ticks' claims under the shard's fence: one row per (job, scheduled time) slot; orphans adopted or abandoned.

The primary key (job_id, scheduled_at_ms) is what makes a slot run at most
once: whichever leader inserts the row owns the slot, and a second claim of it
inserts nothing. Status changes (see ``model.TickStatus``) are made only by the
leader whose fence the row carries, and never move a final status: the claims
and takeovers are here, the running marks and results in ``tick_results``, the
plain reads in ``tick_reads``.

Every write also names the shard, so a leader can touch only its own shard's
ticks, whose fence it holds. The statements, one per database, are in
``tick_statements``; ``ticks_batch`` runs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import Connection, Engine

from shardcron.errors import FencedOut
from shardcron.model import SlotRef, TickStatus
from shardcron.store import tick_statements, ticks_batch
from shardcron.store.fences import run_fenced, run_fenced_many
from shardcron.store.sql import chunks
from shardcron.store.text import clip


class SlotClaim(NamedTuple):  # a tuple: one per slot per claim, made and read in C
    job_id: str
    scheduled_at_ms: int
    manual: bool = False  # an extra run asked for with TriggerJob


@dataclass(frozen=True)
class ManyOutcome:
    """What a write over several shards did: the slots written per shard, and the shards fenced out."""

    written: dict[int, list[SlotRef]]
    fenced_out: dict[int, int | None]  # shard -> its stored fence, for the shards whose fence moved

    def is_fenced(self, shard: int, fence: int) -> bool:
        """Whether the writes given for ``(shard, fence)`` were refused (see ``fences.FencedOutcome``)."""
        return shard in self.fenced_out and self.fenced_out[shard] != fence

    def written_for(self, shard: int, fence: int) -> list[SlotRef]:
        """The slots written for ``shard`` alone; ``FencedOut`` if its fence moved."""
        if shard in self.fenced_out:
            raise FencedOut(shard, fence, self.fenced_out[shard])
        return self.written.get(shard, [])


def claim_ticks(
    engine: Engine, claims: Sequence[SlotClaim], *, shard: int, fence: int, node_id: str, now_ms: int
) -> list[SlotRef]:
    """Insert a ``claimed`` tick for each slot that has none; returns the slots
    actually claimed, in the order given. Slots that already have a tick (from
    any leader) are left alone and not returned: they are someone else's."""
    return claim_ticks_many(engine, {(shard, fence): claims}, node_id=node_id, now_ms=now_ms).written_for(shard, fence)


def claim_ticks_many(
    engine: Engine, batches: Mapping[tuple[int, int], Sequence[SlotClaim]], *, node_id: str, now_ms: int
) -> ManyOutcome:
    """``claim_ticks`` for several shards in one transaction: ``{(shard, fence): claims}``.

    A shard whose fence moved is reported in ``fenced_out`` and nothing is
    written for it; the other shards' claims commit together.
    """
    return _insert_new(
        engine,
        batches,
        node_id=node_id,
        now_ms=now_ms,
        status=TickStatus.CLAIMED.value,
        finished_at_ms=None,
        error=None,
    )


def skip_ticks(
    engine: Engine, claims: Sequence[SlotClaim], *, shard: int, fence: int, node_id: str, now_ms: int, reason: str
) -> list[SlotRef]:
    """Like ``claim_ticks``, but each new tick is recorded as ``skipped`` with ``reason``."""
    return _insert_new(
        engine,
        {(shard, fence): claims},
        node_id=node_id,
        now_ms=now_ms,
        status=TickStatus.SKIPPED.value,
        finished_at_ms=now_ms,
        error=clip(reason),
    ).written_for(shard, fence)


def take_over(engine: Engine, slots: Sequence[SlotRef], *, shard: int, fence: int, node_id: str) -> list[SlotRef]:
    """Adopt orphans: unresolved ticks of older fences become this leader's
    (fence and node_id; status unchanged). Returns the slots that moved.

    Final ticks are never adopted: their fence and node record who ran them.
    """
    keys = _unique_keys(slots)
    if not keys:
        return []
    writer = {"b_shard": shard, "b_fence": fence}

    def work(conn: Connection) -> list[SlotRef]:
        moved: list[SlotRef] = []
        for part in chunks(keys):
            # Two transactions of this leader are not kept apart by the shared
            # fence lock, but they would make the same change: at worst a slot
            # is reported by both.
            found = conn.execute(tick_statements.ADOPTABLE, {"keys": list(part), **writer}).all()
            if found:
                ticks_batch.update_keys(conn, tick_statements.ADOPT, part, {**writer, "node_id": node_id})
                moved += [SlotRef(j, at) for j, at in found]
        return moved

    return run_fenced(engine, shard, fence, work)


def abandon_ticks(
    engine: Engine, slots: Sequence[SlotRef], *, shard: int, fence: int, now_ms: int, reason: str
) -> None:
    """Give up on unresolved ticks (their leader died and the retry budget is
    spent): ``abandoned`` with ``reason``. Applies to this fence's ticks and to
    older fences' orphans alike."""
    keys = _unique_keys(slots)
    if not keys:
        return
    shared = {"b_shard": shard, "b_fence": fence, "now_ms": now_ms, "error": clip(reason)}
    run_fenced(engine, shard, fence, lambda conn: ticks_batch.update_keys(conn, tick_statements.ABANDON, keys, shared))


def _insert_new(
    engine: Engine,
    batches: Mapping[tuple[int, int], Sequence[SlotClaim]],
    *,
    node_id: str,
    now_ms: int,
    status: str,
    finished_at_ms: int | None,
    error: str | None,
) -> ManyOutcome:
    batches = {k: v for k, v in batches.items() if v}
    if not batches:
        return ManyOutcome({}, {})
    # What every new tick shares: none of its attempts has started yet.
    shared = {
        "node_id": node_id,
        "status": status,
        "attempt": 0,
        "now_ms": now_ms,
        "finished_at_ms": finished_at_ms,
        "error": error,
    }

    def work(conn: Connection, live: dict[tuple[int, int], Sequence[SlotClaim]]) -> dict[int, list[SlotRef]]:
        # Each slot once, for the first live shard that asks (in the order given).
        wanted: dict[tuple[str, int], tuple[SlotClaim, int, int]] = {}
        for (shard, fence), claims in live.items():
            for c in claims:
                wanted.setdefault((c.job_id, c.scheduled_at_ms), (c, shard, fence))
        inserted = ticks_batch.insert_rows(
            conn,
            tick_statements.CLAIM,
            [(k[0], k[1], shard, fence, c.manual) for k, (c, shard, fence) in wanted.items()],
            shared,
        )
        written: dict[int, list[SlotRef]] = {}
        for k, (_, shard, _) in wanted.items():  # in the order given
            if k in inserted:
                written.setdefault(shard, []).append(SlotRef(*k))
        return written

    out = run_fenced_many(engine, batches, work)
    return ManyOutcome(out.value, out.fenced_out)


def _unique_keys(slots: Sequence[SlotRef]) -> list[tuple[str, int]]:
    return sorted({(s.job_id, s.scheduled_at_ms) for s in slots})


__all__ = [
    "ManyOutcome",
    "SlotClaim",
    "abandon_ticks",
    "claim_ticks",
    "claim_ticks_many",
    "skip_ticks",
    "take_over",
]
