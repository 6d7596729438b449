"""``shardcron audit`` against real SQLite, PostgreSQL and MariaDB stores.

Histories are written with the store's own fenced functions (put_job,
claim_ticks, mark_running, record_results, skip_ticks, raise_fence, ...), at
chosen times, so each test knows exactly what the audit must find.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardcron import clock
from shardcron.audit import FindingKind, run_audit
from shardcron.cli import admin as admin_cli
from shardcron.coordination.etcd import Etcd
from shardcron.model import CatchUp, ExecutionResult, SlotRef, TickStatus
from shardcron.rules.policies import OVERLAP_SKIP_REASON, plan_catch_up
from shardcron.spec.job import job_from_dict
from shardcron.store import (
    SlotClaim,
    abandon_ticks,
    claim_ticks,
    delete_job,
    ensure_shards,
    mark_running,
    put_job,
    raise_fence,
    record_results,
    set_paused,
    skip_ticks,
    take_over,
)
from shardcron.store.engine import make_engine
from tests.support.commands import admin_command as shardcron

S = 1000
F1, F2 = 100, 200
NODE_A, NODE_B = "node-a", "node-b"
# Ten minutes ago, on a whole minute: histories are in the past, as the audit expects.
T0 = (clock.wall_ms() // 60_000) * 60_000 - 10 * 60_000
LATER = T0 + 120 * S  # "now" for run_audit: every slot of the first minute is over a minute old


def at(*seconds: int) -> list[int]:
    return [T0 + s * S for s in seconds]


def window(start_s: int = 0, end_s: int = 60) -> list[str]:
    return ["--from", str(T0 + start_s * S), "--to", str(T0 + end_s * S)]


@pytest.fixture
def store(store_engine):
    """4 shards; shard 0 led by node A under F1 since a minute before T0, shard 1 by B under F1."""
    ensure_shards(store_engine, 4)
    raise_fence(store_engine, 0, F1, NODE_A, T0 - 60 * S)
    raise_fence(store_engine, 1, F1, NODE_B, T0 - 60 * S)
    return store_engine


def add_job(engine, job_id: str, shard: int = 0, *, node: str = NODE_A, **fields):
    spec = {"id": job_id, **fields}
    if "cron" not in spec:
        spec["every"] = "1s"
    job = job_from_dict(spec)
    return put_job(engine, job, shard=shard, fence=F1, node_id=node, now_ms=T0)


def run(
    engine,
    job_id: str,
    slots: list[int],
    *,
    shard: int = 0,
    fence: int = F1,
    node: str = NODE_A,
    claimed_at: int | None = None,
    final: bool = True,
) -> None:
    """Claim ``slots`` (one lookahead second ahead, or at ``claimed_at``), mark them running
    at their slot, and record success (or leave them running)."""
    if not slots:
        return
    kw = dict(shard=shard, fence=fence)
    claims = [SlotClaim(job_id, s) for s in slots]
    got = claim_ticks(engine, claims, node_id=node, now_ms=claimed_at or slots[0] - S, **kw)
    assert len(got) == len(slots)
    mark_running(engine, [(SlotRef(job_id, s), 1, s) for s in slots], **kw)
    if final:
        record_results(
            engine,
            [(SlotRef(job_id, s), 1, ExecutionResult(True, s, s + 5), TickStatus.SUCCEEDED) for s in slots],
            **kw,
        )


def seconds(first: int, last: int) -> range:
    return range(first, last + 1)


# -- what the audit finds ----------------------------------------------------------------------


def test_a_clean_history_audits_clean(store, db_url):
    add_job(store, "every-second")
    run(store, "every-second", at(*seconds(1, 60)))
    manual = SlotRef("every-second", T0 + 12_345)  # a manual run: no slot, not owed, not a duplicate
    claim_ticks(
        store,
        [SlotClaim(manual.job_id, manual.scheduled_at_ms, manual=True)],
        shard=0,
        fence=F1,
        node_id=NODE_A,
        now_ms=manual.scheduled_at_ms,
    )
    record_results(
        store, [(manual, 1, ExecutionResult(True, T0 + 12_345, T0 + 12_400), TickStatus.SUCCEEDED)], shard=0, fence=F1
    )

    add_job(store, "every-5s-cron", cron="*/5 * * * * *")
    run(store, "every-5s-cron", at(*range(5, 61, 5)))

    # An outage from 21 s to 40 s; the leader back at 40.5 s records, per catch-up
    # NONE with a 10 s window, skipped rows for 31..40 and nothing for 21..30.
    add_job(store, "caught-up", catchup="none", catchup_window="10s")
    run(store, "caught-up", at(*seconds(1, 20)))
    back = T0 + 40_500
    plan = plan_catch_up(CatchUp.NONE, 10 * S, at(*seconds(21, 40)), back)
    skip_ticks(
        store,
        [SlotClaim("caught-up", s) for s in plan.skip],
        shard=0,
        fence=F1,
        node_id=NODE_A,
        now_ms=back,
        reason="catch-up policy",
    )
    run(store, "caught-up", at(*seconds(41, 60)))

    add_job(store, "paused")
    run(store, "paused", at(*seconds(1, 20)))
    set_paused(store, "paused", True, shard=0, fence=F1, node_id=NODE_A, now_ms=T0 + 20_500)

    add_job(store, "deleted")
    run(store, "deleted", at(*seconds(1, 10)))
    delete_job(store, "deleted", shard=0, fence=F1)

    report = run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER)
    assert report.clean(), report.to_dict()
    jobs = report.per_job
    assert {j: (s.state, s.slots_checked, s.excused) for j, s in jobs.items()} == {
        "every-second": ("active", 60, 0),
        "every-5s-cron": ("active", 12, 0),
        "caught-up": ("active", 60, 10),
        "paused": ("paused", 20, 0),
        "deleted": ("deleted", 0, 0),
    }
    assert jobs["every-second"].ticks == 61 and jobs["deleted"].ticks == 10
    assert (report.slots_checked, report.excused, report.ticks_checked) == (152, 10, 61 + 12 + 50 + 20 + 10)

    rc, out, err = shardcron("audit", "--db", db_url, *window())
    assert (rc, err) == (0, "")
    assert out.splitlines()[-1] == "clean"
    assert "5 jobs, 152 slots, 153 ticks, 10 missed beyond their catch-up window (excused)" in out

    rc, out, _ = shardcron("audit", "--db", db_url, "--json", *window())
    d = json.loads(out)
    assert rc == 0 and d["clean"] is True and d["slots_checked"] == 152 and d["per_job"]["caught-up"]["excused"] == 10


def test_a_gap_is_missing_and_the_cli_exits_2(store, db_url):
    add_job(store, "gappy")
    run(store, "gappy", at(*seconds(1, 9), *seconds(13, 60)))
    add_job(store, "fine")
    run(store, "fine", at(*seconds(1, 60)))

    report = run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER)
    assert [(f.job_id, f.scheduled_at_ms) for f in report.missing] == [("gappy", s) for s in at(10, 11, 12)]
    assert report.per_job["gappy"].missing == 3 and report.per_job["fine"].missing == 0
    assert not report.clean()

    rc, out, err = shardcron("audit", "--db", db_url, *window())
    assert (rc, err) == (2, "")
    assert "missing slots (no tick row): 3" in out
    assert out.splitlines()[-1] == "FOUND: 3 missing"
    rc, out, _ = shardcron("audit", "--db", db_url, "--limit", "1", *window())
    assert "…and 2 more" in out
    assert shardcron("audit", "--db", db_url, "--job", "fine", *window())[0] == 0
    assert shardcron("audit", "--db", db_url, *window(12, 60))[0] == 0  # the gap is before this window


def test_a_gap_at_the_end_of_the_window_is_judged_by_the_row_after_it(store):
    """Slots 31..40 are owed by a 30 s window when the leader came back at 50.5 s;
    judged against "now" instead, they would look past saving."""
    add_job(store, "lost", catchup_window="30s")
    run(store, "lost", at(*seconds(1, 30)))
    run(store, "lost", at(*seconds(41, 50)), claimed_at=T0 + 50_500)  # the catch-up forgot 31..40
    run(store, "lost", at(*seconds(51, 60)))

    report = run_audit(store, from_ms=T0, to_ms=T0 + 40 * S, now_ms=LATER)
    assert [f.scheduled_at_ms for f in report.missing] == at(*seconds(31, 40))
    assert report.excused == 0


def test_stale_fence_rows_are_found(store, db_url):
    add_job(store, "j")
    run(store, "j", at(*seconds(1, 20)))  # node A, all claimed and run before the raise at 30 s
    # Node A claims 21..25 at 40 s by its clock: after node B raised F2 at 30 s, by B's clock.
    run(store, "j", at(*seconds(21, 25)), claimed_at=T0 + 40 * S, final=False)
    # 26 was claimed before the raise but started at 35 s, after it.
    claim_ticks(store, [SlotClaim("j", T0 + 26 * S)], shard=0, fence=F1, node_id=NODE_A, now_ms=T0 + 25 * S)
    mark_running(store, [(SlotRef("j", T0 + 26 * S), 1, T0 + 35 * S)], shard=0, fence=F1)
    # 27 was claimed before the raise and never started: node B adopts it (its fence becomes F2).
    claim_ticks(store, [SlotClaim("j", T0 + 27 * S)], shard=0, fence=F1, node_id=NODE_A, now_ms=T0 + 26 * S)

    raise_fence(store, 0, F2, NODE_B, T0 + 30 * S)
    b = dict(shard=0, fence=F2)
    assert take_over(store, [SlotRef("j", T0 + 27 * S)], node_id=NODE_B, **b) == [SlotRef("j", T0 + 27 * S)]
    record_results(
        store,
        [(SlotRef("j", T0 + 27 * S), 1, ExecutionResult(True, T0 + 31 * S, T0 + 31 * S), TickStatus.SUCCEEDED)],
        **b,
    )
    abandon_ticks(
        store, [SlotRef("j", s) for s in at(*seconds(21, 26))], now_ms=T0 + 31 * S, reason="the old leader's run", **b
    )  # settled; they keep fence F1
    run(store, "j", at(*seconds(28, 60)), node=NODE_B, fence=F2)

    report = run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER)
    assert (report.missing, report.unresolved, report.duplicates) == ([], [], [])
    assert [(f.scheduled_at_ms, f.fence, f.node_id) for f in report.stale_fence] == [
        (s, F1, NODE_A) for s in at(*seconds(21, 26))
    ]
    assert "claimed at" in report.stale_fence[0].detail and "after fence 200" in report.stale_fence[0].detail
    assert "started at" in report.stale_fence[-1].detail and "claimed" not in report.stale_fence[-1].detail
    assert report.per_job["j"].stale_fence == 6

    # A node clock 10 s fast explains all of it.
    assert run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER, clock_tolerance_ms=10 * S).clean()

    rc, out, _ = shardcron("audit", "--db", db_url, *window())
    assert rc == 2 and "stale fences (written by a deposed leader): 6" in out
    assert shardcron("audit", "--db", db_url, "--clock-tolerance-ms", "10000", *window())[0] == 0


def test_an_old_running_tick_is_unresolved(store, db_url):
    add_job(store, "stuck")
    run(store, "stuck", at(*seconds(1, 9)))
    run(store, "stuck", at(10), final=False)  # running since 10 s, its leader gone
    run(store, "stuck", at(*seconds(11, 60)))

    [f] = run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER).unresolved
    assert (f.job_id, f.scheduled_at_ms, f.status, f.shard, f.fence) == ("stuck", T0 + 10 * S, "running", 0, F1)
    assert "110s after its slot" in f.detail
    # Young, or on a shard a live leader will settle: not a finding.
    assert run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=T0 + 69 * S).clean()
    assert run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER, live_leaders=lambda shard: True).clean()
    assert run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER, grace_ms=200 * S).clean()

    rc, out, _ = shardcron("audit", "--db", db_url, *window())
    assert rc == 2 and "unresolved ticks: 1" in out and "running" in out
    assert shardcron("audit", "--db", db_url, "--grace", "3600", *window())[0] == 0


def test_unresolved_ticks_on_led_shards_are_left_to_their_leader(store, db_url, etcd_server, etcd_prefix):
    """With --etcd, a shard counts as led when its first candidate has proclaimed leadership."""
    etcd = Etcd(etcd_server.endpoints, timeout_s=3.0)
    try:
        lease, _ = etcd.grant(60)
        etcd.put(f"{etcd_prefix}/shard/0/{lease:x}", b'{"node": "node-a", "since_ms": 1}', lease)
        etcd.put(f"{etcd_prefix}/shard/1/{lease:x}", b'{"node": "node-b"}', lease)  # still electing
        live = admin_cli.etcd_live_leaders(etcd_server.endpoints, etcd_prefix)
        assert [live(k) for k in range(3)] == [True, False, False]

        add_job(store, "on-0", shard=0)
        run(store, "on-0", at(*seconds(1, 60)))
        run(store, "on-0", [T0 + 61 * S], final=False)
        add_job(store, "on-1", shard=1, node=NODE_B)
        run(store, "on-1", at(*seconds(1, 60)), shard=1, node=NODE_B)
        run(store, "on-1", [T0 + 61 * S], shard=1, node=NODE_B, final=False)

        etcd_flags = ["--etcd", etcd_server.endpoints, "--prefix", etcd_prefix]
        rc, out, _ = shardcron("audit", "--db", db_url, *window(0, 61), *etcd_flags)
        assert rc == 2 and "unresolved ticks: 1" in out and "on-1" in out and "no live leader" in out
        assert shardcron("audit", "--db", db_url, *window(0, 61), *etcd_flags, "--job", "on-0")[0] == 0
        assert shardcron("audit", "--db", db_url, *window(0, 61), "--job", "on-0")[0] == 2  # no etcd: reported
    finally:
        etcd.close()


def test_overlap_skips_with_no_run_in_flight_are_false_overlap(store, db_url):
    """The re-put bug's trace: a long run covers two skips, then skips go on with nothing running."""
    add_job(store, "stuck-count")
    run(store, "stuck-count", at(*seconds(1, 9)))
    long_run = T0 + 10 * S
    claim_ticks(store, [SlotClaim("stuck-count", long_run)], shard=0, fence=F1, node_id=NODE_A, now_ms=long_run - S)
    mark_running(store, [(SlotRef("stuck-count", long_run), 1, long_run)], shard=0, fence=F1)
    record_results(
        store,
        [(SlotRef("stuck-count", long_run), 1, ExecutionResult(True, long_run, long_run + 2500), TickStatus.SUCCEEDED)],
        shard=0,
        fence=F1,
    )
    for slot in at(*seconds(11, 15)):  # each decided at its slot
        skip_ticks(
            store,
            [SlotClaim("stuck-count", slot)],
            shard=0,
            fence=F1,
            node_id=NODE_A,
            now_ms=slot,
            reason=OVERLAP_SKIP_REASON,
        )
    run(store, "stuck-count", at(*seconds(16, 60)))

    # 11 and 12 overlap the run of 10 (done at 12.5 s), 13 is within the slack; 14 and 15 had nothing to wait for.
    # The window starts after slot 10: the run that covers 11 and 12 is read from before it.
    report = run_audit(store, from_ms=T0 + 10 * S, to_ms=T0 + 60 * S, now_ms=LATER)
    assert [f.scheduled_at_ms for f in report.false_overlap] == at(14, 15)
    assert not (report.missing or report.duplicates or report.stale_fence or report.unresolved)
    assert report.per_job["stuck-count"].false_overlap == 2 and not report.clean()
    assert all(f.kind is FindingKind.FALSE_OVERLAP and f.shard == 0 and f.fence == F1 for f in report.false_overlap)

    rc, out, _ = shardcron("audit", "--db", db_url, *window(10, 60))
    assert rc == 2 and "2 false overlap" in out, out
    assert run_audit(store, from_ms=T0 + 15 * S, to_ms=T0 + 60 * S, now_ms=LATER).clean()


