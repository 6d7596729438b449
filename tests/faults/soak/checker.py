"""The soak's checker: an independent model of what the cluster owed, judged against what the store holds.

Pure: ``check(history) -> Report``, no I/O. It implements rules 1-8 of "Checker
rules" in /work/notes/soak-design.md, each a small function over the history.
``shardcron audit`` is the product's own checker; this one is built from the
operations the test issued (their call/return times and outcomes), and rule 8
compares the two verdicts.

The job model (one ``Timeline`` per job, from its operations in return order)
States: ABSENT, ACTIVE(spec), PAUSED(spec), UNKNOWN.

    ABSENT/ACTIVE/PAUSED --ok put-->     ACTIVE(spec) | PAUSED(spec) (result "paused")
    ACTIVE/PAUSED        --ok pause-->   PAUSED        --ok resume--> ACTIVE
    any                  --ok delete-->  ABSENT
    any                  --info op-->    UNKNOWN, from its call
    UNKNOWN              --ok put/delete called INDETERMINATE_TAIL_S after the info op returned--> as above
    any                  --fail, trigger, backfill--> unchanged

A new state holds from the op's return; ``[call, return]`` of every state-changing
op (fail included) is uncertain, and every uncertain window is widened by the
history's clock tolerance on both sides. Two state-changing ops that overlap in
time took effect in an unknown order: the second makes the state UNKNOWN, as an
info op does. An ok pause/resume of a job the model holds ABSENT, or an ok op
the model cannot parse, is reported under ``model`` and makes the job UNKNOWN.
A static job is UNKNOWN before its ``active_since_ms`` (the cluster ran before
the history began) and ACTIVE after it.

A slot inside an uncertain window is neither owed nor an unowed run: the model
never guesses (an indeterminate op may have taken effect, or not, at any instant
of its window).
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from shardcron.errors import ShardcronError
from shardcron.jobkey import DEFAULT_NAMESPACE, join_key
from shardcron.model import Job
from shardcron.rules.calendars import allowed_by_all
from shardcron.rules.jitter import jitter_offset_ms
from shardcron.rules.triggers import slots_between, trigger_for
from shardcron.sharding import shard_for
from shardcron.spec.calendar import Calendar, CalendarError
from shardcron.spec.calendar_tables import parse_calendar
from shardcron.spec.job import job_from_dict
from tests.faults.soak.history import (
    FINAL_STATUSES,
    INDETERMINATE_TAIL_S,
    Delivery,
    Effect,
    Fault,
    FenceRaise,
    History,
    JobPhase,
    LeaderSample,
    Op,
    StaticJob,
    TickRow,
)

# The generator calls the op that settles an indeterminate one no sooner than this after it returned, so a late
# commit of the indeterminate op cannot land after it (the design's history-level constant).
# The stream consumer drains the stream before the history is collected; a slot this close to end_ms may still be
# in flight, so rule 6 judges only the slots before it.
STREAM_DRAIN_MARGIN_MS = 5000
SHOWN = 3  # examples per rule in the summary
STATE_CHANGING = frozenset({"put", "pause", "resume", "delete"})
NON_FIRST_VERDICTS = frozenset({"duplicate", "stale_fence", "stale-fence"})  # history's spelling, dedupe.Verdict's
_NEVER = -(2**62)
_FOREVER = 2**62


@dataclass(frozen=True)
class Finding:
    rule: str
    detail: str
    job: str | None = None
    slot_ms: int | None = None
    shard: int | None = None
    kind: str = ""  # within a rule: duplicates "scheduled"/"manual"; fences "raised_twice"/"backwards"/
    #                 "stale_write"/"stale_effect"


# -- the job model ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    phase: JobPhase
    job: Job | None = None  # ACTIVE and PAUSED: the parsed spec

    def __str__(self) -> str:
        return self.phase.value


ABSENT = State(JobPhase.ABSENT)
UNKNOWN = State(JobPhase.UNKNOWN)


@dataclass(frozen=True)
class Timeline:
    """One job's states: ``changes`` (from_ms, state) ascending, each holding until the next; ``uncertain``:
    half-open windows [a, b), merged and sorted, in which no state is certain."""

    job_id: str
    changes: tuple[tuple[int, State], ...]
    uncertain: tuple[tuple[int, int], ...]

    def certain_at(self, ms: int) -> State | None:
        """The state at ``ms`` if the model is sure of it (never UNKNOWN), else None."""
        i = bisect_right(self.uncertain, (ms, _FOREVER)) - 1
        if i >= 0 and ms < self.uncertain[i][1]:
            return None
        state = self.changes[bisect_right(self.changes, ms, key=lambda c: c[0]) - 1][1]
        return None if state.phase is JobPhase.UNKNOWN else state

    def certain_spans(self, from_ms: int, to_ms: int) -> list[tuple[int, int, State]]:
        """[a, b) stretches within [from_ms, to_ms) where one certain state holds (UNKNOWN left out)."""
        out = []
        for i, (start, state) in enumerate(self.changes):
            end = self.changes[i + 1][0] if i + 1 < len(self.changes) else _FOREVER
            lo, hi = max(start, from_ms), min(end, to_ms)
            if state.phase is JobPhase.UNKNOWN or lo >= hi:
                continue
            for a, b in self.uncertain:
                if b <= lo or a >= hi:
                    continue
                if a > lo:
                    out.append((lo, a, state))
                lo = max(lo, b)
            if lo < hi:
                out.append((lo, hi, state))
        return out


def merge_windows(windows: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Half-open windows, sorted and merged where they overlap or touch."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(windows):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def parse_spec(job_id: str, spec: Mapping) -> Job:
    """The job an op's spec dict describes, by the product's own parser (``InvalidJob`` if it is not one)."""
    return job_from_dict(spec, job_id=job_id, stored=True)


def build_timeline(
    job_id: str, ops: Sequence[Op], tolerance_ms: int, static: StaticJob | None = None
) -> tuple[Timeline, list[Finding]]:
    """The job's timeline from its ops (any order; only state-changing ones count), and what the model could not
    follow (``model`` findings). ``static``: the job of the jobs file, ACTIVE from its ``active_since_ms``."""
    findings: list[Finding] = []
    uncertain: list[tuple[int, int]] = []
    if static is not None:
        since = static.active_since_ms
        state = _parsed_state(job_id, static.spec, False, findings, "the static job's spec")
        changes = [(_NEVER, UNKNOWN), (since, state)]
        uncertain.append((since - tolerance_ms, since + tolerance_ms + 1))
    else:
        state = ABSENT
        changes = [(_NEVER, ABSENT)]
    unknown_since: int | None = None if state.phase is not JobPhase.UNKNOWN else _NEVER
    settle_after = _NEVER  # an ok put/delete called before this does not settle an UNKNOWN state
    last_effect_return = _NEVER
    tail_ms = INDETERMINATE_TAIL_S * 1000
    for op in sorted((o for o in ops if o.kind in STATE_CHANGING), key=lambda o: (o.return_ms, o.call_ms, o.id)):
        uncertain.append((op.call_ms - tolerance_ms, op.return_ms + tolerance_ms + 1))
        if op.outcome == "fail":
            continue
        concurrent = op.call_ms < last_effect_return
        last_effect_return = max(last_effect_return, op.return_ms)
        if op.outcome != "ok" or concurrent:
            unknown_since = op.call_ms - tolerance_ms if unknown_since is None else unknown_since
            settle_after = max(settle_after, op.return_ms + (tail_ms if op.outcome != "ok" else 0))
            continue
        if unknown_since is not None:
            if op.kind not in ("put", "delete") or op.call_ms < settle_after:
                continue  # a pause or resume, or a put the indeterminate op may still land after: still unknown
            uncertain.append((unknown_since, op.return_ms + tolerance_ms + 1))
            unknown_since = None
        new = _after(job_id, state, op, findings)
        if new.phase is JobPhase.UNKNOWN:
            unknown_since = op.call_ms - tolerance_ms
        state = new
        changes.append((op.return_ms, new))
    if unknown_since is not None:
        uncertain.append((unknown_since, _FOREVER))
    return Timeline(job_id, tuple(changes), merge_windows(uncertain)), findings


def _after(job_id: str, state: State, op: Op, findings: list[Finding]) -> State:
    """The state an ok op leaves a job in that the model was sure of before it."""
    if op.kind == "put":
        paused = (op.result or {}).get("paused")
        return _parsed_state(job_id, op.spec, paused, findings, f"ok put op {op.id}")
    if op.kind == "delete":
        return ABSENT
    if state.phase is JobPhase.ABSENT:
        findings.append(
            Finding(
                "model",
                f"ok {op.kind} op {op.id} of a job the history holds absent (deleted or "
                "never put): the product acted on a job it had not",
                job_id,
                op.return_ms,
            )
        )
        return UNKNOWN
    return State(JobPhase.PAUSED if op.kind == "pause" else JobPhase.ACTIVE, state.job)


def _parsed_state(job_id: str, spec: Mapping | None, paused: bool | None, findings: list[Finding], what: str) -> State:
    try:
        job = parse_spec(job_id, spec or {})
    except ShardcronError as e:
        findings.append(
            Finding("model", f"{what}: its spec does not parse ({e}); the job is unknown from then", job_id)
        )
        return UNKNOWN
    return State(JobPhase.PAUSED if (job.paused if paused is None else paused) else JobPhase.ACTIVE, job)


def parse_calendars(definitions: Mapping[str, Mapping]) -> tuple[dict[str, Calendar], list[Finding]]:
    out, findings = {}, []
    for name, body in definitions.items():
        try:
            out[name] = parse_calendar(name, body)
        except CalendarError as e:
            findings.append(Finding("model", f"calendar {name!r} does not parse: {e}"))
    return out, findings


def calendars_of(job: Job, calendars: Mapping[str, Calendar]) -> list[Calendar] | None:
    """The job's calendars, or None when the history lacks one of them (its slots cannot be judged)."""
    if any(name not in calendars for name in job.calendars):
        return None
    return [calendars[name] for name in job.calendars]


