"""Every entry of the tick statement table (store/tick_statements.py) on real SQLite, PostgreSQL and MariaDB.

The tests iterate over ``WRITES`` itself, so a write added to the table is
tested here on every database without anyone listing it. Each write is run
the way its callers run it (``ticks_batch``, inside ``fences.run_fenced_many``)
over a batch naming every tick below, with values made from its fields' SQL
types: what it changes is then decided by its statement's WHERE alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest
from sqlalchemy import Connection, Engine, select

from shardcron.errors import FencedOut
from shardcron.model import TickStatus
from shardcron.store import ensure_shards, raise_fence
from shardcron.store.engine import writing
from shardcron.store.fences import run_fenced, run_fenced_many
from shardcron.store.schema import ticks
from shardcron.store.tick_statements import WRITES, Kind, Reach, TickWrite
from shardcron.store.ticks_batch import insert_rows, update_keys, update_rows

F_OLD, F_NOW = 100, 200  # shard 0's deposed leader's fence, and its current one
NODE = "node-a"
Key = tuple[str, int]

# The ticks every write meets: slot -> (shard, fence, status) of its row.
OWN = ("own", 60_000)
ORPHAN = ("orphan", 60_000)
FINAL = ("final", 60_000)
FINAL_ORPHAN = ("final-orphan", 60_000)
OTHER_SHARD = ("other-shard", 60_000)
STARTING_ROWS = {
    OWN: (0, F_NOW, TickStatus.CLAIMED),
    ORPHAN: (0, F_OLD, TickStatus.RUNNING),
    FINAL: (0, F_NOW, TickStatus.SUCCEEDED),
    FINAL_ORPHAN: (0, F_OLD, TickStatus.FAILED),
    OTHER_SHARD: (1, F_NOW, TickStatus.CLAIMED),
}
NEW = ("new", 60_000)  # a slot without a row
BATCH = [*STARTING_ROWS, NEW]

# The existing rows a write of each reach may change when shard 0's current leader makes it. No final row
# is among them, nor any other shard's.
REACHED: Mapping[Reach | None, set[Key]] = {
    Reach.OWN: {OWN},
    Reach.ORPHANS: {ORPHAN},
    Reach.OWN_AND_ORPHANS: {OWN, ORPHAN},
    None: set(),  # an insert
}

# A value for each SQL type a write's fields use. The text is a valid status, since one of them sets it.
SAMPLE = {"TEXT": TickStatus.FAILED.value, "INTEGER": 7, "BIGINT": 7_007, "BOOLEAN": True}


def run(conn: Connection, write: TickWrite, keys: Sequence[Key], *, shard: int, fence: int) -> None:
    """``write`` over ``keys`` as the leader of ``shard`` under ``fence``, the way its callers run it."""
    given: dict[str, object] = {"b_shard": shard, "b_fence": fence}
    shared = {name: given.get(name, SAMPLE[t]) for name, t in write.shared.items()}

    def rows() -> list[tuple[object, ...]]:
        return [
            tuple({"b_job": job, "b_at": at, **given}.get(name, SAMPLE[t]) for name, t in write.row.items())
            for job, at in keys
        ]

    runners: dict[Kind, Callable[[], object]] = {
        Kind.INSERT: lambda: insert_rows(conn, write, rows(), shared),
        Kind.UPDATE_ROWS: lambda: update_rows(conn, write, rows()),
        Kind.UPDATE_KEYS: lambda: update_keys(conn, write, keys, shared),
    }
    assert write.kind in runners, f"{write.name}: a kind of write this test does not know how to run"
    runners[write.kind]()


def stored(engine: Engine) -> dict[Key, tuple[object, ...]]:
    with engine.connect() as conn:
        return {(r.job_id, r.scheduled_at_ms): tuple(r) for r in conn.execute(select(ticks))}


@pytest.fixture
def store(store_engine) -> Engine:
    """Shard 0 led under F_NOW (F_OLD before it), shard 1 by another leader, and the STARTING_ROWS."""
    ensure_shards(store_engine, 2)
    raise_fence(store_engine, 0, F_OLD, "node-old", 1)
    raise_fence(store_engine, 0, F_NOW, NODE, 2)
    raise_fence(store_engine, 1, F_NOW, "node-b", 2)
    with writing(store_engine) as conn:
        conn.execute(
            ticks.insert(),
            [
                {
                    "job_id": job,
                    "scheduled_at_ms": at,
                    "shard": shard,
                    "fence": fence,
                    "node_id": "node-old" if fence == F_OLD else NODE,
                    "status": status.value,
                    "attempt": 1,
                    "manual": False,
                    "claimed_at_ms": 1,
                }
                for (job, at), (shard, fence, status) in STARTING_ROWS.items()
            ],
        )
    return store_engine


WRITE_PARAMS = pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))


@WRITE_PARAMS
def test_under_the_current_fence_a_write_changes_only_the_rows_it_reaches(store, write):
    before = stored(store)
    out = run_fenced_many(
        store,
        {(0, F_NOW): BATCH},
        lambda conn, live: [run(conn, write, keys, shard=s, fence=f) for (s, f), keys in live.items()],
    )
    assert out.fenced_out == {}
    after = stored(store)
    changed = {k for k in after if before.get(k) != after[k]}
    expected = REACHED[write.reach] | ({NEW} if write.kind is Kind.INSERT else set())
    assert changed == expected
    assert all(after[k] == before[k] for k in (FINAL, FINAL_ORPHAN)), "a final row moved"
    if write.kind is Kind.INSERT:
        assert after[NEW][2:4] == (0, F_NOW), "a new tick carries its writer's shard and fence"


@WRITE_PARAMS
def test_under_an_older_fence_a_write_changes_nothing(store, write):
    before = stored(store)

    def work(conn: Connection) -> None:
        run(conn, write, BATCH, shard=0, fence=F_OLD)

    out = run_fenced_many(store, {(0, F_OLD): BATCH}, lambda conn, live: [work(conn) for _ in live])
    assert out.fenced_out == {0: F_NOW} and out.is_fenced(0, F_OLD)
    with pytest.raises(FencedOut) as e:
        run_fenced(store, 0, F_OLD, work)
    assert (e.value.shard, e.value.fence, e.value.current) == (0, F_OLD, F_NOW)
    assert stored(store) == before


@WRITE_PARAMS
def test_without_the_fence_lock_a_deposed_leader_still_cannot_touch_newer_or_final_rows(store, write):
    """The statement's own WHERE, run by a writer that skipped the fence row's check: only what its reach
    admits under F_OLD may change, which is never a row of the newer fence, a final row or another shard's."""
    before = stored(store)
    with writing(store) as conn:
        run(conn, write, BATCH, shard=0, fence=F_OLD)
    after = stored(store)
    changed = {k for k in before if before[k] != after[k]}
    reached_under_old = {Reach.OWN: {ORPHAN}, Reach.ORPHANS: set(), Reach.OWN_AND_ORPHANS: {ORPHAN}, None: set()}
    assert changed == reached_under_old[write.reach]
