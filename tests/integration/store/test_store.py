"""The SQL store against real SQLite, PostgreSQL and MariaDB databases.

Every test that takes ``store_engine`` or ``db_url`` runs once per database
kind, each time on a fresh, empty database (tests/support/databases.py).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import replace

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import select, text

from shardcron.errors import ConfigError, FencedOut, InvalidJob, JobNotFound, StoreUnavailable, VersionConflict
from shardcron.model import OUTPUT_LIMIT_BYTES, ExecutionResult, Job, SlotRef, TickStatus
from shardcron.spec.job import job_from_dict
from shardcron.store import (
    SlotClaim,
    abandon_ticks,
    claim_ticks,
    count_jobs_by_shard,
    current_revision,
    delete_job,
    describe_url,
    ensure_schema,
    ensure_shards,
    fenced,
    get_job,
    head_revision,
    import_jobs,
    last_ticks,
    list_jobs,
    list_ticks,
    load_shard_jobs,
    make_engine,
    mark_running,
    normalise_url,
    put_job,
    raise_fence,
    read_fences,
    record_results,
    set_paused,
    skip_ticks,
    take_over,
    ticks_between,
    unresolved_ticks,
)
from shardcron.store.jobs import import_jobs_many
from shardcron.store.schema import VERSION_TABLE, fence_log, metadata, ticks

F1, F2 = 100, 200  # two leaders' fences for shard 0, the second newer
NODE_A, NODE_B = "node-a", "node-b"


def make_job(job_id: str, **fields) -> Job:
    return job_from_dict({"id": job_id, "every": "1m", **fields})


def snapshot(engine) -> dict[str, list[tuple]]:
    """Every row of every table, sorted: to prove a rejected write changed nothing."""
    with engine.connect() as conn:
        return {t.name: sorted(tuple(r) for r in conn.execute(select(t))) for t in metadata.sorted_tables}


def ok(output: str) -> ExecutionResult:
    return ExecutionResult(ok=True, started_at_ms=10, finished_at_ms=20, exit_code=0, output=output)


@pytest.fixture
def led(store_engine):
    """The store with 4 shards, shard 0 led by node A under F1."""
    ensure_shards(store_engine, 4)
    raise_fence(store_engine, 0, F1, NODE_A, 1_000)
    return store_engine


A = dict(shard=0, fence=F1, node_id=NODE_A)  # node A's write arguments


# -- fences -----------------------------------------------------------------------------


def test_raise_fence_is_monotonic_idempotent_and_logged(store_engine):
    ensure_shards(store_engine, 2)
    ensure_shards(store_engine, 3)  # idempotent, adds only shard 2
    assert {k: f.fence for k, f in read_fences(store_engine).items()} == {0: 0, 1: 0, 2: 0}

    raise_fence(store_engine, 0, F1, NODE_A, 1_000)
    raise_fence(store_engine, 0, F1, NODE_A, 1_500)  # a retry after a lost reply: no-op
    raise_fence(store_engine, 0, F2, NODE_B, 2_000)
    with pytest.raises(FencedOut) as e:
        raise_fence(store_engine, 0, F1, NODE_A, 3_000)  # the old leader, late
    assert (e.value.shard, e.value.fence, e.value.current) == (0, F1, F2)
    raise_fence(store_engine, 0, F2, NODE_B, 3_000)

    ensure_shards(store_engine, 3)  # must not reset a raised fence
    row = read_fences(store_engine)[0]
    assert (row.fence, row.node_id, row.updated_at_ms) == (F2, NODE_B, 2_000)
    with store_engine.connect() as conn:
        log = conn.execute(select(fence_log).order_by(fence_log.c.fence)).all()
    assert [tuple(r) for r in log] == [(0, F1, NODE_A, 1_000), (0, F2, NODE_B, 2_000)]


def test_fenced_refuses_other_fences_and_rolls_back_on_error(led):
    with pytest.raises(FencedOut):
        with fenced(led, 0, F1 + 1):  # a fence not raised yet is not current either
            pass
    with pytest.raises(FencedOut):
        with fenced(led, 1, F1):  # shard 1's fence is 0
            pass
    before = snapshot(led)
    with pytest.raises(RuntimeError):
        with fenced(led, 0, F1) as conn:
            conn.execute(
                ticks.insert().values(
                    job_id="j",
                    scheduled_at_ms=1,
                    shard=0,
                    fence=F1,
                    node_id=NODE_A,
                    status="claimed",
                    attempt=0,
                    manual=False,
                )
            )
            raise RuntimeError("boom")
    assert snapshot(led) == before


def test_every_write_under_a_stale_fence_is_rejected_and_changes_nothing(led):
    # Node A leaves a job and ticks in every state under F1; node B then takes over.
    put_job(led, make_job("j1"), now_ms=1_000, **A)
    put_job(led, make_job("j2"), now_ms=1_000, **A)
    claim_ticks(led, [SlotClaim("j1", t) for t in (60_000, 120_000, 180_000)], now_ms=1_000, **A)
    mark_running(led, [(SlotRef("j1", 120_000), 1, 1_100)], shard=0, fence=F1)
    raise_fence(led, 0, F2, NODE_B, 5_000)
    before = snapshot(led)

    slot = SlotRef("j1", 60_000)
    writes = {
        "put_job": lambda: put_job(led, make_job("j3"), now_ms=6_000, **A),
        "put_job (replace)": lambda: put_job(led, make_job("j1", paused=True), now_ms=6_000, **A),
        "import_jobs": lambda: import_jobs(led, [make_job("j4")], now_ms=6_000, **A),
        "delete_job": lambda: delete_job(led, "j2", shard=0, fence=F1),
        "set_paused": lambda: set_paused(led, "j1", True, now_ms=6_000, **A),
        "claim_ticks": lambda: claim_ticks(led, [SlotClaim("j1", 240_000)], now_ms=6_000, **A),
        "skip_ticks": lambda: skip_ticks(led, [SlotClaim("j1", 300_000)], now_ms=6_000, reason="r", **A),
        "mark_running": lambda: mark_running(led, [(slot, 1, 6_000)], shard=0, fence=F1),
        "record_results": lambda: record_results(
            led, [(SlotRef("j1", 120_000), 1, ok("x"), TickStatus.SUCCEEDED)], shard=0, fence=F1
        ),
        "take_over": lambda: take_over(led, [slot], **A),
        "abandon_ticks": lambda: abandon_ticks(led, [slot], shard=0, fence=F1, now_ms=6_000, reason="r"),
    }
    for name, write in writes.items():
        with pytest.raises(FencedOut) as e:
            write()
        assert (e.value.fence, e.value.current) == (F1, F2), name
        assert snapshot(led) == before, f"{name} changed the store although it was fenced out"

    # And the new leader's writes go through.
    assert take_over(led, [slot], shard=0, fence=F2, node_id=NODE_B) == [slot]


# -- concurrency ------------------------------------------------------------------------


def test_fence_raise_waits_for_an_open_fenced_transaction(led, db_url):
    """The share lock: a raise cannot slip between a stale leader's check and its write."""
    engine_b = make_engine(db_url)
    in_tx, may_commit, raised = threading.Event(), threading.Event(), threading.Event()

    def stale_leader() -> None:
        with fenced(led, 0, F1) as conn:
            in_tx.set()
            may_commit.wait(10)
            conn.execute(
                ticks.insert().values(
                    job_id="j",
                    scheduled_at_ms=1,
                    shard=0,
                    fence=F1,
                    node_id=NODE_A,
                    status="claimed",
                    attempt=0,
                    manual=False,
                    claimed_at_ms=1,
                )
            )

    def new_leader() -> None:
        in_tx.wait(10)
        raise_fence(engine_b, 0, F2, NODE_B, 2_000)
        raised.set()

    threads = [threading.Thread(target=stale_leader), threading.Thread(target=new_leader)]
    try:
        for t in threads:
            t.start()
        assert in_tx.wait(10)
        assert not raised.wait(0.5), "the raise did not wait for the open fenced transaction"
        may_commit.set()
        for t in threads:
            t.join(15)
        assert raised.is_set()
    finally:
        may_commit.set()
        engine_b.dispose()
    assert [t.fence for t in list_ticks(led, "j")] == [F1]  # committed before the raise
    with pytest.raises(FencedOut):
        claim_ticks(led, [SlotClaim("j", 2)], now_ms=3_000, **A)