@dataclass
class Model:
    """What ``check`` derives once and the rules share."""

    timelines: dict[str, Timeline]
    calendars: dict[str, Calendar]
    backfills: dict[str, list[tuple[int, int]]]  # job -> [from_ms, to_ms] of its ok and info backfill ops
    findings: list[Finding]


def build_model(history: History) -> Model:
    calendars, findings = parse_calendars(history.calendars)
    ops_by_job: dict[str, list[Op]] = defaultdict(list)
    for op in history.ops:
        ops_by_job[op.job].append(op)
    statics = {s.id: s for s in history.static_jobs}
    timelines = {}
    for job_id in sorted(set(ops_by_job) | set(statics)):
        timelines[job_id], found = build_timeline(
            job_id, ops_by_job[job_id], history.clock_tolerance_ms, statics.get(job_id)
        )
        findings += found
    for timeline in timelines.values():
        for _, state in timeline.changes:
            if state.job is not None and calendars_of(state.job, calendars) is None:
                missing = sorted(set(state.job.calendars) - set(calendars))
                findings.append(
                    Finding(
                        "model",
                        f"its spec names calendars the history does not define: {missing}; its slots are not judged",
                        timeline.job_id,
                    )
                )
                break
    backfills: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for op in history.ops:
        span = op.args or op.result or {}
        if op.kind == "backfill" and op.outcome != "fail" and "from_ms" in span and "to_ms" in span:
            backfills[op.job].append((span["from_ms"], span["to_ms"]))
    return Model(timelines, calendars, dict(backfills), findings)


