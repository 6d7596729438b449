"""Namespaces in the store, on every database: management, and usage kept exact by the job write paths
(put, replace faster or slower, delete, PutJobs admitting in order), quotas that refuse only growth,
and two leaders racing for a namespace's last room."""

from __future__ import annotations

import threading
from dataclasses import replace
from fractions import Fraction

import pytest

from shardcron.errors import JobNotFound, NamespaceExists, NamespaceMissing, NamespaceNotFound, QuotaRefused
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.rules.quotas import PutChange, Quota
from shardcron.spec.job import job_from_dict
from shardcron.spec.namespaces import store_key
from shardcron.store import ensure_schema, ensure_shards, job_reads, raise_fence
from shardcron.store import jobs as js
from shardcron.store import namespaces as ns

FENCES = {0: 5, 1: 7}  # two shards, each led (fenced) by its own leader


@pytest.fixture
def engine(store_engine):
    ensure_schema(store_engine, auto_upgrade=True)
    ensure_shards(store_engine, 2)
    for shard, fence in FENCES.items():
        raise_fence(store_engine, shard, fence, f"leader-{shard}", 1)
    return store_engine


def job(namespace: str, job_id: str, every: str = "10s"):
    return replace(job_from_dict({"id": job_id, "every": every}), id=store_key(namespace, job_id))


def put(engine, j, shard: int = 0):
    return js.put_job(engine, j, shard=shard, fence=FENCES[shard], node_id=f"leader-{shard}", now_ms=1000)


def usage(engine, name: str) -> tuple[int, Fraction]:
    u = ns.get_namespace(engine, name).usage
    return u.jobs, u.slots_per_second


def create(engine, name: str, **quota) -> None:
    ns.create_namespace(engine, name, NamespaceSettings(1.0, Quota(**quota)), node_id="n1", now_ms=1000)


def test_create_get_list_update_delete(engine):
    assert [n.name for n in ns.list_namespaces(engine)] == ["default"]
    created = ns.create_namespace(
        engine, "team-a", NamespaceSettings(2.0, Quota(max_jobs=5)), node_id="n1", now_ms=1000
    )
    assert (created.settings.weight, created.settings.quota.max_jobs, created.usage.jobs) == (2.0, 5, 0)
    with pytest.raises(NamespaceExists, match="namespace 'team-a' already exists"):
        create(engine, "team-a")
    with pytest.raises(NamespaceExists):
        create(engine, "default")
    updated = ns.update_namespace(
        engine,
        "team-a",
        weight=3.0,
        quota={"max_slots_per_second": Fraction(10, 3), "max_jobs": None},
        node_id="n2",
        now_ms=2000,
    )
    assert updated.settings == NamespaceSettings(3.0, Quota(None, Fraction(10, 3), None))
    assert (updated.created_at_ms, updated.updated_at_ms) == (1000, 2000)
    got = ns.get_namespace(engine, "team-a")
    assert got.settings.quota.max_slots_per_second == Fraction(10, 3)  # exact, not 3.333...
    assert ns.namespace_settings(engine)["team-a"] == got.settings
    with pytest.raises(NamespaceNotFound, match="namespace 'team-b' not found"):
        ns.update_namespace(engine, "team-b", weight=1.0, node_id="n1", now_ms=1)
    with pytest.raises(ns.NamespaceInUse, match="'default' cannot be deleted"):
        ns.delete_namespace(engine, "default")
    ns.delete_namespace(engine, "team-a")
    with pytest.raises(NamespaceNotFound):
        ns.get_namespace(engine, "team-a")
    with pytest.raises(NamespaceNotFound):
        ns.delete_namespace(engine, "team-a")


@pytest.mark.parametrize("weight", [0, -1, float("nan"), float("inf"), 2e6])
def test_a_weight_must_be_a_positive_number(engine, weight):
    with pytest.raises(ns.InvalidJob, match="weight: must be a number above 0"):
        ns.create_namespace(engine, "team-a", NamespaceSettings(weight), node_id="n1", now_ms=1)


def test_default_always_exists_and_counts_its_jobs(engine):
    put(engine, job("default", "a", "1s"))
    from shardcron.store.engine import writing
    from shardcron.store.schema import namespaces

    with writing(engine) as conn:  # as in a store whose row went missing
        conn.execute(namespaces.delete())
    assert usage(engine, "default") == (1, 1)  # re-made with the usage of the jobs there are
    put(engine, job("default", "b", "2s"))
    assert usage(engine, "default") == (2, Fraction(3, 2))