def test_claims_racing_a_fence_raise(led, db_url):
    """One thread claims under F1 in a loop, another raises to F2 meanwhile.

    "Times" come from one strictly increasing counter shared by both threads,
    so "after the raise committed" is exact: no F1 tick may carry a claim stamp
    taken after raise_fence returned, and every claim attempt either wrote its
    whole batch or was refused whole. And the F1 ticks the raiser sees right
    after its raise committed are all there will ever be: no F1 write may
    commit after the raise (batches are large so that, without the fence
    row's share lock, some claim would be caught mid-transaction).
    """
    engine_a, engine_b = make_engine(db_url), make_engine(db_url)
    counter, lock = itertools.count(1_000_000), threading.Lock()

    def stamp() -> int:
        with lock:
            return next(counter)

    attempts: list[tuple[int, list[SlotClaim], object]] = []  # (stamp, batch, outcome)
    raised_at: list[int] = []
    f1_at_raise: set[tuple[str, int]] = set()
    warmed_up = threading.Event()

    def claimer() -> None:
        deadline = time.monotonic() + 20
        fenced_out = 0
        while fenced_out < 3 and time.monotonic() < deadline:
            now = stamp()
            batch = [SlotClaim(f"job{k}", now) for k in range(200)]
            try:
                outcome = claim_ticks(engine_a, batch, shard=0, fence=F1, node_id=NODE_A, now_ms=now)
            except FencedOut as e:
                outcome = e
                fenced_out += 1
            attempts.append((now, batch, outcome))
            if len(attempts) == 5:
                warmed_up.set()

    def raiser() -> None:
        warmed_up.wait(20)
        raise_fence(engine_b, 0, F2, NODE_B, stamp())
        raised_at.append(stamp())
        f1_at_raise.update((t.job_id, t.scheduled_at_ms) for t in ticks_between(engine_b, 0, 2**62))

    threads = [threading.Thread(target=claimer), threading.Thread(target=raiser)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        engine_a.dispose()
        engine_b.dispose()
    assert raised_at, "the raise never completed"
    raise_done = raised_at[0]

    succeeded = [(now, batch, got) for now, batch, got in attempts if not isinstance(got, FencedOut)]
    refused = [(now, batch, e) for now, batch, e in attempts if isinstance(e, FencedOut)]
    assert succeeded and refused
    for now, batch, got in succeeded:
        assert got == [SlotRef(c.job_id, c.scheduled_at_ms) for c in batch], "a claim half succeeded"
        assert now < raise_done
    for _, _, e in refused:
        assert e.current == F2
    # Once refused, refused for good.
    first_refusal = attempts.index(next(a for a in attempts if isinstance(a[2], FencedOut)))
    assert all(isinstance(a[2], FencedOut) for a in attempts[first_refusal:])

    rows = ticks_between(led, 0, 2**62)
    assert {(t.job_id, t.scheduled_at_ms) for t in rows} == {
        (c.job_id, c.scheduled_at_ms) for _, batch, _ in succeeded for c in batch
    }
    assert all(t.fence == F1 and t.claimed_at_ms < raise_done for t in rows)
    assert {(t.job_id, t.scheduled_at_ms) for t in rows} == f1_at_raise, "an F1 claim committed after the raise"


def test_concurrent_claims_of_the_same_slots_give_each_slot_to_one_caller(led, db_url):
    """Two transactions of one leader (the fence lock is shared) racing on the same slots."""
    engines = [make_engine(db_url) for _ in range(2)]
    slots = [SlotClaim(f"job{k % 7}", 60_000 * k) for k in range(300)]
    won: list[list[SlotRef]] = [[], []]
    go = threading.Barrier(2)

    def claimer(i: int) -> None:
        go.wait(10)
        for start in range(0, len(slots), 30):
            # Overlapping windows, so the two meet on many keys.
            batch = slots[max(0, start - 15) : start + 30]
            won[i] += claim_ticks(engines[i], batch, shard=0, fence=F1, node_id=f"w{i}", now_ms=start)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        for e in engines:
            e.dispose()
    all_won = won[0] + won[1]
    assert len(all_won) == len(set(all_won)) == len(slots), "a slot was claimed twice, or not at all"


def test_concurrent_ensure_schema_on_an_empty_database(db_url):
    engines = [make_engine(db_url) for _ in range(3)]
    errors: list[BaseException] = []

    def start(engine) -> None:
        try:
            ensure_schema(engine, auto_upgrade=False)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=start, args=(e,)) for e in engines]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert current_revision(engines[0]) == head_revision()
    finally:
        for e in engines:
            e.dispose()