def backfill_covers(spans: Iterable[tuple[int, int]], slot_ms: int) -> bool:
    """Whether a backfill range covers the slot; both ends included (the design says (from, to], the product
    [from, to): the model takes either)."""
    return any(a <= slot_ms <= b for a, b in spans)


# -- rule 1: duplicates ----------------------------------------------------------------------------------------


def find_duplicates(rows: Iterable[TickRow]) -> list[Finding]:
    by_slot: dict[tuple[str, int, bool], list[TickRow]] = defaultdict(list)
    for r in rows:
        by_slot[(r.job, r.slot_ms, r.manual)].append(r)
    out = []
    for (job, slot, manual), same in sorted(by_slot.items()):
        if len(same) > 1:
            rows_text = ", ".join(f"fence {r.fence} on {r.node} ({r.status})" for r in same)
            out.append(
                Finding(
                    "duplicates",
                    f"{len(same)} {'manual' if manual else 'scheduled'} rows for one slot: {rows_text}",
                    job,
                    slot,
                    same[0].shard,
                    "manual" if manual else "scheduled",
                )
            )
    return out


# -- rule 2: missing and not final -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OwedSlots:
    owed: dict[str, list[int]]  # job -> owed slots, ascending
    calendar_excluded: int


def owed_slots(model: Model, started_ms: int, end_ms: int) -> OwedSlots:
    """Per job, the slots in (started_ms, end_ms] it certainly owed: ACTIVE(spec) at the slot, outside every
    uncertain window, a slot of spec's schedule that every calendar of spec allows."""
    owed: dict[str, list[int]] = {}
    excluded = 0
    for job_id, timeline in model.timelines.items():
        slots: list[int] = []
        for a, b, state in timeline.certain_spans(started_ms + 1, end_ms + 1):
            if state.phase is not JobPhase.ACTIVE:
                continue
            cals = calendars_of(state.job, model.calendars)
            if cals is None:
                continue
            for s in slots_between(trigger_for(state.job.schedule), a - 1, b - 1):
                if allowed_by_all(cals, s):
                    slots.append(s)
                else:
                    excluded += 1
        owed[job_id] = slots
    return OwedSlots(owed, excluded)


def scheduled_rows(rows: Iterable[TickRow]) -> dict[tuple[str, int], TickRow]:
    """(job, slot) -> a scheduled (non-manual) row; of duplicates, the last (rule 1 reports them)."""
    return {(r.job, r.slot_ms): r for r in rows if not r.manual}


def find_missing(owed: Mapping[str, Sequence[int]], rows: Mapping[tuple[str, int], TickRow]) -> list[Finding]:
    return [
        Finding("missing", "owed slot without a row", job, s)
        for job, slots in sorted(owed.items())
        for s in slots
        if (job, s) not in rows
    ]


def find_not_final(rows: Iterable[TickRow], end_ms: int) -> list[Finding]:
    """Every row of a slot up to ``end_ms`` whose status is not final, owed or not (a stuck manual or backfilled
    row is a stuck row too, and the audit's unresolved rows are compared with these)."""
    return [
        Finding(
            "not_final",
            f"status {r.status} (fence {r.fence} on {r.node}, attempt {r.attempt})",
            r.job,
            r.slot_ms,
            r.shard,
        )
        for r in sorted(rows, key=lambda r: (r.job, r.slot_ms))
        if r.slot_ms <= end_ms and r.status not in FINAL_STATUSES
    ]


# -- rule 3: unowed runs ---------------------------------------------------------------------------------------