def test_a_put_into_a_namespace_never_created_is_refused(engine):
    with pytest.raises(NamespaceMissing, match="create it first with `shardcron namespaces create team-x`"):
        put(engine, job("team-x", "a"))
    assert job_reads.list_jobs(engine) == []


def test_usage_follows_put_replace_and_delete(engine):
    create(engine, "team-a")
    put(engine, job("team-a", "a", "10s"))
    assert usage(engine, "team-a") == (1, Fraction(1, 10))
    put(engine, job("team-a", "a", "1s"))  # replaced with a faster schedule: its rate, not one more job
    assert usage(engine, "team-a") == (1, 1)
    put(engine, job("team-a", "b", "3s"), shard=1)
    assert usage(engine, "team-a") == (2, Fraction(4, 3))
    put(engine, job("team-a", "a", "1m"))  # slower
    assert usage(engine, "team-a") == (2, Fraction(1, 60) + Fraction(1, 3))
    js.delete_job(engine, store_key("team-a", "a"), shard=0, fence=FENCES[0])
    assert usage(engine, "team-a") == (1, Fraction(1, 3))
    with pytest.raises(JobNotFound):
        js.delete_job(engine, store_key("team-a", "a"), shard=0, fence=FENCES[0])
    assert usage(engine, "team-a") == (1, Fraction(1, 3))  # a delete of nothing gives nothing back
    assert usage(engine, "default") == (0, 0)  # other namespaces are untouched
    assert ns.count_jobs(engine, "team-a") == 1 and ns.job_keys(engine, "team-a") == [store_key("team-a", "b")]


def test_a_cron_croniter_cannot_walk_is_rated_by_its_fields(engine):
    create(engine, "team-a")
    # Admission refuses a cron that never fires; one stored before that rule is still counted.
    never = job_from_dict({"id": "never", "cron": "0 0 30 2 *"}, stored=True)
    put(engine, replace(never, id=store_key("team-a", "never")))
    assert usage(engine, "team-a") == (1, Fraction(1, 86400))  # 30 February: at most daily, never understated


def test_quotas_refuse_growth_with_the_reason(engine):
    create(engine, "team-a", max_jobs=2, max_slots_per_second=Fraction(1))
    put(engine, job("team-a", "a", "2s"))
    put(engine, job("team-a", "b", "4s"), shard=1)
    with pytest.raises(QuotaRefused) as e:
        put(engine, job("team-a", "c", "1h"))
    assert str(e.value) == "namespace 'team-a' would hold 3 jobs; its quota max_jobs is 2"
    assert e.value.exceeded.quota == "max_jobs"
    with pytest.raises(QuotaRefused, match="would admit 1.5 slots per second; its quota max_slots_per_second is 1"):
        put(engine, job("team-a", "b", "1s"), shard=1)
    assert usage(engine, "team-a") == (2, Fraction(3, 4))  # nothing was taken by the refusals


def test_a_lowered_quota_blocks_neither_a_delete_nor_a_slower_replacement(engine):
    create(engine, "team-a")
    for i, every in enumerate(("1s", "1s", "1s")):
        put(engine, job("team-a", f"j{i}", every))
    ns.update_namespace(
        engine, "team-a", quota={"max_jobs": 1, "max_slots_per_second": Fraction(1, 2)}, node_id="n1", now_ms=2000
    )
    put(engine, job("team-a", "j0", "10s"))  # slower: over both limits still, but less so
    assert usage(engine, "team-a") == (3, Fraction(21, 10))
    with pytest.raises(QuotaRefused, match="max_slots_per_second"):
        put(engine, job("team-a", "j0", "5s"))  # faster again: refused
    js.delete_job(engine, store_key("team-a", "j1"), shard=0, fence=FENCES[0])
    assert usage(engine, "team-a") == (2, Fraction(11, 10))
    with pytest.raises(QuotaRefused, match="would hold 3 jobs; its quota max_jobs is 1"):
        put(engine, job("team-a", "new", "1h"))