# -- jobs -------------------------------------------------------------------------------


def test_put_job_versions_and_conflicts(led):
    j = make_job("nightly", labels={"team": "data"})
    first = put_job(led, j, now_ms=1_000, expected_version=0, **A)
    assert (first.version, first.active_since_ms) == (1, 1_000)
    assert get_job(led, "nightly") == first

    with pytest.raises(VersionConflict) as e:
        put_job(led, j, now_ms=2_000, expected_version=0, **A)
    assert (e.value.expected, e.value.actual) == (0, 1)
    with pytest.raises(VersionConflict):
        put_job(led, j, now_ms=2_000, expected_version=5, **A)

    second = put_job(led, replace(j, labels={"team": "ops"}), now_ms=3_000, expected_version=1, **A)
    third = put_job(led, j, now_ms=4_000, **A)  # no expectation: any version
    assert (second.version, third.version, third.active_since_ms) == (2, 3, 4_000)
    assert get_job(led, "nightly") == third
    assert list_jobs(led, labels={"team": "ops"}) == []
    assert [x.id for x in list_jobs(led, labels={"team": "data"})] == ["nightly"]

    with pytest.raises(VersionConflict) as e:
        put_job(led, make_job("missing"), now_ms=5_000, expected_version=3, **A)
    assert e.value.actual == 0
    with pytest.raises(JobNotFound):
        get_job(led, "missing")


def test_job_ids_compare_exactly_on_every_database(led):
    ids = ["Nightly", "nightly", "nightly ", "naïve", "naive", "x" * 256, "€" * 85 + "x"]  # the last: 256 bytes
    for job_id in ids:
        put_job(led, make_job(job_id), now_ms=1_000, **A)
    assert sorted(j.id for j in load_shard_jobs(led, 0)) == sorted(ids)
    for job_id in ids:
        assert get_job(led, job_id).id == job_id
    claim = [SlotClaim(job_id, 60_000) for job_id in ids]
    assert len(claim_ticks(led, claim, now_ms=1_000, **A)) == len(ids)