def why_unowed(state: State, slot_ms: int, calendars: Mapping[str, Calendar]) -> str | None:
    """Why a scheduled row at ``slot_ms`` should not exist when the job was certainly in ``state``; None if it
    should (or the model cannot tell)."""
    if state.phase is JobPhase.ABSENT:
        return "ran while the job was absent (deleted, or not yet put)"
    if state.phase is JobPhase.PAUSED:
        return "ran while the job was paused"
    if state.phase is not JobPhase.ACTIVE:
        return None
    if trigger_for(state.job.schedule).next_after(slot_ms - 1) != slot_ms:
        return f"not a slot of the job's schedule then ({_schedule_text(state.job)})"
    cals = calendars_of(state.job, calendars)
    if cals is not None and not allowed_by_all(cals, slot_ms):
        return f"a slot the job's calendars {list(state.job.calendars)} exclude"
    return None


def find_unowed(rows: Iterable[TickRow], model: Model) -> tuple[list[Finding], int]:
    """Scheduled rows that ran (any status but skipped) at slots the job certainly did not owe, not covered by
    a backfill; and how many scheduled rows fell in an uncertain window (judged neither way)."""
    out, uncertain = [], 0
    unknown_jobs: Counter[str] = Counter()
    for r in sorted(rows, key=lambda r: (r.job, r.slot_ms)):
        if r.manual or r.status == "skipped":  # a skipped row says the slot did not run: no unowed run
            continue
        timeline = model.timelines.get(r.job)
        if timeline is None:
            unknown_jobs[r.job] += 1
            continue
        state = timeline.certain_at(r.slot_ms)
        if state is None:
            uncertain += 1
            continue
        why = why_unowed(state, r.slot_ms, model.calendars)
        if why and not backfill_covers(model.backfills.get(r.job, ()), r.slot_ms):
            out.append(
                Finding("unowed", f"{why}: status {r.status}, fence {r.fence} on {r.node}", r.job, r.slot_ms, r.shard)
            )
    out += [
        Finding(
            "unowed", f"{n} scheduled rows of a job the history does not know (neither static nor put by any op)", job
        )
        for job, n in sorted(unknown_jobs.items())
    ]
    return out, uncertain


# -- rule 4: fences --------------------------------------------------------------------------------------------


def find_fence_order(raises: Iterable[FenceRaise], tolerance_ms: int) -> list[Finding]:
    """Per shard, a fence raised twice, or raised more than ``tolerance_ms`` before a lower one."""
    by_shard: dict[int, dict[int, list[FenceRaise]]] = defaultdict(lambda: defaultdict(list))
    for r in raises:
        by_shard[r.shard][r.fence].append(r)
    out = []
    for shard, by_fence in sorted(by_shard.items()):
        latest: FenceRaise | None = None  # the latest-raised of the lower fences
        for fence, same in sorted(by_fence.items()):
            same.sort(key=lambda r: r.raised_at_ms)
            if len(same) > 1:
                out.append(
                    Finding(
                        "fences",
                        f"fence {fence} raised {len(same)} times: "
                        + ", ".join(f"by {r.node} at {r.raised_at_ms}" for r in same),
                        shard=shard,
                        kind="raised_twice",
                    )
                )
            first = same[0]
            if latest is not None and latest.raised_at_ms > first.raised_at_ms + tolerance_ms:
                out.append(
                    Finding(
                        "fences",
                        f"fence went backwards: fence {fence} raised by {first.node} at "
                        f"{first.raised_at_ms}, {latest.raised_at_ms - first.raised_at_ms} ms "
                        f"before the lower fence {latest.fence} (by {latest.node})",
                        shard=shard,
                        kind="backwards",
                    )
                )
            if latest is None or same[-1].raised_at_ms > latest.raised_at_ms:
                latest = same[-1]
    return out


def first_raise_above(raises: Iterable[FenceRaise]) -> dict[int, tuple[list[int], list[FenceRaise]]]:
    """Per shard: fences ascending, and for each position the earliest raise of that fence or a higher one."""
    by_shard: dict[int, list[FenceRaise]] = defaultdict(list)
    for r in raises:
        by_shard[r.shard].append(r)
    index = {}
    for shard, rs in by_shard.items():
        rs.sort(key=lambda r: r.fence)
        earliest = list(rs)
        for i in range(len(rs) - 2, -1, -1):
            if earliest[i + 1].raised_at_ms < earliest[i].raised_at_ms:
                earliest[i] = earliest[i + 1]
        index[shard] = ([r.fence for r in rs], earliest)
    return index


def find_stale_writes(rows: Iterable[TickRow], raises: Iterable[FenceRaise], tolerance_ms: int) -> list[Finding]:
    """Rows claimed or started under fence f later than a newer fence f' > f of their shard was raised
    (+ ``tolerance_ms``): a deposed leader's write the store accepted."""
    index = first_raise_above(raises)
    out = []
    for r in sorted(rows, key=lambda r: (r.job, r.slot_ms)):
        fences, earliest = index.get(r.shard, ([], []))
        i = bisect_right(fences, r.fence)
        if i == len(fences):
            continue
        newer = earliest[i]
        late = [
            f"{what} at {at}"
            for what, at in (("claimed", r.claimed_at_ms), ("started", r.started_at_ms))
            if at is not None and at > newer.raised_at_ms + tolerance_ms
        ]
        if late:
            out.append(
                Finding(
                    "fences",
                    f"stale write: {' and '.join(late)} under fence {r.fence} on {r.node}, after "
                    f"fence {newer.fence} was raised at {newer.raised_at_ms} by {newer.node}",
                    r.job,
                    r.slot_ms,
                    r.shard,
                    "stale_write",
                )
            )
    return out


