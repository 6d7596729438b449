"""A shard's leader prunes its expired ticks (leader/pruner.py): the Scheduler stepped through time by an
injected clock over a real SQLite store (tests/support/stepped_scheduler.py), then the audit over the pruned range."""

from __future__ import annotations

import pytest

from shardcron.audit import run_audit
from shardcron.errors import FencedOut
from shardcron.rules.retention import PruneState
from shardcron.spec.job import job_from_dict
from shardcron.store import raise_fence
from shardcron.store.retention import horizons_of_jobs, shard_horizons_by_shard
from tests.support.stepped_scheduler import FENCE, T0, S


def every_second(job_id: str, **extra):
    return job_from_dict({"id": job_id, "every": "1s", "catchup_window": "2s", **extra})


def run_for(r, seconds: int) -> None:
    for k in range(1, seconds + 1):
        r.at(T0 + k * S)


def prune(r) -> int:
    """Prune shard 0 once the results of the steps so far are written (the recorder lingers 0.1 s for more:
    a history_limit counts finished ticks, and a result still in memory is not one yet)."""
    assert r.scheduler.recorder.flush(0, 30), "the recorder did not write its results"
    return r.scheduler.pruner.prune_shard(r.scheduler.run_of(0))


def test_the_leader_prunes_expired_ticks_and_the_audit_says_pruned(rig):
    r = rig([every_second("a"), every_second("b", history_limit=3)], tick_retention_ms=10 * S)
    run_for(r, 20)
    assert sorted(r.ticks("a")) == list(range(1, 21))

    deleted = prune(r)

    # Retention: slots before now - 10 s go; history_limit 3: b keeps its newest 3.
    assert sorted(r.ticks("a")) == list(range(10, 21))
    assert sorted(r.ticks("b")) == [18, 19, 20]
    assert deleted == 9 + 17
    assert shard_horizons_by_shard(r.engine) == {0: T0 + 10 * S}
    assert horizons_of_jobs(r.engine, ["a", "b"]) == {"a": T0 + 10 * S, "b": T0 + 18 * S}

    # b's history is pruned again only when a tenth of its limit can have come, but at least 10 s apart.
    for k in range(21, 26):
        r.at(T0 + k * S)
    prune(r)
    assert sorted(r.ticks("a")) == list(range(15, 26)) and sorted(r.ticks("b")) == list(range(18, 26))
    for k in range(26, 31):
        r.at(T0 + k * S)
    prune(r)
    assert sorted(r.ticks("b")) == [28, 29, 30]

    report = run_audit(r.engine, from_ms=T0, to_ms=T0 + 30 * S, now_ms=T0 + 30 * S)
    assert report.clean() and not report.missing
    # Below the horizons (a: now - 10 s; b: its oldest kept tick, 28 s) every absent slot is pruned.
    assert (report.pruned, report.per_job["a"].pruned, report.per_job["b"].pruned) == (19 + 27, 19, 27)
    assert report.retention is PruneState.PARTIALLY_PRUNED
    assert run_audit(r.engine, from_ms=T0, to_ms=T0 + 9 * S, now_ms=T0 + 30 * S).retention is PruneState.PRUNED
    # A slot deleted above the horizon is still missing.
    with r.engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM ticks WHERE job_id = 'a' AND scheduled_at_ms = {T0 + 25 * S}")
    report = run_audit(r.engine, from_ms=T0, to_ms=T0 + 30 * S, now_ms=T0 + 30 * S)
    assert [(f.job_id, (f.scheduled_at_ms - T0) // S) for f in report.missing] == [("a", 25)]


def test_pruning_is_fenced_and_ends_with_the_shard(rig):
    r = rig([every_second("a")], tick_retention_ms=1 * S)
    run_for(r, 10)
    run = r.scheduler.run_of(0)
    raise_fence(r.engine, 0, FENCE + 1, "newer-leader", T0 + 10 * S)
    with pytest.raises(FencedOut):
        r.scheduler.pruner.prune_shard(run)
    r.stop.set()  # the shard is lost: its pruning asks nothing more of the store
    assert r.scheduler.pruner.prune_shard(run) == 0
    assert sorted(r.ticks("a")) == list(range(1, 11))
    assert shard_horizons_by_shard(r.engine) == {}


def test_a_shard_turn_is_bounded_in_time(rig, monkeypatch):
    from shardcron.leader import pruner

    r = rig([every_second("a")], tick_retention_ms=1 * S)
    run_for(r, 10)
    run = r.scheduler.run_of(0)
    monkeypatch.setattr(pruner, "TURN_S", 0.0)  # the turn is over before its first batch
    assert r.scheduler.pruner.prune_shard(run) == 0 and sorted(r.ticks("a")) == list(range(1, 11))
    monkeypatch.setattr(pruner, "TURN_S", 5.0)
    assert r.scheduler.pruner.prune_shard(run) == 7  # below now - 2 s (the catch-up window), the newest kept
