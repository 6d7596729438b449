"""Shard fences: the token every leader write is checked against.

A shard's fence is its leader's etcd create revision, so it only grows. The
row in ``shard_fences`` holds the newest fence any leader has raised; a write
is accepted only inside a transaction that finds the row still equal to the
writer's own fence (``fenced``), so a deposed leader that has not noticed yet
can no longer change anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from sqlalchemy import Connection, Engine, bindparam, select
from sqlalchemy import exc as sa_exc

from shardcron.errors import FencedOut, StoreUnavailable
from shardcron.store.engine import reading, writing
from shardcron.store.schema import fence_log, shard_fences
from shardcron.store.sql import insert_ignoring_duplicates, is_deadlock

T = TypeVar("T")

# How often a fenced unit of work runs before a conflict with a concurrent
# transaction is reported: a unique-key race with another transaction of the
# same leader, or a deadlock the server broke. Each run starts afresh (and sees
# the winner's rows), so the second normally settles it.
CONFLICT_ATTEMPTS = 3


@dataclass(frozen=True)
class FenceRow:
    shard: int
    fence: int
    node_id: str
    updated_at_ms: int


def ensure_shards(engine: Engine, shard_count: int) -> None:
    """Create the missing fence rows (fence 0) for shards 0..shard_count-1.

    Idempotent, and safe when several nodes start at once: a row another
    process inserted first is left as it is.
    """
    with writing(engine) as conn:
        insert_missing_shards(conn, shard_count)


def insert_missing_shards(conn: Connection, shard_count: int) -> None:
    have = set(conn.execute(select(shard_fences.c.shard)).scalars())
    missing = [{"shard": k, "fence": 0, "node_id": "", "updated_at_ms": 0} for k in range(shard_count) if k not in have]
    insert_ignoring_duplicates(conn, shard_fences, missing)


def raise_fence(engine: Engine, shard: int, fence: int, node_id: str, now_ms: int) -> None:
    """Make ``fence`` the shard's current fence, as its new leader.

    Raising to the fence already stored is a successful no-op (a leader may
    retry after a lost reply). A stored fence above ``fence`` means a newer
    leader exists: ``FencedOut``.
    """
    with writing(engine) as conn:
        # The UPDATE waits for every open fenced transaction of the shard (they
        # hold the row's share lock) and then keeps newer ones out until commit.
        moved = conn.execute(
            shard_fences.update()
            .where(shard_fences.c.shard == shard, shard_fences.c.fence < fence)
            .values(fence=fence, node_id=node_id, updated_at_ms=now_ms)
        ).rowcount
        if moved == 1:
            conn.execute(fence_log.insert().values(shard=shard, fence=fence, node_id=node_id, raised_at_ms=now_ms))
            return
        current = conn.execute(select(shard_fences.c.fence).where(shard_fences.c.shard == shard)).scalar()
        if current is None:
            raise LookupError(f"shard {shard} has no fence row: call ensure_shards first")
        if current != fence:
            raise FencedOut(shard, fence, current)


def read_fences(engine: Engine) -> dict[int, FenceRow]:
    with reading(engine) as conn:
        rows = conn.execute(select(shard_fences).order_by(shard_fences.c.shard))
        return {r.shard: FenceRow(r.shard, r.fence, r.node_id, r.updated_at_ms) for r in rows}


Key = tuple[int, int]  # (shard, fence): one leader's claim on one shard
P = TypeVar("P")


@dataclass(frozen=True)
class FencedOutcome(Generic[T]):
    """What a fenced unit of work over several shards returned, and the shards it was not given.

    ``fenced_out`` maps every shard that was given with a fence other than its
    stored one to the stored fence (None: the shard has no fence row): the one
    place a caller learns which of its writes were refused.
    """

    value: T
    fenced_out: dict[int, int | None]

    def is_fenced(self, shard: int, fence: int) -> bool:
        """Whether the work for ``(shard, fence)`` was held back."""
        return shard in self.fenced_out and self.fenced_out[shard] != fence


@contextmanager
def fenced(engine: Engine, shard: int, fence: int) -> Iterator[Connection]:
    """A transaction that commits only if ``fence`` is still the shard's fence.

    Raises ``FencedOut`` (and writes nothing) when it is not; commits when the
    block ends normally; rolls back on any exception.

    Why the share lock: under READ COMMITTED a plain read of the fence would
    let this sequence through: stale leader reads fence F1 == its own; new
    leader raises to F2 and commits; stale leader writes and commits under F1,
    after F2 took effect. Reading the row FOR SHARE (LOCK IN SHARE MODE on
    MariaDB) holds it until this transaction ends, so a raise, which must
    update the row, waits for this transaction to finish; and a transaction
    that starts after the raise waits for it, then reads F2 and is refused.
    Fenced writers of one leader share the lock and run side by side. SQLite
    ignores FOR SHARE; there BEGIN IMMEDIATE (engine.py) serialises all
    writers to the file, which gives the same guarantee.
    """
    with fenced_many(engine, {(shard, fence): None}) as (conn, live, fenced_out):
        if not live:
            raise FencedOut(shard, fence, fenced_out[shard])
        yield conn


@contextmanager
def fenced_many(
    engine: Engine, work: Mapping[Key, P]
) -> Iterator[tuple[Connection, dict[Key, P], dict[int, int | None]]]:
    """One transaction for several shards' work, ``{(shard, fence): item}``: yields
    ``(conn, live, fenced_out)``.

    ``live`` holds only the items whose fence is their shard's stored fence:
    the caller writes from it alone, so the work of a shard whose fence moved
    is never in its hands. ``fenced_out`` names the others (see
    ``FencedOutcome``). The fence rows are read under the same share lock as
    in ``fenced``, in shard order so that two such transactions cannot
    deadlock. A leader's loop claims the slots of all its shards this way, one
    commit instead of one per shard.
    """
    with writing(engine) as conn:
        stored = dict(conn.execute(_FENCES_FOR_SHARE, {"shards": sorted({s for s, _ in work})}).all())
        live = {k: item for k, item in work.items() if stored.get(k[0]) == k[1]}
        fenced_out = {s: stored.get(s) for s, f in work if stored.get(s) != f}
        yield conn, live, fenced_out


# Built once: constructing a statement costs several times what running it does.
_FENCES_FOR_SHARE = (
    select(shard_fences.c.shard, shard_fences.c.fence)
    .where(shard_fences.c.shard.in_(bindparam("shards", expanding=True)))
    .order_by(shard_fences.c.shard)
    .with_for_update(read=True)
)


def stored_fence_for_share(conn: Connection, shard: int) -> int | None:
    """The shard's stored fence, read FOR SHARE in the caller's open transaction (as ``fenced`` does).

    Until that transaction ends no fence raise can commit, so a caller that
    finds its own fence here may write as the shard's leader. None: no fence row.
    """
    row = conn.execute(_FENCES_FOR_SHARE, {"shards": [shard]}).first()
    return None if row is None else row.fence


def run_fenced(engine: Engine, shard: int, fence: int, work: Callable[[Connection], T]) -> T:
    """``work(conn)`` in a ``fenced`` transaction, run again in a fresh one if it
    loses a race to a concurrent transaction of the same leader (the fence lock
    is shared, so it does not order them): a duplicate key, or a deadlock.

    ``work`` must be safe to re-run: everything it did is rolled back first.
    ``FencedOut`` when the fence moved (``work`` is then not run).
    """
    out = run_fenced_many(engine, {(shard, fence): None}, lambda conn, live: work(conn) if live else None)
    if out.fenced_out:
        raise FencedOut(shard, fence, out.fenced_out[shard])
    return cast(T, out.value)  # the fence held, so work ran


def run_fenced_many(
    engine: Engine, work_by_fence: Mapping[Key, P], work: Callable[[Connection, dict[Key, P]], T]
) -> FencedOutcome[T]:
    """``work(conn, live)`` in a ``fenced_many`` transaction, re-run like ``run_fenced``;
    ``live`` holds only the items whose fence held."""
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            with fenced_many(engine, work_by_fence) as (conn, live, fenced_out):
                return FencedOutcome(work(conn, live), fenced_out)
        except sa_exc.IntegrityError:
            if attempt == CONFLICT_ATTEMPTS:
                raise
        except StoreUnavailable as e:
            if attempt == CONFLICT_ATTEMPTS or not is_deadlock(e.__cause__):
                raise
    raise AssertionError("unreachable")


__all__ = [
    "FenceRow",
    "FencedOutcome",
    "ensure_shards",
    "fenced",
    "fenced_many",
    "raise_fence",
    "read_fences",
    "run_fenced",
    "run_fenced_many",
    "stored_fence_for_share",
]