def find_stale_effects(effects: Iterable[Effect], rows: Iterable[TickRow]) -> list[Finding]:
    """Effects that ran under a fence lower than their slot's row holds."""
    fence_of: dict[tuple[str, int], int] = {}
    for r in rows:
        fence_of[(r.job, r.slot_ms)] = max(r.fence, fence_of.get((r.job, r.slot_ms), r.fence))
    return [
        Finding(
            "fences",
            f"stale effect: written under fence {e.fence} on {e.node}, the slot's row holds fence "
            f"{fence_of[(e.job, e.slot_ms)]}",
            e.job,
            e.slot_ms,
            kind="stale_effect",
        )
        for e in sorted(effects, key=lambda e: (e.job, e.slot_ms))
        if (e.job, e.slot_ms) in fence_of and e.fence < fence_of[(e.job, e.slot_ms)]
    ]


# -- rule 5: the session job's effects -------------------------------------------------------------------------


def find_effect_errors(job_id: str, rows: Iterable[TickRow], effects: Iterable[Effect]) -> list[Finding]:
    """Exactly one effect per succeeded slot of the session job (manual ones included), none for another."""
    if not job_id:
        return []
    statuses: dict[int, list[str]] = defaultdict(list)
    for r in rows:
        if r.job == job_id:
            statuses[r.slot_ms].append(r.status)
    count = Counter(e.slot_ms for e in effects if e.job == job_id)
    out = []
    for slot in sorted(set(statuses) | set(count)):
        n, succeeded = count[slot], "succeeded" in statuses.get(slot, ())
        if succeeded and n == 0:
            out.append(Finding("effects", "succeeded slot without its effect", job_id, slot))
        elif n > 1:
            out.append(Finding("effects", f"effect applied {n} times", job_id, slot))
        if n and not succeeded:
            seen = "/".join(statuses[slot]) or "no row"
            out.append(Finding("effects", f"effect for a slot that did not succeed ({seen})", job_id, slot))
    return out


# -- rule 6: the stream job's deliveries -----------------------------------------------------------------------


def find_delivery_errors(
    job_id: str, rows: Iterable[TickRow], deliveries: Iterable[Delivery], from_ms: int, until_ms: int
) -> list[Finding]:
    """For slots in (from_ms, until_ms]: one "first" per succeeded slot of the stream job; at most one for a slot
    whose run may have enqueued before it ended otherwise (``abandoned``: its leader died mid-run; ``failed``: the
    enqueue's answer was lost); a "first" for any other slot is a deposed leader's message acted on; any other
    verdict is "duplicate" or "stale_fence"."""
    if not job_id:
        return []
    mine = [r for r in rows if r.job == job_id and from_ms < r.slot_ms <= until_ms]
    succeeded = {r.slot_ms for r in mine if r.status == "succeeded"}
    may_have_run = {r.slot_ms for r in mine if r.status in ("abandoned", "failed")}
    firsts: Counter[int] = Counter()
    out = []
    for d in sorted(deliveries, key=lambda d: (d.slot_ms, d.at_ms)):
        if d.job != job_id or not from_ms < d.slot_ms <= until_ms:
            continue
        if d.verdict == "first":
            firsts[d.slot_ms] += 1
        elif d.verdict not in NON_FIRST_VERDICTS:
            out.append(
                Finding(
                    "deliveries",
                    f"unknown verdict {d.verdict!r} (attempt {d.attempt}, fence {d.fence})",
                    job_id,
                    d.slot_ms,
                )
            )
    for slot in sorted(succeeded | set(firsts)):
        n = firsts[slot]
        if slot in succeeded and n != 1:
            what = 'never acted on (no "first" delivery)' if n == 0 else f'acted on {n} times ("first" {n} times)'
            out.append(Finding("deliveries", f"succeeded slot {what}", job_id, slot))
        elif slot in may_have_run and n > 1:
            out.append(Finding("deliveries", f"a slot that may have run once acted on {n} times", job_id, slot))
        elif slot not in succeeded and slot not in may_have_run:
            out.append(
                Finding(
                    "deliveries",
                    '"first" delivery for a slot with no succeeded row (a deposed leader\'s message acted on)',
                    job_id,
                    slot,
                )
            )
    return out


# -- rule 7: liveness ------------------------------------------------------------------------------------------


def time_to_all_led(samples: Iterable[LeaderSample], shards: int, heal_ms: int) -> int | None:
    """From ``heal_ms`` to the first sample with every shard led; None if none."""
    for s in sorted(samples, key=lambda s: s.t_ms):
        if s.t_ms >= heal_ms and s.leaders is not None and all(s.leaders.get(k) for k in range(shards)):
            return s.t_ms - heal_ms
    return None