def test_label_too_long_is_an_invalid_job(led):
    with pytest.raises(InvalidJob):
        put_job(led, make_job("j", labels={"k": "v" * 257}), now_ms=1, **A)


def test_set_paused_and_active_since(led):
    put_job(led, make_job("j"), now_ms=1_000, **A)
    paused = set_paused(led, "j", True, now_ms=2_000, **A)
    assert (paused.paused, paused.version, paused.active_since_ms) == (True, 2, 1_000)
    assert set_paused(led, "j", True, now_ms=2_500, **A) == paused  # already paused: nothing changes
    resumed = set_paused(led, "j", False, now_ms=3_000, **A)
    # The paused time is not owed as backlog: the job is active from its resume.
    assert (resumed.paused, resumed.version, resumed.active_since_ms) == (False, 3, 3_000)
    assert get_job(led, "j") == resumed
    with pytest.raises(JobNotFound):
        set_paused(led, "nope", True, now_ms=1, **A)


def test_import_jobs_writes_only_what_changed(led):
    jobs = [make_job(f"j{i}", labels={"n": str(i)}) for i in range(5)]
    assert import_jobs(led, jobs, now_ms=1_000, **A) == 5
    assert import_jobs(led, jobs, now_ms=2_000, **A) == 0  # unchanged file: no write, backlog kept
    assert {j.version for j in load_shard_jobs(led, 0)} == {1}

    put_job(led, replace(jobs[0], timeout_ms=5_000), now_ms=2_500, **A)  # edited through the API
    changed = [replace(jobs[1], labels={"n": "one"}), *jobs[2:], make_job("j9")]
    assert import_jobs(led, [jobs[0], *changed], now_ms=3_000, **A) == 3  # j0 reverted, j1 changed, j9 new
    got = {j.id: j for j in load_shard_jobs(led, 0)}
    assert (got["j0"].version, got["j0"].timeout_ms, got["j0"].active_since_ms) == (3, jobs[0].timeout_ms, 3_000)
    assert (got["j1"].version, got["j1"].labels) == (2, {"n": "one"})
    assert (got["j2"].version, got["j2"].active_since_ms) == (1, 1_000)
    assert got["j9"].version == 1
    assert [j.id for j in list_jobs(led, labels={"n": "one"})] == ["j1"]
    assert list_jobs(led, labels={"n": "1"}) == []


def test_a_reimport_does_not_undo_a_pause_made_through_the_api(led):
    jobs = [make_job("j")]
    import_jobs(led, jobs, now_ms=1_000, **A)
    set_paused(led, "j", True, now_ms=2_000, **A)
    assert import_jobs(led, jobs, now_ms=3_000, **A) == 0  # the file says paused = false; the pause stands
    assert get_job(led, "j").paused is True
    assert import_jobs(led, [replace(jobs[0], timeout_ms=7_000)], now_ms=4_000, **A) == 1
    assert (get_job(led, "j").paused, get_job(led, "j").timeout_ms) == (True, 7_000)


def test_import_validate_only_answers_as_the_write_and_leaves_the_store_as_it_was(led):
    import_jobs(led, [make_job("kept"), make_job("edited")], now_ms=1_000, **A)
    batch = {0: (F1, [make_job("kept"), make_job("edited", timeout="7s"), make_job("new")])}
    before = snapshot(led)
    checked = import_jobs_many(led, batch, node_id=NODE_A, now_ms=2_000, validate_only=True)
    assert snapshot(led) == before, "a validation wrote something"
    written = import_jobs_many(led, batch, node_id=NODE_A, now_ms=2_000)
    assert checked == written  # the same answer, job by job: version, unchanged, refusals
    assert {k: (i.job.version, i.unchanged) for k, i in written.written.items()} == {
        "kept": (1, True),
        "edited": (2, False),
        "new": (1, False),
    }


def test_delete_job_keeps_ticks(led):
    put_job(led, make_job("j", labels={"a": "b"}), now_ms=1_000, **A)
    claim_ticks(led, [SlotClaim("j", 60_000)], now_ms=1_000, **A)
    delete_job(led, "j", shard=0, fence=F1)
    with pytest.raises(JobNotFound):
        get_job(led, "j")
    with pytest.raises(JobNotFound):
        delete_job(led, "j", shard=0, fence=F1)
    assert list_jobs(led, labels={"a": "b"}) == []
    assert [t.scheduled_at_ms for t in list_ticks(led, "j")] == [60_000]


def test_list_jobs_pages_and_filters(led):
    raise_fence(led, 1, F1, NODE_A, 1_000)
    for i in range(7):
        labels = {"env": "prod" if i % 2 else "dev", "tier": "web"}
        put_job(led, make_job(f"job{i:02d}", labels=labels), now_ms=1_000, shard=i % 2, fence=F1, node_id=NODE_A)

    pages, after = [], None
    while page := list_jobs(led, limit=3, after_id=after):
        pages.append([j.id for j in page])
        after = page[-1].id
    assert pages == [["job00", "job01", "job02"], ["job03", "job04", "job05"], ["job06"]]

    assert [j.id for j in list_jobs(led, shard=1)] == ["job01", "job03", "job05"]
    assert [j.id for j in list_jobs(led, labels={"env": "prod", "tier": "web"})] == ["job01", "job03", "job05"]
    assert [j.id for j in list_jobs(led, labels={"env": "prod"}, after_id="job01", limit=1)] == ["job03"]
    assert list_jobs(led, labels={"env": "prod", "tier": "db"}) == []
    assert count_jobs_by_shard(led) == {0: 4, 1: 3}