def test_put_jobs_admits_in_request_order(engine):
    create(engine, "team-a", max_jobs=3, max_slots_per_second=Fraction(5, 2))
    put(engine, job("team-a", "old", "1s"))  # 1 job, 1/s
    batch = [
        job("team-a", "x", "1s"),
        job("team-a", "y", "1s"),
        job("team-a", "z", "1h"),
        job("team-a", "old", "1m"),
        job("default", "d", "1s"),
    ]
    by_shard = {0: (FENCES[0], batch[:2] + batch[3:]), 1: (FENCES[1], batch[2:3])}
    order = {j.id: i for i, j in enumerate(batch)}
    out = js.import_jobs_many(engine, by_shard, node_id="n1", now_ms=1000, order=order)
    # x fits (2 jobs, 2/s); y would make 3/s; z fits (3 jobs); old slows down, which always fits.
    assert sorted(out.written) == sorted(
        store_key(*k) for k in (("team-a", "x"), ("team-a", "z"), ("team-a", "old"), ("default", "d"))
    )
    assert list(out.refused) == [store_key("team-a", "y")]
    assert "would admit 3 slots per second" in str(out.refused[store_key("team-a", "y")])
    assert usage(engine, "team-a") == (3, 1 + Fraction(1, 3600) + Fraction(1, 60))
    assert usage(engine, "default") == (1, 1)
    again = js.import_jobs_many(engine, by_shard, node_id="n1", now_ms=2000, order=order)
    assert again.written["d"].unchanged and list(again.refused) == [store_key("team-a", "y")]
    assert usage(engine, "team-a") == (3, 1 + Fraction(1, 3600) + Fraction(1, 60))  # unchanged jobs take nothing


def test_put_each_answers_each_put_and_counts_repeats_of_one_job_once(engine):
    create(engine, "team-a", max_jobs=1)
    puts = [
        js.Put(job("team-a", "a", "1s"), 0, FENCES[0]),
        js.Put(job("team-a", "a", "2s"), 0, FENCES[0]),
        js.Put(job("team-a", "b", "1s"), 1, FENCES[1]),
        js.Put(job("team-x", "c"), 1, FENCES[1]),
    ]
    out = js.put_each(engine, puts, node_id="n1", now_ms=1000)
    assert [type(o).__name__ for o in out] == ["Job", "Job", "QuotaRefused", "NamespaceMissing"]
    assert out[1].version == 2
    assert usage(engine, "team-a") == (1, Fraction(1, 2))


def test_take_room_and_give_back_in_a_transaction(engine):
    from shardcron.store.engine import writing

    create(engine, "team-a", max_jobs=1)
    with writing(engine) as conn:
        assert ns.take_room(conn, "team-a", [PutChange(None, Fraction(1)), PutChange(None, Fraction(1))]) == [
            None,
            ns.QuotaExceeded("max_jobs", "team-a", 1, 2),
        ]
    assert usage(engine, "team-a") == (1, 1)
    with writing(engine) as conn:
        ns.give_back(conn, "team-a", [Fraction(1)])
    assert usage(engine, "team-a") == (0, 0)
    with pytest.raises(NamespaceMissing), writing(engine) as conn:
        ns.take_room(conn, "team-x", [PutChange(None, Fraction(1))])


def _import(engine, j, shard: int):
    """A PutJobs' write of one job: its refusal raised, as put_job raises it."""
    out = js.import_jobs_many(engine, {shard: (FENCES[shard], [j])}, node_id=f"leader-{shard}", now_ms=1000)
    if out.refused:
        raise out.refused[j.id]
    return out.written[j.id]


@pytest.mark.parametrize("write", [put, _import], ids=["put", "put_jobs"])
def test_two_leaders_racing_for_the_last_room_exactly_one_wins(engine, write):
    """Each round: one room left; the leaders of shards 0 and 1 put a new job each at the same moment."""
    create(engine, "team-a", max_jobs=1)
    for round_ in range(4):
        start = threading.Barrier(2)
        answers: dict[int, object] = {}

        def racer(shard: int):
            start.wait(30)
            try:
                answers[shard] = write(engine, job("team-a", f"r{round_}-{shard}"), shard)
            except QuotaRefused as e:
                answers[shard] = e

        threads = [threading.Thread(target=racer, args=(s,)) for s in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(answers) == 2, answers
        won = [s for s, a in answers.items() if not isinstance(a, QuotaRefused)]
        assert len(won) == 1, answers
        assert usage(engine, "team-a") == (1, Fraction(1, 10)) and ns.count_jobs(engine, "team-a") == 1
        js.delete_job(engine, store_key("team-a", f"r{round_}-{won[0]}"), shard=won[0], fence=FENCES[won[0]])