def find_liveness(
    history: History, model: Model, owed: Mapping[str, Sequence[int]], led_after_ms: int | None
) -> list[Finding]:
    bound_ms = round((history.ttl_s + history.settle_s) * 1000)
    out = [
        Finding("liveness", f"fault {f.kind} on {f.target} (from {f.start_ms}) was never healed")
        for f in history.faults
        if f.end_ms is None
    ]
    if led_after_ms is None:
        out.append(Finding("liveness", "no leader sample after the heal has every shard led"))
    elif led_after_ms > bound_ms:
        out.append(
            Finding(
                "liveness",
                f"every shard led only {led_after_ms} ms after the heal; bound {bound_ms} ms "
                f"(ttl {history.ttl_s} s + settle {history.settle_s} s)",
            )
        )
    since = history.heal_ms + bound_ms
    final_after: set[str] = {
        r.job for r in history.ticks if not r.manual and r.slot_ms > since and r.status in FINAL_STATUSES
    }
    for job_id, timeline in sorted(model.timelines.items()):
        state = timeline.certain_at(history.end_ms)
        due = [s for s in owed.get(job_id, ()) if s > since]
        if state is not None and state.phase is JobPhase.ACTIVE and due and job_id not in final_after:
            out.append(
                Finding(
                    "liveness",
                    f"active at the end and owed {len(due)} slots after {since} (heal + "
                    f"{bound_ms} ms), yet no final row of a slot after it",
                    job_id,
                    due[0],
                )
            )
    return out


def lateness_ms(rows: Iterable[TickRow], model: Model, after_ms: int) -> list[int]:
    """started_at - (slot + the slot's jitter) of the scheduled rows of slots after ``after_ms``."""
    out = []
    for r in rows:
        if r.manual or r.slot_ms <= after_ms or r.started_at_ms is None:
            continue
        timeline = model.timelines.get(r.job)
        state = timeline.certain_at(r.slot_ms) if timeline else None
        jitter = state.job.jitter_ms if state is not None and state.job is not None else 0
        out.append(r.started_at_ms - r.slot_ms - jitter_offset_ms(r.job, r.slot_ms, jitter))
    return out


def percentiles(values: Sequence[int]) -> dict[str, int | None]:
    if not values:
        return {"count": 0, "p50": None, "p99": None, "max": None}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, (len(ordered) * 99) // 100)]
    return {"count": len(ordered), "p50": round(statistics.median(ordered)), "p99": p99, "max": ordered[-1]}


@dataclass(frozen=True)
class ServiceGap:
    longest_ms: int
    from_ms: int  # the start (or started_ms) before the gap
    to_ms: int  # the start (or end_ms) after it


def service_gaps(rows: Iterable[TickRow], shards: Iterable[int], from_ms: int, to_ms: int) -> dict[int, ServiceGap]:
    """Per shard, the longest time in [from_ms, to_ms] with no tick started (starts on the writers' clocks)."""
    starts: dict[int, list[int]] = {s: [] for s in shards}
    for r in rows:
        if r.shard in starts and r.started_at_ms is not None and from_ms <= r.started_at_ms <= to_ms:
            starts[r.shard].append(r.started_at_ms)
    out = {}
    for shard, times in sorted(starts.items()):
        edges = [from_ms, *sorted(times), to_ms]
        a, b = max(zip(edges, edges[1:], strict=False), key=lambda p: p[1] - p[0])
        out[shard] = ServiceGap(b - a, a, b)
    return out


def service_gap_bound_ms(faults: Iterable[Fault], ttl_s: float, settle_s: float, end_ms: int) -> int:
    """The longest stretch covered by overlapping faults, plus ttl and settle."""
    spans = merge_windows((f.start_ms, end_ms if f.end_ms is None else f.end_ms) for f in faults)
    return max((b - a for a, b in spans), default=0) + round((ttl_s + settle_s) * 1000)


# -- rule 8: agreement with the audit --------------------------------------------------------------------------

AUDIT_COMPARED = ("duplicates", "missing", "stale_fence", "unresolved")
AUDIT_OTHER = ("false_overlap", "notification_missing")  # the model has no rule of its own for these


def audit_keys(audit: Mapping, kind: str) -> set[tuple[str, int]]:
    return {
        (join_key(f.get("namespace") or DEFAULT_NAMESPACE, f["job_id"]), f["scheduled_at_ms"])
        for f in audit.get(kind) or ()
    }


def audit_judged(timeline: Timeline | None, slot_ms: int) -> bool:
    """Whether the audit, which reads each job as it stands at the end, judges this slot's owing as the model
    does: the job exists at the end and no state-changing op (or uncertainty) came after the slot."""
    if timeline is None or timeline.certain_at(slot_ms) is None:
        return False
    since, state = timeline.changes[-1]
    settled = max([since, *(b for _, b in timeline.uncertain)])
    return slot_ms >= settled and state.phase is JobPhase.ACTIVE