# -- ticks ------------------------------------------------------------------------------


def test_a_slot_is_claimed_once(led):
    assert claim_ticks(led, [SlotClaim("j", 60_000)], now_ms=1_000, **A) == [SlotRef("j", 60_000)]
    assert claim_ticks(led, [SlotClaim("j", 60_000)], now_ms=2_000, **A) == []
    # Duplicates in one batch, mixed with an old slot: the new ones come back, once, in order.
    got = claim_ticks(
        led,
        [SlotClaim("j", 180_000), SlotClaim("j", 60_000), SlotClaim("j", 120_000), SlotClaim("j", 180_000)],
        now_ms=3_000,
        **A,
    )
    assert got == [SlotRef("j", 180_000), SlotRef("j", 120_000)]
    rows = list_ticks(led, "j")
    assert [(t.scheduled_at_ms, t.status, t.attempt, t.claimed_at_ms) for t in rows] == [
        (180_000, TickStatus.CLAIMED, 0, 3_000),
        (120_000, TickStatus.CLAIMED, 0, 3_000),
        (60_000, TickStatus.CLAIMED, 0, 1_000),
    ]


def test_claiming_thousands_of_slots(led):
    first = [SlotClaim(f"job{i % 100}", 60_000 * i) for i in range(5_000)]
    t0 = time.monotonic()
    assert len(claim_ticks(led, first, now_ms=1, **A)) == 5_000
    overlapping = first[2_500:] + [SlotClaim(f"job{i % 100}", 60_000 * i) for i in range(5_000, 7_500)]
    got = claim_ticks(led, overlapping, now_ms=2, **A)
    assert got == [SlotRef(c.job_id, c.scheduled_at_ms) for c in overlapping[2_500:]]
    assert time.monotonic() - t0 < 15  # seconds; a round trip per row would blow it on the servers


def test_skip_ticks(led):
    claim_ticks(led, [SlotClaim("j", 60_000)], now_ms=1_000, **A)
    got = skip_ticks(led, [SlotClaim("j", 60_000), SlotClaim("j", 120_000)], now_ms=2_000, reason="catch-up", **A)
    assert got == [SlotRef("j", 120_000)]
    t = list_ticks(led, "j")[0]
    assert (t.status, t.error, t.finished_at_ms, t.fence, t.node_id) == (
        TickStatus.SKIPPED,
        "catch-up",
        2_000,
        F1,
        NODE_A,
    )
    assert list_ticks(led, "j")[1].status is TickStatus.CLAIMED  # left untouched


def test_last_ticks_ignores_manual_runs(led):
    for j in ("a", "b", "c"):
        put_job(led, make_job(j), now_ms=1, **A)
    claim_ticks(led, [SlotClaim("a", 60_000), SlotClaim("a", 120_000), SlotClaim("b", 60_000)], now_ms=1, **A)
    claim_ticks(led, [SlotClaim("a", 150_000, manual=True), SlotClaim("c", 90_000, manual=True)], now_ms=2, **A)
    raise_fence(led, 1, F1, NODE_A, 1)
    put_job(led, make_job("other-shard"), shard=1, fence=F1, node_id=NODE_A, now_ms=3)
    claim_ticks(led, [SlotClaim("other-shard", 600_000)], shard=1, fence=F1, node_id=NODE_A, now_ms=3)
    assert last_ticks(led, 0) == {"a": 120_000, "b": 60_000}
    assert last_ticks(led, 1) == {"other-shard": 600_000}
    assert [t.manual for t in list_ticks(led, "a")] == [True, False, False]  # newest first


