"""The soak's checker on hand-made histories: each rule catches its fault, and honest uncertainty is never accused."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.sharding import shard_for
from tests.faults.soak import checker
from tests.faults.soak.history import Delivery, Effect, FenceRaise, History, LeaderSample, Op, StaticJob, TickRow

T0 = 1_800_000_000_000
END = T0 + 20_000
HEAL = T0 + 8_000
SHARDS = 2
TOL = 500
_ids = itertools.count(1)


def row(job, slot, status="succeeded", *, manual=False, fence=1, node="n0", claimed=None, started=None):
    return TickRow(
        job=job,
        slot_ms=slot,
        status=status,
        manual=manual,
        shard=shard_for(job, SHARDS),
        fence=fence,
        node=node,
        attempt=1,
        claimed_at_ms=slot if claimed is None else claimed,
        started_at_ms=slot if started is None else started,
        finished_at_ms=slot + 5,
    )


def op(kind, job, call, ret, outcome="ok", *, spec=None, result=None, args=None):
    return Op(
        id=next(_ids),
        kind=kind,
        job=job,
        node="n0",
        call_ms=call,
        return_ms=ret,
        outcome=outcome,
        spec=spec,
        result=result,
        args=args,
    )


def every(seconds):
    return {"every": f"{seconds}s", "executor": {"kind": "noop"}}


def rows_every(job, seconds, lo, hi):
    """Succeeded rows at each slot of ``every seconds`` in (lo, hi]."""
    step = seconds * 1000
    return [row(job, s) for s in range((lo // step + 1) * step, hi + 1, step)]


def clean_audit():
    return {
        "clean": True,
        "duplicates": [],
        "missing": [],
        "stale_fence": [],
        "unresolved": [],
        "false_overlap": [],
        "notification_missing": [],
    }


def base() -> History:
    """A clean history: static s1 every 1 s, session job every 2 s with its effects, stream job every 2 s with one
    "first" delivery per slot, every shard led right after the heal."""
    statics = [StaticJob(j, {"id": j, **every(n)}, T0 - 60_000) for j, n in (("s1", 1), ("sess", 2), ("strm", 2))]
    ticks = rows_every("s1", 1, T0 - 3000, END) + rows_every("sess", 2, T0, END) + rows_every("strm", 2, T0, END)
    return History(
        seed=1,
        seconds=10,
        ttl_s=4,
        shards=SHARDS,
        clock_tolerance_ms=TOL,
        settle_s=2,
        started_ms=T0,
        heal_ms=HEAL,
        end_ms=END,
        static_jobs=statics,
        session_job="sess",
        stream_job="strm",
        ticks=ticks,
        fences=[FenceRaise(s, 1, "n0", T0 - 60_000) for s in range(SHARDS)],
        effects=[Effect("sess", r.slot_ms, "n0", 1) for r in ticks if r.job == "sess"],
        deliveries=[Delivery("strm", r.slot_ms, 1, 1, "first", r.slot_ms + 10) for r in ticks if r.job == "strm"],
        leaders=[LeaderSample(HEAL + 1000, {s: "n0" for s in range(SHARDS)})],
        audit=clean_audit(),
    )


def with_dyn(h: History, *ops: Op, rows=()) -> History:
    return replace(h, ops=[*h.ops, *ops], ticks=[*h.ticks, *rows])


def without(h: History, job, slot) -> History:
    return replace(h, ticks=[r for r in h.ticks if (r.job, r.slot_ms) != (job, slot)])


def restatus(h: History, job, slot, status) -> History:
    return replace(h, ticks=[replace(r, status=status) if (r.job, r.slot_ms) == (job, slot) else r for r in h.ticks])


def found(report: checker.Report) -> set[str]:
    return {rule for rule, fs in report.findings().items() if fs}


PUT = op("put", "dyn-1", T0 + 1000, T0 + 1200, spec=every(1), result={"paused": False})

CAUGHT = {
    "duplicate row": (
        lambda h: replace(h, ticks=[*h.ticks, row("s1", T0 + 3000, node="n1")]),
        {"duplicates", "audit"},
    ),  # the clean audit did not report it
    "duplicate manual row": (
        lambda h: replace(h, ticks=[*h.ticks, row("s1", T0 + 3500, manual=True), row("s1", T0 + 3500, manual=True)]),
        {"duplicates"},
    ),
    "gap": (lambda h: without(h, "s1", T0 + 5000), {"missing", "audit"}),
    "row never final": (lambda h: restatus(h, "s1", T0 + 5000, "running"), {"not_final"}),
    "paused job ran": (
        lambda h: with_dyn(
            h, PUT, op("pause", "dyn-1", T0 + 5000, T0 + 5100), rows=rows_every("dyn-1", 1, T0 + 1000, END)
        ),
        {"unowed"},
    ),
    "deleted job ran": (
        lambda h: with_dyn(
            h, PUT, op("delete", "dyn-1", T0 + 5000, T0 + 5100), rows=rows_every("dyn-1", 1, T0 + 1000, T0 + 9000)
        ),
        {"unowed"},
    ),
    "old schedule ran": (
        lambda h: with_dyn(
            h, PUT, op("put", "dyn-1", T0 + 5000, T0 + 5100, spec=every(2)), rows=rows_every("dyn-1", 1, T0 + 1000, END)
        ),
        {"unowed"},
    ),
    "fence went backwards": (
        lambda h: replace(h, fences=[*h.fences, FenceRaise(0, 2, "n1", T0 + 5000), FenceRaise(0, 3, "n2", T0 + 3000)]),
        {"fences", "audit"},
    ),  # shard 0's rows after them are stale writes too
    "fence raised twice": (lambda h: replace(h, fences=[*h.fences, FenceRaise(0, 1, "n1", T0)]), {"fences"}),
    "stale write after a newer raise": (
        lambda h: replace(h, fences=[*h.fences, FenceRaise(shard_for("s1", SHARDS), 2, "n1", T0 + 5000)]),
        {"fences", "audit"},
    ),  # s1's rows after T0+5500 stay under fence 1
    "effect applied twice": (
        lambda h: replace(h, effects=[*h.effects, Effect("sess", T0 + 4000, "n1", 1)]),
        {"effects"},
    ),
    "effect for a failed slot": (lambda h: restatus(h, "sess", T0 + 4000, "failed"), {"effects"}),
    "succeeded slot without effect": (
        lambda h: replace(h, effects=[e for e in h.effects if e.slot_ms != T0 + 4000]),
        {"effects"},
    ),
    "stale effect": (
        lambda h: replace(h, effects=[replace(e, fence=0) if e.slot_ms == T0 + 4000 else e for e in h.effects]),
        {"fences"},
    ),
    "consumer acted twice": (
        lambda h: replace(h, deliveries=[*h.deliveries, Delivery("strm", T0 + 4000, 2, 2, "first", T0 + 4100)]),
        {"deliveries"},
    ),
    "deposed leader's message acted on": (lambda h: restatus(h, "strm", T0 + 4000, "skipped"), {"deliveries"}),
    "an abandoned slot acted on twice": (
        lambda h: replace(
            restatus(h, "strm", T0 + 4000, "abandoned"),
            deliveries=[*h.deliveries, Delivery("strm", T0 + 4000, 2, 2, "first", T0 + 4100)],
        ),
        {"deliveries"},
    ),
    "shard not led after heal": (
        lambda h: replace(
            h, leaders=[LeaderSample(HEAL + 1000, {0: "n0", 1: None}), LeaderSample(HEAL + 9000, {0: "n0", 1: "n1"})]
        ),
        {"liveness"},
    ),
    "shard never led after heal": (lambda h: replace(h, leaders=[LeaderSample(HEAL + 1000, None)]), {"liveness"}),
    "job stops after heal": (
        lambda h: replace(h, ticks=[r for r in h.ticks if r.job != "s1" or r.slot_ms < HEAL]),
        {"missing", "liveness", "audit"},
    ),
    "audit reports what the checker does not": (
        lambda h: replace(
            h,
            audit={
                **clean_audit(),
                "clean": False,
                "missing": [{"job_id": "s1", "namespace": "default", "scheduled_at_ms": T0 + 5000}],
            },
        ),
        {"audit"},
    ),
    "audit finds a false overlap": (
        lambda h: replace(
            h,
            audit={
                **clean_audit(),
                "false_overlap": [
                    {"job_id": "s1", "namespace": "default", "scheduled_at_ms": T0 + 5000, "detail": "x"}
                ],
            },
        ),
        {"audit"},
    ),
    "audit missing": (lambda h: replace(h, audit=None), {"audit"}),
    "ok pause of an absent job": (lambda h: with_dyn(h, op("pause", "dyn-9", T0 + 1000, T0 + 1100)), {"model"}),
}


@pytest.mark.parametrize("mutate, expected", CAUGHT.values(), ids=CAUGHT.keys())
def test_each_fault_is_caught(mutate, expected):
    report = checker.check(mutate(base()))
    assert found(report) == expected, report.summary()
    assert not report.ok
    json.dumps(report.to_dict())  # JSON-able whatever it found


def test_a_clean_history_passes():
    report = checker.check(base())
    assert report.ok, report.summary()
    assert report.slots_checked == 20 + 10 + 10
    assert report.time_to_all_led_ms == 1000
    assert report.lateness_ms["max"] == 0
    assert json.loads(json.dumps(report.to_dict()))["ok"] is True
    assert "OK" in report.summary() and report.figures()["gaps"] == 0


# A dyn job put ok over [T0+1000, T0+1200]: its uncertain window is [T0+500, T0+1700].
NOT_ACCUSED = {
    "slot in an ok put's window, row present": ((PUT,), rows_every("dyn-1", 1, T0, END)),
    "slot in an ok put's window, row absent": ((PUT,), rows_every("dyn-1", 1, T0 + 1000, END)),
    "info put: nothing known": (
        (op("put", "dyn-1", T0 + 1000, T0 + 6000, "info", spec=every(1)),),
        [row("dyn-1", T0 + 7000)],
    ),
    "info put: rows are not unowed": (
        (op("put", "dyn-1", T0 + 1000, T0 + 6000, "info", spec=every(1)),),
        rows_every("dyn-1", 1, T0, END),
    ),
    "info delete of an active job: rows may stop": (
        (PUT, op("delete", "dyn-1", T0 + 5000, T0 + 9000, "info")),
        rows_every("dyn-1", 1, T0 + 1000, T0 + 6000),
    ),
    "fail pause: its window only": (
        (PUT, op("pause", "dyn-1", T0 + 5000, T0 + 5100, "fail")),
        [r for r in rows_every("dyn-1", 1, T0 + 1000, END) if r.slot_ms != T0 + 5000],
    ),
    "backfilled slot of a paused job": (
        (
            PUT,
            op("pause", "dyn-1", T0 + 3000, T0 + 3100),
            op("backfill", "dyn-1", T0 + 9000, T0 + 9100, "info", args={"from_ms": T0 + 4000, "to_ms": T0 + 6000}),
        ),
        rows_every("dyn-1", 1, T0 + 1000, T0 + 3000) + [row("dyn-1", T0 + 5000, claimed=T0 + 9050)],
    ),
    "manual rows: not owed, not duplicates, not unowed": (
        (PUT, op("pause", "dyn-1", T0 + 3000, T0 + 3100)),
        rows_every("dyn-1", 1, T0 + 1000, T0 + 3000)
        + [
            row("dyn-1", T0 + 2000, manual=True),
            row("dyn-1", T0 + 6123, manual=True),
            row("s1", T0 + 4000, manual=True),
        ],
    ),
    "a paused job's claimed slot recorded skipped": (
        (PUT, op("pause", "dyn-1", T0 + 3000, T0 + 3100)),
        rows_every("dyn-1", 1, T0 + 1000, T0 + 3000) + [row("dyn-1", T0 + 4000, "skipped")],
    ),
    "an info op of one job leaves another alone": (
        (
            op("put", "dyn-1", T0 + 1000, T0 + 1500, "info", spec=every(1)),
            op("put", "dyn-2", T0 + 1000, T0 + 1200, spec=every(2)),
        ),
        rows_every("dyn-2", 2, T0 + 1000, END),
    ),
}


@pytest.mark.parametrize("ops, rows", NOT_ACCUSED.values(), ids=NOT_ACCUSED.keys())
def test_uncertainty_is_never_accused(ops, rows):
    report = checker.check(with_dyn(base(), *ops, rows=rows))
    assert report.ok, report.summary()


def test_the_uncertain_window_owes_nothing_and_the_rest_is_owed():
    report = checker.check(with_dyn(base(), PUT, rows=rows_every("dyn-1", 1, T0 + 1000, END)))
    assert report.ok and report.slots_checked == 40 + 19  # dyn-1 owes T0+2000 .. END, not T0+1000 (in the window)
    gap = checker.check(with_dyn(base(), PUT, rows=rows_every("dyn-1", 1, T0 + 1000, END - 1000)))
    assert [(f.job, f.slot_ms) for f in gap.missing] == [("dyn-1", END)]


def test_a_put_too_soon_after_an_info_op_settles_nothing():
    info = op("put", "dyn-1", T0 + 1000, T0 + 1500, "info", spec=every(1))
    soon = op("put", "dyn-1", T0 + 3000, T0 + 3100, spec=every(2))
    timeline, _ = checker.build_timeline("dyn-1", [info, soon], TOL)
    assert timeline.certain_at(T0 + 10_000) is None
    late = op("put", "dyn-1", T0 + 1500 + checker.INDETERMINATE_TAIL_S * 1000, T0 + 40_000, spec=every(2))
    timeline, _ = checker.build_timeline("dyn-1", [info, late], TOL)
    assert timeline.certain_at(T0 + 10_000) is None
    assert timeline.certain_at(T0 + 41_000).phase is checker.JobPhase.ACTIVE


@pytest.mark.parametrize(
    "raised_at, claimed_at, stale",
    [
        (T0 + 5000, T0 + 5000 + TOL, False),  # within the tolerance: clock skew
        (T0 + 5000, T0 + 5000 + TOL + 1, True),
        (T0 + 5000, T0 + 4000, False),  # claimed before the newer fence was raised
    ],
)
def test_clock_tolerance_absorbs_skew_in_stale_writes(raised_at, claimed_at, stale):
    rows = [row("s1", T0 + 6000, claimed=claimed_at, started=claimed_at)]
    raises = [FenceRaise(shard_for("s1", SHARDS), 1, "n0", T0), FenceRaise(shard_for("s1", SHARDS), 2, "n1", raised_at)]
    assert bool(checker.find_stale_writes(rows, raises, TOL)) is stale


@pytest.mark.parametrize("higher_at, stale", [(T0 + 5000 - TOL, False), (T0 + 5000 - TOL - 1, True)])
def test_clock_tolerance_absorbs_skew_in_fence_order(higher_at, stale):
    raises = [FenceRaise(0, 1, "n0", T0 + 5000), FenceRaise(0, 2, "n1", higher_at)]
    assert bool(checker.find_fence_order(raises, TOL)) is stale


def test_audit_rows_are_matched_by_job_and_slot():
    h = without(base(), "s1", T0 + 5000)
    h = replace(
        h,
        audit={
            **clean_audit(),
            "clean": False,
            "missing": [{"job_id": "s1", "namespace": "default", "scheduled_at_ms": T0 + 5000}],
        },
    )
    report = checker.check(h)
    assert found(report) == {"missing"}


def test_summary_names_each_rule_with_examples():
    h = base()
    h = replace(h, ticks=[r for r in h.ticks if not (r.job == "s1" and T0 + 2000 <= r.slot_ms <= T0 + 7000)])
    text = checker.check(h).summary()
    assert "missing: 6" in text and "... and 3 more" in text and "service gaps per shard" in text


# -- properties ------------------------------------------------------------------------------------------------

KINDS = ("put", "pause", "resume", "delete")


@st.composite
def truthful_runs(draw):
    """A dyn job's ops, one after another, each taking effect at an instant of its window (or, for an info op,
    maybe never, maybe up to the next op's call), and the rows a perfect cluster writes: one per slot of the state
    truly in force."""
    t, ops, truth = T0, [], [(T0 - 10**6, None)]  # truth: (from_ms, spec dict or None) while active
    exists = paused = False
    spec = None
    must_put_after = None
    for _ in range(draw(st.integers(1, 8))):
        t += draw(st.integers(0, 3000))
        if must_put_after is not None:
            t = max(t, must_put_after)
            kind = "put"
        else:
            kind = draw(st.sampled_from(KINDS))
        duration = draw(st.integers(0, 1500))
        valid = kind == "put" or exists
        outcome = draw(st.sampled_from(("ok", "info", "fail"))) if valid else "fail"
        new_spec = every(draw(st.sampled_from((1, 2)))) if kind == "put" else None
        ops.append(
            op(
                kind,
                "dyn-1",
                t,
                t + duration,
                outcome,
                spec=new_spec,
                result={"paused": paused if kind == "put" else kind == "pause"} if outcome == "ok" else None,
            )
        )
        must_put_after = None
        takes = outcome == "ok" or (outcome == "info" and draw(st.booleans()))
        if outcome == "info":
            must_put_after = t + duration + checker.INDETERMINATE_TAIL_S * 1000
        if takes:
            at = t + draw(st.integers(0, duration)) if outcome == "ok" else t + draw(st.integers(0, 20_000))
            if kind == "put":
                exists, spec = True, new_spec
            elif kind == "delete":
                exists = False
            else:
                paused = kind == "pause"
            truth.append((at, spec if exists and not paused else None))
        t += duration
    return ops, sorted(truth, key=lambda x: x[0]), t + 5000


def true_rows(truth, end_ms):
    rows = []
    for (start, spec), (nxt, _) in zip(truth, [*truth[1:], (end_ms + 1, None)], strict=True):
        if spec is not None:
            step = int(spec["every"][:-1]) * 1000
            rows += [row("dyn-1", s) for s in range((start // step + 1) * step, min(nxt, end_ms + 1), step) if s > T0]
    return rows


@settings(max_examples=60, deadline=None)
@given(truthful_runs())
def test_a_truthful_cluster_is_never_accused(run):
    ops, truth, end_ms = run
    h = replace(base(), ops=ops, end_ms=end_ms)
    h = replace(h, ticks=[r for r in h.ticks if r.job != "dyn-1"] + true_rows(truth, end_ms))
    report = checker.check(h)
    accused = [f for f in report.missing + report.unowed + report.model + report.duplicates if f.job == "dyn-1"]
    assert not accused, report.summary()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 20))
def test_any_dropped_owed_row_is_missing(k):
    report = checker.check(without(base(), "s1", T0 + k * 1000))
    assert [(f.job, f.slot_ms) for f in report.missing] == [("s1", T0 + k * 1000)]


@pytest.mark.parametrize("status", ["abandoned", "failed"])
def test_a_slot_that_may_have_run_may_have_been_acted_on_once(status):
    """Its leader died after the enqueue (abandoned), or the enqueue's answer was lost (failed): one "first" is
    the one run it may have had, not a deposed leader's message."""
    report = checker.check(restatus(base(), "strm", T0 + 4000, status))
    assert report.ok, report.summary()


@pytest.mark.parametrize("skew, stale", [(0, True), (2 * TOL, False)])
def test_the_fence_rules_allow_two_nodes_clocks_moved_opposite_ways(skew, stale):
    """Seed 98747489: n2 ran ahead and n0 behind at once, so a start that n2 stamped before n0's raise read as
    after it by more than one node's offset. The fence rules compare two nodes' stamps: node_skew_ms bounds them."""
    shard = shard_for("s1", SHARDS)
    started = T0 + 5000 + TOL + 300  # later than the raise by more than one clock's tolerance, less than two
    h = replace(
        base(),
        node_skew_ms=skew,
        fences=[*base().fences, FenceRaise(shard, 2, "n1", T0 + 5000)],
        ticks=[r for r in base().ticks if r.job != "s1" or r.slot_ms <= T0 + 5000]
        + [row("s1", T0 + 6000, fence=1, node="n2", claimed=started - 100, started=started)]
        + [row("s1", s, fence=2, node="n1") for s in range(T0 + 7000, END + 1, 1000)],
    )
    report = checker.check(h)
    assert bool(report.fences) is stale, report.fences