def find_audit_disagreement(history: History, model: Model, checker: Mapping[str, list[Finding]]) -> list[Finding]:
    """Audit findings the model did not make, and model findings of duplicates, missing slots and stale writes
    the audit should have seen and did not. ``checker``: rule name -> findings."""
    audit = history.audit
    if audit is None:
        return [Finding("audit", "no audit report (shardcron audit --json did not run or gave nothing)")]
    window = (history.started_ms, history.end_ms)
    ours = {
        "duplicates": {(f.job, f.slot_ms) for f in checker["duplicates"] if f.kind == "scheduled"},
        "missing": {(f.job, f.slot_ms) for f in checker["missing"]},
        "stale_fence": {(f.job, f.slot_ms) for f in checker["fences"] if f.kind == "stale_write"},
        "unresolved": {(f.job, f.slot_ms) for f in checker["not_final"]},
    }
    theirs = {kind: audit_keys(audit, kind) for kind in AUDIT_COMPARED}
    should_see = {
        "duplicates": ours["duplicates"],
        "missing": {k for k in ours["missing"] if audit_judged(model.timelines.get(k[0]), k[1])},
        "stale_fence": {k for k in ours["stale_fence"] if window[0] < k[1] <= window[1]},
    }
    out = []
    for kind in AUDIT_COMPARED:
        for job, slot in sorted(theirs[kind] - ours[kind]):
            out.append(Finding("audit", f"the audit reports {kind} and the checker does not", job, slot))
    for kind, keys in should_see.items():
        for job, slot in sorted(keys - theirs[kind]):
            out.append(Finding("audit", f"the checker finds {kind} and the audit does not", job, slot))
    for kind in AUDIT_OTHER:
        for f in audit.get(kind) or ():
            out.append(
                Finding(
                    "audit",
                    f"the audit reports {kind} (a rule the checker does not have): {f.get('detail', '')}",
                    f.get("job_id"),
                    f.get("scheduled_at_ms"),
                )
            )
    return out


# -- the report ------------------------------------------------------------------------------------------------

RULES = (
    "model",
    "duplicates",
    "missing",
    "not_final",
    "unowed",
    "fences",
    "effects",
    "deliveries",
    "liveness",
    "audit",
)