def test_running_results_and_the_tick_fence(led):
    s1, s2, s3 = SlotRef("j", 60_000), SlotRef("j", 120_000), SlotRef("j", 180_000)
    claim_ticks(led, [SlotClaim("j", 60_000), SlotClaim("j", 120_000)], now_ms=1_000, **A)
    raise_fence(led, 0, F2, NODE_B, 2_000)
    claim_ticks(led, [SlotClaim("j", 180_000)], shard=0, fence=F2, node_id=NODE_B, now_ms=2_000)

    # Under F2, rows still carrying F1 are not B's to update until taken over.
    mark_running(led, [(s1, 1, 2_100), (s3, 1, 2_100)], shard=0, fence=F2)
    assert [t.status for t in unresolved_ticks(led, 0)] == [TickStatus.CLAIMED, TickStatus.CLAIMED, TickStatus.RUNNING]

    failed = ExecutionResult(ok=False, started_at_ms=2_100, finished_at_ms=2_200, exit_code=3, error="exit 3")
    record_results(led, [(s3, 1, failed, TickStatus.RUNNING)], shard=0, fence=F2)  # a retry follows
    t = list_ticks(led, "j")[0]
    assert (t.status, t.attempt, t.exit_code, t.error, t.finished_at_ms) == (TickStatus.RUNNING, 1, 3, "exit 3", None)

    done = ExecutionResult(ok=True, started_at_ms=2_300, finished_at_ms=2_400, http_status=200, output="fine")
    record_results(led, [(s3, 2, done, TickStatus.SUCCEEDED), (s1, 1, done, TickStatus.SUCCEEDED)], shard=0, fence=F2)
    t = list_ticks(led, "j")[0]
    assert (t.status, t.attempt, t.started_at_ms, t.finished_at_ms, t.http_status, t.output, t.error) == (
        TickStatus.SUCCEEDED,
        2,
        2_300,
        2_400,
        200,
        "fine",
        None,
    )
    assert list_ticks(led, "j")[2].status is TickStatus.CLAIMED  # s1 kept F1: untouched

    # A final status does not move again.
    record_results(led, [(s3, 3, failed, TickStatus.FAILED)], shard=0, fence=F2)
    mark_running(led, [(s3, 3, 9_000)], shard=0, fence=F2)
    assert list_ticks(led, "j")[0].status is TickStatus.SUCCEEDED
    assert {t.slot for t in unresolved_ticks(led, 0)} == {s1, s2}


def test_a_batch_that_names_a_tick_twice_applies_both_in_order(led):
    # A failed attempt and its retry's result can be written in one batch; the
    # retry's result must win, and a final status must not be undone by a later
    # mention (PostgreSQL and SQLite write a batch as one statement: see ticks_batch).
    s1, s2 = SlotRef("j", 60_000), SlotRef("j", 120_000)
    claim_ticks(led, [SlotClaim("j", 60_000), SlotClaim("j", 120_000)], now_ms=1_000, **A)
    failed = ExecutionResult(ok=False, started_at_ms=2_100, finished_at_ms=2_200, exit_code=3, error="exit 3")
    done = ExecutionResult(ok=True, started_at_ms=2_300, finished_at_ms=2_400, output="fine")
    record_results(
        led,
        [
            (s1, 1, failed, TickStatus.RUNNING),
            (s2, 1, done, TickStatus.SUCCEEDED),
            (s1, 2, done, TickStatus.SUCCEEDED),
            (s2, 2, failed, TickStatus.RUNNING),
        ],
        shard=0,
        fence=F1,
    )
    by_slot = {t.slot: t for t in list_ticks(led, "j")}
    assert (by_slot[s1].status, by_slot[s1].attempt, by_slot[s1].output) == (TickStatus.SUCCEEDED, 2, "fine")
    assert (by_slot[s2].status, by_slot[s2].attempt, by_slot[s2].error) == (TickStatus.SUCCEEDED, 1, None)


def test_take_over_moves_only_older_unresolved_ticks(led):
    raise_fence(led, 1, F1, NODE_A, 1)
    slots = [SlotClaim("j", 60_000 * i) for i in range(1, 5)]
    claim_ticks(led, slots, now_ms=1_000, **A)
    claim_ticks(led, [SlotClaim("k", 60_000)], shard=1, fence=F1, node_id=NODE_A, now_ms=1_000)
    record_results(led, [(SlotRef("j", 60_000), 1, ok("done"), TickStatus.SUCCEEDED)], shard=0, fence=F1)
    mark_running(led, [(SlotRef("j", 120_000), 1, 1_100)], shard=0, fence=F1)
    raise_fence(led, 0, F2, NODE_B, 2_000)
    claim_ticks(led, [SlotClaim("j", 300_000)], shard=0, fence=F2, node_id=NODE_B, now_ms=2_000)

    wanted = [SlotRef("j", 60_000 * i) for i in range(1, 6)] + [SlotRef("k", 60_000), SlotRef("gone", 1)]
    moved = take_over(led, wanted, shard=0, fence=F2, node_id=NODE_B)
    # Not the finished one, not B's own, not shard 1's, not a missing one.
    assert sorted(moved, key=lambda s: s.scheduled_at_ms) == [SlotRef("j", 60_000 * i) for i in (2, 3, 4)]
    by_slot = {t.scheduled_at_ms: t for t in list_ticks(led, "j")}
    assert (by_slot[60_000].fence, by_slot[60_000].node_id) == (F1, NODE_A)
    assert (by_slot[120_000].fence, by_slot[120_000].node_id, by_slot[120_000].status) == (
        F2,
        NODE_B,
        TickStatus.RUNNING,
    )
    assert take_over(led, wanted, shard=0, fence=F2, node_id=NODE_B) == []  # idempotent
    assert list_ticks(led, "k")[0].fence == F1