def test_auditing_3000_slots_is_quick(store):
    slots = at(*seconds(1, 60))
    for n in range(50):
        add_job(store, f"job-{n:02}")
    claim_ticks(
        store,
        [SlotClaim(f"job-{n:02}", s) for n in range(50) for s in slots],
        shard=0,
        fence=F1,
        node_id=NODE_A,
        now_ms=T0,
    )
    record_results(
        store,
        [
            (SlotRef(f"job-{n:02}", s), 1, ExecutionResult(True, s, s), TickStatus.SUCCEEDED)
            for n in range(50)
            for s in slots
        ],
        shard=0,
        fence=F1,
    )
    t0 = time.monotonic()
    report = run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER)
    elapsed = time.monotonic() - t0
    assert report.clean() and report.slots_checked == 3000 and report.ticks_checked == 3000
    assert elapsed < 3, f"audit of 3000 slots took {elapsed:.1f}s"


def test_the_default_window_is_the_hour_before_now_minus_the_margin(store, db_url):
    now = clock.wall_ms()
    job = put_job(
        store, job_from_dict({"id": "recent", "every": "1s"}), shard=0, fence=F1, node_id=NODE_A, now_ms=now - 100 * S
    )
    slots = [s for s in range(job.active_since_ms // S * S + S, now + 10 * S, S) if s > job.active_since_ms]
    run(store, "recent", slots)
    rc, out, _ = shardcron("audit", "--db", db_url, "--json")
    d = json.loads(out)
    assert rc == 0 and d["clean"]
    assert now - 30 * S <= d["to_ms"] <= clock.wall_ms() - 30 * S
    assert d["from_ms"] == d["to_ms"] - 3600 * S
    assert 65 <= d["slots_checked"] <= 75  # from 100 s ago up to 30 s ago


# -- what the command refuses ------------------------------------------------------------------


def test_audit_errors_are_one_line_and_exit_1(db_url, tmp_path):
    make_engine(db_url).dispose()  # an empty database (for SQLite: an empty file)
    rc, out, err = shardcron("audit", "--db", db_url, *window())
    assert (rc, out) == (1, "") and "has no shardcron schema" in err and err.count("\n") == 1
    for flags, message in [
        (window(60, 0), "the audit window is empty"),
        (["--from", "yesterday"], "--from: expected ISO-8601"),
        (["--to", "2026-13-01"], "--to: expected ISO-8601"),
    ]:
        rc, out, err = shardcron("audit", "--db", db_url, *flags)
        assert (rc, out) == (1, "") and message in err, (flags, err)
    with pytest.raises(SystemExit) as exited:  # a bad number is a usage error, refused by the parser
        shardcron("audit", "--db", db_url, "--grace", "-1")
    assert exited.value.code == 2
    missing = tmp_path / "nowhere.db"
    rc, _, err = shardcron("audit", "--db", f"sqlite:///{missing}")
    assert rc == 1 and f"no SQLite database at {missing}" in err
    assert not missing.exists()


def test_the_audit_command_through_python_m_shardcron(store, db_url):
    """The installed entry point: exit status 2 and the report on stdout, nothing on stderr."""
    add_job(store, "gappy")
    run(store, "gappy", at(*seconds(1, 29), *seconds(31, 60)))
    proc = subprocess.run(
        [sys.executable, "-m", "shardcron", "audit", "--db", db_url, *window()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert (proc.returncode, proc.stderr) == (2, ""), proc.stderr
    assert "gappy" in proc.stdout and proc.stdout.splitlines()[-1] == "FOUND: 1 missing"
    [f] = run_audit(store, from_ms=T0, to_ms=T0 + 60 * S, now_ms=LATER).missing
    assert (f.kind, f.job_id, f.scheduled_at_ms) == (FindingKind.MISSING, "gappy", T0 + 30 * S)