@dataclass
class Report:
    # findings, one list per rule ("model": what the checker could not follow in the history)
    model: list[Finding] = field(default_factory=list)
    duplicates: list[Finding] = field(default_factory=list)  # rule 1
    missing: list[Finding] = field(default_factory=list)  # rule 2
    not_final: list[Finding] = field(default_factory=list)  # rule 2
    unowed: list[Finding] = field(default_factory=list)  # rule 3
    fences: list[Finding] = field(default_factory=list)  # rule 4: order, stale writes, stale effects
    effects: list[Finding] = field(default_factory=list)  # rule 5
    deliveries: list[Finding] = field(default_factory=list)  # rule 6
    liveness: list[Finding] = field(default_factory=list)  # rule 7
    audit: list[Finding] = field(default_factory=list)  # rule 8
    # figures
    rows_by_status: dict[str, int] = field(default_factory=dict)
    slots_checked: int = 0  # owed slots in (started_ms, end_ms]
    calendar_excluded: int = 0  # slots certainly of an active schedule that a calendar excluded
    rows_uncertain: int = 0  # scheduled rows in an uncertain window: judged neither owed nor unowed
    time_to_all_led_ms: int | None = None
    lateness_ms: dict[str, int | None] = field(default_factory=dict)  # count, p50, p99, max
    service_gaps: dict[int, ServiceGap] = field(default_factory=dict)  # shard -> longest gap
    service_gap_bound_ms: int = 0
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    ops_by_outcome: dict[str, int] = field(default_factory=dict)  # "put ok" -> n
    window_ms: tuple[int, int] = (0, 0)  # (started_ms, end_ms)
    audit_clean: bool | None = None

    def findings(self) -> dict[str, list[Finding]]:
        return {rule: getattr(self, rule) for rule in RULES}

    @property
    def ok(self) -> bool:
        return not any(self.findings().values())

    def longest_service_gap(self) -> tuple[int, ServiceGap] | None:
        return max(self.service_gaps.items(), key=lambda kv: kv[1].longest_ms, default=None)

    def figures(self) -> dict:
        """A row of the fault scenarios' figures table (harness.COLUMNS where they apply)."""
        gap = self.longest_service_gap()
        return {
            "window": f"{(self.window_ms[1] - self.window_ms[0]) / 1000:.0f} s",
            "slots checked": self.slots_checked,
            "duplicates": len(self.duplicates),
            "gaps": len(self.missing),
            "longest service gap": f"{gap[1].longest_ms} ms (shard {gap[0]})" if gap else None,
            "theoretical window": f"{self.service_gap_bound_ms} ms",
            "audit": "none" if self.audit_clean is None else "clean" if self.audit_clean else "findings",
            "findings": {rule: len(fs) for rule, fs in self.findings().items() if fs},
            "time to all led": None if self.time_to_all_led_ms is None else f"{self.time_to_all_led_ms} ms",
            "lateness after heal": self.lateness_ms,
            "faults": self.faults_by_kind,
        }

    def summary(self, shown: int = SHOWN) -> str:
        status = ", ".join(f"{k} {n}" for k, n in sorted(self.rows_by_status.items())) or "none"
        led = "never" if self.time_to_all_led_ms is None else f"{self.time_to_all_led_ms} ms"
        late = self.lateness_ms
        lines = [
            f"soak checker: {'OK' if self.ok else 'FINDINGS'}; window {self.window_ms[0]}..{self.window_ms[1]}",
            f"rows by status: {status}",
            f"slots checked {self.slots_checked}, calendar-excluded {self.calendar_excluded}, scheduled rows in "
            f"uncertain windows {self.rows_uncertain}",
            f"ops: {', '.join(f'{k} {n}' for k, n in sorted(self.ops_by_outcome.items())) or 'none'}",
            f"faults: {', '.join(f'{k} {n}' for k, n in sorted(self.faults_by_kind.items())) or 'none'}",
            f"after heal: every shard led in {led}; lateness ms p50 {late.get('p50')} p99 {late.get('p99')} max "
            f"{late.get('max')} ({late.get('count', 0)} rows)",
            f"audit: {'none' if self.audit_clean is None else 'clean' if self.audit_clean else 'findings'}",
            f"service gaps per shard (bound {self.service_gap_bound_ms} ms): "
            + (
                ", ".join(
                    f"{shard}: {g.longest_ms}{' OVER' if g.longest_ms > self.service_gap_bound_ms else ''}"
                    for shard, g in sorted(self.service_gaps.items())
                )
                or "none"
            ),
        ]
        for rule, found in self.findings().items():
            if not found:
                continue
            lines.append(f"{rule}: {len(found)}")
            lines += [f"  - {_finding_text(f)}" for f in found[:shown]]
            if len(found) > shown:
                lines.append(f"  ... and {len(found) - shown} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        d["service_gaps"] = {str(k): v for k, v in d["service_gaps"].items()}
        d["window_ms"] = list(self.window_ms)
        return d


def _finding_text(f: Finding) -> str:
    where = [
        x
        for x in (
            f.job and f"job {f.job}",
            f.slot_ms is not None and f"slot {f.slot_ms}",
            f.shard is not None and f"shard {f.shard}",
        )
        if x
    ]
    return f"{', '.join(where)}: {f.detail}" if where else f.detail


def _schedule_text(job: Job) -> str:
    s = job.schedule
    return f"cron {s.cron!r}" if s.cron else f"every {s.interval_ms} ms" if s.interval_ms else f"at {s.at_ms}"


# -- the whole -------------------------------------------------------------------------------------------------


def check(history: History) -> Report:
    """Judge the history by rules 1-8 of the soak's design."""
    model = build_model(history)
    skew = history.between_nodes_ms  # the fence rules compare stamps that two nodes wrote
    rows = history.ticks
    owed = owed_slots(model, history.started_ms, history.end_ms)
    by_slot = scheduled_rows(rows)
    unowed, uncertain = find_unowed(rows, model)
    report = Report(
        model=model.findings,
        duplicates=find_duplicates(rows),
        missing=find_missing(owed.owed, by_slot),
        not_final=find_not_final(rows, history.end_ms),
        unowed=unowed,
        fences=(
            find_fence_order(history.fences, skew)
            + find_stale_writes(rows, history.fences, skew)
            + find_stale_effects(history.effects, rows)
        ),
        effects=find_effect_errors(history.session_job, rows, history.effects),
        deliveries=find_delivery_errors(
            history.stream_job, rows, history.deliveries, history.started_ms, history.end_ms - STREAM_DRAIN_MARGIN_MS
        ),
        rows_by_status=dict(sorted(Counter(r.status for r in rows).items())),
        slots_checked=sum(len(s) for s in owed.owed.values()),
        calendar_excluded=owed.calendar_excluded,
        rows_uncertain=uncertain,
        time_to_all_led_ms=time_to_all_led(history.leaders, history.shards, history.heal_ms),
        faults_by_kind=dict(sorted(Counter(f.kind for f in history.faults).items())),
        ops_by_outcome=dict(sorted(Counter(f"{o.kind} {o.outcome}" for o in history.ops).items())),
        window_ms=(history.started_ms, history.end_ms),
        audit_clean=None if history.audit is None else bool(history.audit.get("clean")),
    )
    report.liveness = find_liveness(history, model, owed.owed, report.time_to_all_led_ms)
    after_heal = history.heal_ms + round((history.ttl_s + history.settle_s) * 1000)
    report.lateness_ms = percentiles(lateness_ms(rows, model, after_heal))
    shards = {shard_for(s.id, history.shards) for s in history.static_jobs} if history.shards > 0 else set()
    report.service_gaps = service_gaps(rows, shards, history.started_ms, history.end_ms)
    report.service_gap_bound_ms = service_gap_bound_ms(history.faults, history.ttl_s, history.settle_s, history.end_ms)
    report.audit = find_audit_disagreement(history, model, report.findings())
    return report


__all__ = [
    "INDETERMINATE_TAIL_S",
    "Finding",
    "JobPhase",
    "Report",
    "ServiceGap",
    "State",
    "Timeline",
    "build_model",
    "build_timeline",
    "check",
]