def test_abandon_ticks(led):
    claim_ticks(led, [SlotClaim("j", 60_000), SlotClaim("j", 120_000)], now_ms=1_000, **A)
    record_results(led, [(SlotRef("j", 60_000), 1, ok(""), TickStatus.SUCCEEDED)], shard=0, fence=F1)
    raise_fence(led, 0, F2, NODE_B, 2_000)
    slots = [SlotRef("j", 60_000), SlotRef("j", 120_000)]
    abandon_ticks(led, slots, shard=0, fence=F2, now_ms=3_000, reason="leader died")
    new, old = list_ticks(led, "j")
    assert (new.status, new.error, new.finished_at_ms) == (TickStatus.ABANDONED, "leader died", 3_000)
    assert old.status is TickStatus.SUCCEEDED
    assert unresolved_ticks(led, 0) == []


def test_output_is_cut_at_64_kib_on_a_character_boundary(led):
    claim_ticks(led, [SlotClaim("j", 60_000), SlotClaim("j", 120_000)], now_ms=1, **A)
    # "xx" then 3-byte characters: 64 KiB falls inside one of them.
    long = "xx" + "€" * (OUTPUT_LIMIT_BYTES // 3 + 10)
    exact = "é" * (OUTPUT_LIMIT_BYTES // 2)  # exactly 64 KiB: kept whole
    result = ExecutionResult(ok=False, started_at_ms=1, finished_at_ms=2, output=long, error="e\x00" + "🙂" * 20_000)
    record_results(
        led,
        [
            (SlotRef("j", 60_000), 1, result, TickStatus.FAILED),
            (SlotRef("j", 120_000), 1, ok(exact), TickStatus.SUCCEEDED),
        ],
        shard=0,
        fence=F1,
    )
    second, first = list_ticks(led, "j")
    assert first.output == long[: 2 + (OUTPUT_LIMIT_BYTES - 2) // 3]
    assert len(first.output.encode()) <= OUTPUT_LIMIT_BYTES
    assert first.error.startswith("e\ufffd🙂") and len(first.error.encode()) <= OUTPUT_LIMIT_BYTES
    assert second.output == exact


def test_list_ticks_pages_and_ticks_between(led):
    claim_ticks(led, [SlotClaim("a", 60_000 * i) for i in range(1, 6)], now_ms=1, **A)
    claim_ticks(led, [SlotClaim("b", 90_000)], now_ms=1, **A)
    page = list_ticks(led, "a", limit=2)
    assert [t.scheduled_at_ms for t in page] == [300_000, 240_000]
    page = list_ticks(led, "a", limit=2, before_ms=page[-1].scheduled_at_ms)
    assert [t.scheduled_at_ms for t in page] == [180_000, 120_000]
    window = ticks_between(led, 60_000, 180_000)
    assert [(t.job_id, t.scheduled_at_ms) for t in window] == [("a", 60_000), ("b", 90_000), ("a", 120_000)]
    assert [t.job_id for t in ticks_between(led, 0, 10**9, job_id="b")] == ["b"]


# -- migrations -------------------------------------------------------------------------


def test_ensure_schema_on_an_empty_database(db_url):
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) is None
        ensure_schema(engine, auto_upgrade=False)  # empty: created whatever auto_upgrade says
        assert current_revision(engine) == head_revision()
        ensure_schema(engine, auto_upgrade=False)  # at head: nothing to do
        with engine.connect() as conn:
            # The revisions create exactly what schema.py describes.
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
        assert [d for d in diff if not _is_version_table(d)] == []
    finally:
        engine.dispose()


def _is_version_table(diff) -> bool:
    return diff[0] == "remove_table" and diff[1].name == VERSION_TABLE


def test_a_newer_schema_is_refused(store_engine):
    with store_engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    for auto_upgrade in (True, False):
        with pytest.raises(ConfigError) as e:
            ensure_schema(store_engine, auto_upgrade=auto_upgrade)
        message = str(e.value)
        assert "9999" in message and head_revision() in message and "upgrade shardcron" in message


# -- engines and URLs (no server needed) ------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://shardcron:s3cr3t-pw@127.0.0.1:1/cron",
        "mariadb://shardcron:s3cr3t-pw@127.0.0.1:1/cron",
    ],
    ids=["postgresql", "mariadb"],
)
def test_an_unreachable_store_fails_fast_with_a_masked_url(url):
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable) as e:
        make_engine(url, connect_timeout_s=2)
    message = str(e.value)
    assert time.monotonic() - t0 < 5
    assert "s3cr3t-pw" not in message
    assert "shardcron:***@127.0.0.1:1/cron" in message
    assert "refused" in message.lower()  # the driver's reason
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_an_sqlite_file_that_cannot_be_opened(tmp_path):
    with pytest.raises(StoreUnavailable) as e:
        make_engine(f"sqlite:///{tmp_path}/missing-dir/x.db")
    assert "missing-dir/x.db" in str(e.value)


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("postgresql://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgres://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("mysql://u@h:3306/db", "mysql+pymysql://u@h:3306/db"),
        ("mariadb://u@h/db?ssl=true", "mariadb+pymysql://u@h/db?ssl=true"),
        ("sqlite:///x.db", "sqlite+pysqlite:///x.db"),
    ],
)
def test_urls_are_normalised_to_the_shipped_drivers(given, normalised):
    assert normalise_url(given).render_as_string(hide_password=False) == normalised


