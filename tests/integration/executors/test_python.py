"""Python jobs with a fenced session: their SQL effects commit with the tick's result, under the fence, or not at all.

Part one needs no cluster: a real store (PostgreSQL, and MariaDB) prepared
with shardcron's own store functions (a shard fence, a claimed and running
tick), and the executor called directly. The callable writes into a "user"
table (``tests.support.pyjobs.effects``) and waits on a gate while the test
moves the world: raises the fence, lets the timeout pass.

Part two is the SIGSTOP test: real nodes, a leader frozen while its call is in
flight, its successor re-running the slot; the user's table must end with
exactly one effect per slot.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import select

from shardcron import Client
from shardcron.dev.testing.cluster import wait_until
from shardcron.executors.python import PythonExecutor
from shardcron.model import ExecutionResult, ExecutorKind, ExecutorSpec, PythonSpec, SlotRef, TickContext, TickStatus
from shardcron.runtime.latch import Latch
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine, reading
from shardcron.store.fences import ensure_shards, raise_fence
from shardcron.store.migrate import ensure_schema
from shardcron.store.tick_reads import list_ticks
from shardcron.store.tick_results import mark_running, record_results
from shardcron.store.ticks import SlotClaim, claim_ticks
from tests.support import pyjobs

pytestmark = pytest.mark.timeout(180)

FENCE = 5
ALLOW = ("tests.support",)


@pytest.fixture(params=["postgresql", "mariadb"])
def engine(request, fresh_db_url):
    e = make_engine(fresh_db_url(request.param))
    try:
        ensure_schema(e, auto_upgrade=True)
        ensure_shards(e, 1)
        raise_fence(e, 0, FENCE, "n0", 1)
        pyjobs.metadata.create_all(e)
        yield e
    finally:
        e.dispose()


@pytest.fixture
def executor(engine):
    e = PythonExecutor(engine, ALLOW)
    yield e
    e.close()


def running_tick(engine, job_id: str = "pj", at: int = 1_767_225_605_000) -> TickContext:
    """A tick claimed and marked running under FENCE, as the runner leaves it before calling the executor."""
    slot = SlotRef(job_id, at)
    assert claim_ticks(engine, [SlotClaim(job_id, at)], shard=0, fence=FENCE, node_id="n0", now_ms=at) == [slot]
    mark_running(engine, [(slot, 1, at)], shard=0, fence=FENCE)
    return TickContext(job_id, at, 1, FENCE, 0, "n0")


def spec(target: str, *args, **kwargs) -> ExecutorSpec:
    return ExecutorSpec(
        ExecutorKind.PYTHON,
        python=PythonSpec(target=f"tests.support.pyjobs:{target}", args=args, kwargs=kwargs, session=True),
    )


def effects(engine) -> list:
    with reading(engine) as conn:
        return list(conn.execute(select(pyjobs.effects).order_by(pyjobs.effects.c.id)))


def tick_row(engine, ctx: TickContext):
    [t] = [t for t in list_ticks(engine, ctx.job_id) if t.scheduled_at_ms == ctx.scheduled_at_ms]
    return t


def start(executor, s, ctx, timeout_s=30.0, cancel=None):
    pool = ThreadPoolExecutor(1)
    future = pool.submit(executor.run, s, ctx, timeout_s, cancel or Latch())
    pool.shutdown(wait=False)
    return future


def test_success_commits_the_effect_and_the_tick_together(engine, executor):
    ctx = running_tick(engine)
    n = uuid.uuid4().hex
    pyjobs.gate(n).set()
    result = executor.run(spec("insert_then_wait", n), ctx, 30.0, Latch())
    assert result.ok, result.error
    [row] = effects(engine)
    assert (row.job_id, row.slot, row.fence, row.node_id, row.attempt) == ("pj", ctx.scheduled_at_ms, FENCE, "n0", 1)
    tick = tick_row(engine, ctx)
    assert (tick.status, tick.fence, tick.attempt) == (TickStatus.SUCCEEDED, FENCE, 1)
    assert tick.output == f"wrote slot {ctx.scheduled_at_ms} under fence {FENCE}"
    assert tick.finished_at_ms is not None

    # The runner then hands the same result to the recorder: its UPDATE finds no unresolved row, changes nothing.
    later = ExecutionResult(ok=True, started_at_ms=1, finished_at_ms=2, output="recorder's copy")
    record_results(
        engine, [(SlotRef(ctx.job_id, ctx.scheduled_at_ms), 1, later, TickStatus.SUCCEEDED)], shard=0, fence=FENCE
    )
    assert tick_row(engine, ctx) == tick


def test_a_fence_raised_while_the_call_runs_rolls_its_writes_back(engine, executor):
    ctx = running_tick(engine)
    n = uuid.uuid4().hex
    future = start(executor, spec("insert_then_wait", n), ctx)
    assert pyjobs.entered(n).wait(30), "the call never started"
    # A successor raises the fence while the call is inside its transaction. This must not
    # wait for the call: the call holds no lock on the fence row until it finishes.
    raise_fence(engine, 0, FENCE + 1, "n1", 2)
    pyjobs.gate(n).set()
    result = future.result(30)
    assert not result.ok
    assert result.error.startswith(
        f"fenced out: shard 0's fence moved from {FENCE} to {FENCE + 1} while tests.support.pyjobs:insert_then_wait ran"
    ), result.error
    assert result.error.endswith("its writes were rolled back")
    assert effects(engine) == []
    tick = tick_row(engine, ctx)
    assert (tick.status, tick.fence) == (TickStatus.RUNNING, FENCE)  # the successor's to resolve


def test_a_second_run_of_a_committed_slot_writes_nothing(engine, executor):
    ctx = running_tick(engine)
    n = uuid.uuid4().hex
    pyjobs.gate(n).set()
    assert executor.run(spec("insert_then_wait", n), ctx, 30.0, Latch()).ok
    again = executor.run(spec("insert_then_wait", n), ctx, 30.0, Latch())
    assert not again.ok
    assert again.error.startswith(f"tick pj@{ctx.scheduled_at_ms} is no longer unresolved under fence {FENCE}")
    assert len(effects(engine)) == 1


def test_an_abandoned_call_never_commits(engine, executor, caplog):
    ctx = running_tick(engine)
    n = uuid.uuid4().hex
    result = executor.run(spec("insert_then_wait", n), ctx, 0.3, Latch())
    assert not result.ok
    assert result.error.startswith("timed out after 0.3s"), result.error
    assert "ignored cancel and is still running" in result.error
    assert "its session will be rolled back" in result.error
    pyjobs.gate(n).set()
    wait_until(
        lambda: any(
            "returned after it was abandoned" in r.getMessage() and "its session was rolled back" in r.getMessage()
            for r in caplog.records
        ),
        30,
        0.02,
        "the late return to be rolled back",
    )
    assert effects(engine) == []
    assert tick_row(engine, ctx).status is TickStatus.RUNNING


def test_a_cooperative_call_stopped_by_cancel_commits_nothing(engine, executor):
    ctx = running_tick(engine)
    n = uuid.uuid4().hex
    cancel = Latch()
    future = start(executor, spec("insert_then_wait", n, cooperate=True), ctx, cancel=cancel)
    assert pyjobs.entered(n).wait(30)
    cancel.set()
    result = future.result(30)
    assert not result.ok
    assert result.error == (
        "cancelled: tests.support.pyjobs:insert_then_wait was stopped (this node lost the shard or is stopping)"
    )
    wait_until(lambda: pyjobs.late.get(n) == "returned", 30, 0.02, "the call to end")
    assert effects(engine) == []


def test_a_callable_that_rolls_back_succeeds_with_nothing_written(engine, executor):
    ctx = running_tick(engine)
    result = executor.run(spec("rolls_back"), ctx, 30.0, Latch())
    assert result.ok, result.error
    assert "nothing written" in result.output
    assert effects(engine) == []


def test_a_session_may_idle_as_long_as_the_job_may_run(engine, executor):
    ctx = running_tick(engine)
    result = executor.run(spec("session_settings"), ctx, 120.0, Latch())
    assert result.ok, result.error
    assert result.output == "130s"  # the job's timeout plus a margin, for this transaction only


# -- SIGSTOP: real nodes --------------------------------------------------------------------


@pytest.mark.cluster
def test_a_frozen_leaders_effect_rolls_back_and_each_slot_has_exactly_one(fresh_db_url, make_cluster, tmp_path):
    db = fresh_db_url("postgresql")
    setup = make_engine(db)
    try:
        ensure_schema(setup, auto_upgrade=True)
        pyjobs.metadata.create_all(setup)
    finally:
        setup.dispose()
    hold = tmp_path / "hold"
    hold.mkdir()
    cluster = make_cluster(db, shards=1, extra_args=["--allow-python", "tests.support"])
    n0 = cluster.add("n0", env={"SHARDCRON_TEST_PYJOB_HOLD": str(hold)})
    cluster.wait_all_led(60, by={"n0"})
    n1 = cluster.add("n1")
    job = job_from_dict(
        {
            "id": "effects",
            "every": "1s",
            "timeout": "60s",
            "retry": {"max_attempts": 3, "backoff": "200ms"},
            "executor": {"kind": "python", "target": "tests.support.pyjobs:record_effect", "session": True},
        },
        require_executor=True,
    )
    engine = make_engine(db)
    try:
        with Client([n0.address, n1.address]) as client:
            client.put_job(job)
        held = json.loads(wait_until(lambda: _read(hold / "held.json"), 60, 0.05, "n0's first call to be in flight"))
        n0.pause()  # SIGSTOP, with the call inside its open transaction

        def n1_reran_the_slot():
            tick = [t for t in list_ticks(engine, "effects", limit=200) if t.scheduled_at_ms == held["slot"]][0]
            return tick if tick.status is TickStatus.SUCCEEDED else None

        tick = wait_until(n1_reran_the_slot, 90, 0.2, "n1 to lead and re-run the held slot")
        assert tick.node_id == "n1" and tick.fence > held["fence"] and tick.attempt == 2, tick
        n0.resume()  # SIGCONT: n0 finds itself deposed, its call still working
        (hold / "release").touch()
        wait_until(lambda: "rolled back" in n0.log_text(), 60, 0.2, "n0 to roll the held call's writes back")
        assert n0.alive()

        # The job keeps running: compare over the slots up to the latest success, once all of them are final.
        cutoff = max(
            t.scheduled_at_ms for t in list_ticks(engine, "effects", limit=500) if t.status is TickStatus.SUCCEEDED
        )

        def final_through_cutoff():
            ts = [t for t in list_ticks(engine, "effects", limit=500) if t.scheduled_at_ms <= cutoff]
            return ts if all(t.status.is_final for t in ts) else None

        ticks = {t.scheduled_at_ms: t for t in wait_until(final_through_cutoff, 60, 0.2, "the ticks to be final")}
        rows = [r for r in effects(engine) if r.slot <= cutoff]
        per_slot: dict[int, list] = {}
        for r in rows:
            per_slot.setdefault(r.slot, []).append(r)
        doubled = {at: rs for at, rs in per_slot.items() if len(rs) > 1}
        assert not doubled, f"slots with more than one effect: {doubled}"
        succeeded = {at for at, t in ticks.items() if t.status is TickStatus.SUCCEEDED}
        assert set(per_slot) == succeeded, (sorted(set(per_slot) ^ succeeded), ticks)
        [effect] = per_slot[held["slot"]]
        assert (effect.fence, effect.node_id, effect.attempt) == (tick.fence, "n1", 2)
        for at, [r] in per_slot.items():  # every effect carries its tick's fence and attempt
            assert (r.fence, r.node_id, r.attempt) == (ticks[at].fence, ticks[at].node_id, ticks[at].attempt)
        # n0 said what happened to its call: rolled back (abandoned on the shard loss, or fenced out at its commit).
        assert [
            line
            for line in n0.log_text().splitlines()
            if f"python job effects@{held['slot']}" in line and "rolled back" in line
        ]
    finally:
        engine.dispose()
        (hold / "release").touch()


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
