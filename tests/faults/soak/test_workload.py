"""The soak's workload and generator on a real fault cluster, without faults: what the soak's checker will
judge must already hold when nothing goes wrong.

A 3-node ``FaultCluster`` with the static jobs (a noop job per shard, cron,
jitter, calendar, session and stream jobs), the stream consumer, and the
operation generator for ``RUN_S``; then the generator stops and heals, every
row up to the end is final, the consumer drains the stream, and:

- the session job left exactly one effect per succeeded slot (triggered ones
  included), under its row's fence, and none for any other slot;
- the consumer admitted each succeeded stream slot exactly once ("first");
- the operations were recorded, mostly ok, and the generator's model of each
  dynamic job matches the store;
- every static job ran during the run, and the calendar job ran in none of its
  excluded windows.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict

import pytest
from sqlalchemy import select

from shardcron.dev.testing.cluster import wait_until
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.store.schema import jobs, ticks
from tests.faults import harness
from tests.faults.harness import now_ms
from tests.faults.soak import workload
from tests.faults.soak.generator import OperationGenerator
from tests.faults.soak.history import FINAL_STATUSES, History, JobPhase

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

SEED = 30
# How long the generator runs its operations against the cluster: a fixed window on purpose, the run the
# checker then judges (the history's length), not a wait for any condition.
RUN_S = 30
TTL_S = 4


def test_workload_and_generator_without_faults(fault_cluster, fault_lab, figures):
    figures["scenario"] = "soak workload and generator, no faults"
    history = History(
        seed=SEED, seconds=RUN_S, ttl_s=TTL_S, shards=harness.SHARDS, clock_tolerance_ms=500, settle_s=8.0
    )
    with workload.Workload(fault_lab, history) as wl:
        fc = fault_cluster(ttl=TTL_S, job_defs=wl.job_defs, extra_args=wl.node_args)
        wl.prepare(fc)
        fc.start()
        history.static_jobs = wl.static_history(fc.engine)
        gen = OperationGenerator(
            {n: p.address for n, p in fc.nodes.items()},
            random.Random(SEED),
            history,
            static_ids=[j.id for j in history.static_jobs],
        )
        history.started_ms = now_ms()
        gen.start()
        try:
            time.sleep(RUN_S)  # the run itself: a deliberate window, not a wait
        finally:
            gen.stop()
        still_unknown = gen.heal_ops(timeout_s=60)
        history.end_ms = (now_ms() - 1000) // 1000 * 1000
        _wait_final(fc, history.end_ms)
        drained = wl.drain(60)
        store = workload.collect_store(fc.engine)
        with fc.engine.connect() as c:
            stored_jobs = dict(c.execute(select(jobs.c.id, jobs.c.paused)).all())
        tracebacks = {n: fc.log(n).count("Traceback") for n in fc.nodes}

    end = history.end_ms
    rows = [r for r in store.ticks if r.slot_ms <= end]
    outcomes = Counter(op.outcome for op in history.ops)
    figures.update(
        {
            "window": f"{(end - history.started_ms) / 1000:.0f} s",
            "ops": dict(outcomes),
            "op kinds": dict(Counter(op.kind for op in history.ops)),
            "rows": len(rows),
            "deliveries": len(history.deliveries),
            "effects": len(store.effects),
        }
    )
    problems = []
    if still_unknown:
        problems.append(f"dynamic jobs still unknown after heal_ops: {still_unknown}")
    if not drained:
        problems.append("the consumer did not drain the stream")
    if any(tracebacks.values()):
        problems.append(f"tracebacks in node logs: {tracebacks}")
    problems += _session_problems(history, rows, store.effects, end)
    problems += _stream_problems(history, rows, end)
    problems += _ops_problems(history, gen, stored_jobs)
    problems += _static_problems(history, rows)
    assert not problems, f"{len(problems)} problem(s):\n- " + "\n- ".join(problems)


def _wait_final(fc: harness.FaultCluster, end_ms: int) -> None:
    def settled():
        with fc.engine.connect() as c:
            return not c.execute(
                select(ticks.c.job_id)
                .where(ticks.c.scheduled_at_ms <= end_ms, ticks.c.status.not_in(sorted(FINAL_STATUSES)))
                .limit(1)
            ).all()

    wait_until(settled, 60, 0.25, f"every row up to {end_ms} to be final")


def _session_problems(history: History, rows, effects, end: int) -> list[str]:
    session_rows = {r.slot_ms: r for r in rows if r.job == history.session_job}
    succeeded = {s for s, r in session_rows.items() if r.status == "succeeded"}
    per_slot = defaultdict(list)
    for e in effects:
        if e.job == history.session_job and e.slot_ms <= end:
            per_slot[e.slot_ms].append(e)
    out = []
    if len(succeeded) < RUN_S // 2:
        out.append(f"the session job succeeded only {len(succeeded)} times")
    doubled = {s: es for s, es in per_slot.items() if len(es) > 1}
    if doubled:
        out.append(f"session slots with more than one effect: {dict(list(doubled.items())[:5])}")
    if set(per_slot) != succeeded:
        out.append(
            f"effects without a succeeded row: {sorted(set(per_slot) - succeeded)[:10]}; "
            f"succeeded rows without an effect: {sorted(succeeded - set(per_slot))[:10]}"
        )
    wrong_fence = [
        (s, es[0].fence, session_rows[s].fence)
        for s, es in per_slot.items()
        if s in session_rows and es[0].fence != session_rows[s].fence
    ]
    if wrong_fence:
        out.append(f"effects under another fence than their row's (slot, effect, row): {wrong_fence[:5]}")
    if not any(r.manual for r in session_rows.values()) and any(
        op.kind == "trigger" and op.job == history.session_job and op.outcome == "ok" for op in history.ops
    ):
        out.append("the session job was triggered ok but has no manual row")
    return out


def _stream_problems(history: History, rows, end: int) -> list[str]:
    succeeded = {r.slot_ms for r in rows if r.job == history.stream_job and r.status == "succeeded"}
    firsts = Counter(d.slot_ms for d in history.deliveries if d.job == history.stream_job and d.verdict == "first")
    out = []
    if len(succeeded) < RUN_S // 2:
        out.append(f"the stream job succeeded only {len(succeeded)} times")
    not_once = {s: firsts[s] for s in succeeded if firsts[s] != 1}
    if not_once:
        out.append(
            f"succeeded stream slots not admitted exactly once (slot: firsts): {dict(list(not_once.items())[:10])}"
        )
    unowned = sorted(s for s in firsts if s <= end and s not in succeeded)
    if unowned:
        out.append(f"stream messages admitted for slots without a succeeded row: {unowned[:10]}")
    return out


def _ops_problems(history: History, gen: OperationGenerator, stored_jobs: dict[str, bool]) -> list[str]:
    ops = history.ops
    out = []
    outcomes = Counter(op.outcome for op in ops)
    if len(ops) < RUN_S // 2:
        out.append(f"only {len(ops)} operations in {RUN_S} s")
    if outcomes["ok"] < 0.8 * len(ops):
        out.append(
            f"fewer than 80% of the operations ok without faults: {dict(outcomes)}; not ok: "
            f"{[(o.kind, o.job, o.outcome, o.error) for o in ops if o.outcome != 'ok'][:10]}"
        )
    if not {"put", "trigger"} <= {op.kind for op in ops if op.outcome == "ok"}:
        out.append(f"no ok put or no ok trigger among {Counter(op.kind for op in ops)}")
    if [op.id for op in ops] != list(range(len(ops))) or any(op.return_ms < op.call_ms for op in ops):
        out.append("operation ids are not 0..n-1, or an operation returned before it was called")
    for job_id, model in gen.jobs.items():
        in_store = job_id in stored_jobs
        expected = {JobPhase.ABSENT: None, JobPhase.ACTIVE: False, JobPhase.PAUSED: True}.get(model.state, "?")
        got = stored_jobs[job_id] if in_store else None
        if expected != got:
            out.append(
                f"{job_id}: the generator's model says {model.state.value}, the store "
                f"{'has it paused' if got else 'has it active' if in_store else 'has no such job'}"
            )
    return out


def _static_problems(history: History, rows) -> list[str]:
    ran = {r.job for r in rows if r.status == "succeeded" and r.slot_ms > history.started_ms}
    out = []
    missing = [j.id for j in history.static_jobs if j.id not in ran]
    if missing:
        out.append(f"static jobs that never ran during the run: {missing}")
    cal = parse_calendar(workload.CALENDAR, history.calendars[workload.CALENDAR])
    excluded_runs = [
        r.slot_ms for r in rows if r.job == workload.CALENDAR_JOB and not r.manual and not cal.allows(r.slot_ms)
    ]
    if excluded_runs:
        out.append(f"the calendar job ran at excluded slots: {excluded_runs[:10]}")
    window = range((history.started_ms // 1000 + 1) * 1000, history.end_ms + 1, 1000)
    if all(cal.allows(s) for s in window):
        out.append("no excluded window of the calendar fell inside the run: its path was not exercised")
    return out