def test_foreign_drivers_and_backends_are_refused():
    with pytest.raises(ConfigError, match="psycopg2"):
        normalise_url("postgresql+psycopg2://u@h/db")
    with pytest.raises(ConfigError, match="unsupported"):
        normalise_url("oracle://u:pw@h/db")
    assert describe_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


def test_claims_and_results_for_several_shards_commit_together_except_a_fenced_out_shard(store_engine):
    from shardcron.store.tick_results import record_results_many
    from shardcron.store.ticks import claim_ticks_many

    ensure_shards(store_engine, 3)
    for shard in range(3):
        raise_fence(store_engine, shard, F1, NODE_A, 1)
    raise_fence(store_engine, 2, F2, NODE_B, 2)  # shard 2 moved on to another leader
    batches = {(s, F1): [SlotClaim(f"j{s}", 60_000), SlotClaim(f"j{s}", 61_000)] for s in range(3)}
    out = claim_ticks_many(store_engine, batches, node_id=NODE_A, now_ms=10)
    assert out.fenced_out == {2: F2}
    assert out.written == {
        0: [SlotRef("j0", 60_000), SlotRef("j0", 61_000)],
        1: [SlotRef("j1", 60_000), SlotRef("j1", 61_000)],
    }
    assert [t.job_id for t in ticks_between(store_engine, 0, 10**6)] == ["j0", "j1", "j0", "j1"]
    again = claim_ticks_many(store_engine, {(0, F1): [SlotClaim("j0", 60_000)]}, node_id=NODE_A, now_ms=11)
    assert again.written == {} and again.fenced_out == {}, "an existing slot is never claimed twice"

    ok = ExecutionResult(True, 60_001, 60_002)
    res = record_results_many(
        store_engine,
        {
            (0, F1): [(SlotRef("j0", 60_000), 1, ok, TickStatus.SUCCEEDED)],
            (1, F1): [(SlotRef("j1", 60_000), 1, ok, TickStatus.SUCCEEDED)],
            (2, F1): [(SlotRef("j2", 60_000), 1, ok, TickStatus.SUCCEEDED)],
        },
    )
    assert res.fenced_out == {2: F2}
    done = {(t.job_id, t.scheduled_at_ms): t.status for t in ticks_between(store_engine, 0, 10**6)}
    assert done[("j0", 60_000)] is TickStatus.SUCCEEDED and done[("j1", 60_000)] is TickStatus.SUCCEEDED
    assert done[("j0", 61_000)] is TickStatus.CLAIMED


def test_fenced_work_over_several_shards_is_handed_only_the_live_shards(store_engine):
    from shardcron.store.fences import run_fenced_many
    from shardcron.store.tick_results import record_results_many

    ensure_shards(store_engine, 3)
    for shard in range(3):
        raise_fence(store_engine, shard, F1, NODE_A, 1)
    raise_fence(store_engine, 1, F2, NODE_B, 2)
    given = {(0, F1): "zero", (1, F1): "one, deposed", (1, F2): "one, current", (2, F2): "two, not raised yet"}
    seen = []
    out = run_fenced_many(store_engine, given, lambda conn, live: seen.append(dict(live)) or len(live))
    assert seen == [{(0, F1): "zero", (1, F2): "one, current"}] and out.value == 2
    assert out.fenced_out == {1: F2, 2: F1}, "one place names every refused shard with its stored fence"
    assert [out.is_fenced(*k) for k in given] == [False, True, False, True]

    # The same shard under its old and its new fence in one batch of results: only the new one is written.
    claim_ticks(store_engine, [SlotClaim("j", 60_000)], shard=1, fence=F2, node_id=NODE_B, now_ms=10)
    ok = ExecutionResult(True, 60_001, 60_002)
    res = record_results_many(
        store_engine,
        {
            (1, F1): [(SlotRef("j", 60_000), 1, ok._replace(error="the deposed leader's"), TickStatus.FAILED)],
            (1, F2): [(SlotRef("j", 60_000), 1, ok, TickStatus.SUCCEEDED)],
        },
    )
    assert res.written == {1: [SlotRef("j", 60_000)]} and res.is_fenced(1, F1) and not res.is_fenced(1, F2)
    [t] = list_ticks(store_engine, "j")
    assert (t.status, t.fence, t.error) == (TickStatus.SUCCEEDED, F2, None)


def test_nodes_opening_a_new_sqlite_file_together_all_get_in(tmp_path):
    """Each switches the new file to WAL, which SQLite refuses at once ("database is locked") while another
    connection does the same, instead of waiting: make_engine tries again until its busy timeout."""
    for attempt in range(10):
        url = f"sqlite:///{tmp_path}/new-{attempt}.db"
        start = threading.Barrier(8, timeout=60)
        errors: list[Exception] = []

        def open_it():
            start.wait()
            try:
                make_engine(url).dispose()  # make_engine connects once, as a node's start does
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                errors.append(e)

        threads = [threading.Thread(target=open_it) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == [], f"attempt {attempt}: {errors[0]}"
