"""How values read on the pages: times, durations, statuses, a colour per leader. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

import mmh3

from shardcron.clock import rfc3339_ms
from shardcron.jobkey import JobKey, split_key
from shardcron.model import Job, RecordedMiss, ScheduleKind, Tick
from shardcron.rules.deadlines import DeadlineKind
from shardcron.spec.durations import format_duration_ms

# Eight colours far apart for the shard grid, readable under white text.
LEADER_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
NO_LEADER = "#9e9e9e"

STATUS_COLOURS = {
    "succeeded": "#2ca02c",
    "failed": "#d62728",
    "abandoned": "#ff7f0e",
    "skipped": "#9e9e9e",
    "running": "#1f77b4",
    "claimed": "#17becf",
}

# The health page's counters per interval: a fenced write is the alarming one.
COUNTER_COLOURS = {"fenced": "#d62728", "caught_up": "#1f77b4", "failed": "#ff7f0e"}

# The ring the timeline draws around a tick that missed a deadline (its point keeps its status colour).
MISSED_COLOUR = "#b00020"

# What missing each kind of deadline (rules/deadlines.py) means, for a mark's title.
MISSED_MEANING: dict[str, str] = {
    DeadlineKind.START: "the slot had not started by its start_deadline",
    DeadlineKind.FINISH: "the slot had not succeeded (and, with a heartbeat, been acked) by its deadline",
    DeadlineKind.HEARTBEAT: "the slot had not been acked (jobs ack) by its heartbeat",
}


def leader_colours(nodes: list[str]) -> dict[str, str]:
    """A distinct colour for each node, as stable as possible while nodes come and go.

    Each node wants the colour its name hashes to; in name order, a node whose
    colour is taken takes the next free one. A node keeps its colour unless a
    node earlier in name order arrives wanting the same one.
    """
    taken: dict[int, str] = {}
    out = {}
    for node in sorted(set(nodes)):
        want = mmh3.hash(node, signed=False) % len(LEADER_PALETTE)
        for step in range(len(LEADER_PALETTE)):
            slot = (want + step) % len(LEADER_PALETTE)
            if slot not in taken:
                break
        else:
            slot = want  # more nodes than colours: share (the cell names its leader anyway)
        taken[slot] = node
        out[node] = LEADER_PALETTE[slot]
    return out


def utc(ms: int | None) -> str:
    """``2026-01-01 00:00:05.000Z``; total, as ``clock.rfc3339_ms``: a stored instant outside years
    1-9999 reads "(out of range: N ms)" instead of failing the page."""
    if ms is None:
        return "—"
    return rfc3339_ms(int(ms)).replace("T", " ", 1)  # a space reads better in a table cell


def duration(ms: int | None) -> str:
    return "—" if ms is None else format_duration_ms(int(ms))


def schedule_text(job: Job) -> str:
    s = job.schedule
    tz = "" if s.timezone in ("", "UTC") else f" ({s.timezone})"
    if s.kind is ScheduleKind.CRON:
        return f"cron {s.cron}{tz}"
    if s.kind is ScheduleKind.INTERVAL:
        return f"every {format_duration_ms(s.interval_ms)}"
    return f"once at {utc(s.at_ms)}"


def deadlines_text(job: Job) -> str:
    """The job's deadlines, each from the slot's scheduled time: "start within 30s, succeed within 1s"."""
    parts = [
        f"{what} within {format_duration_ms(ms)}"
        for what, ms in (
            ("start", job.start_deadline_ms),
            ("succeed", job.deadline_ms),
            ("acked", job.heartbeat_ms),
        )
        if ms is not None
    ]
    return ", ".join(parts) or "none"


class MissedMark(NamedTuple):
    """A badge for one missed deadline: its text, and what it means as its title."""

    text: str
    title: str


def missed_marks(kinds: Sequence[str]) -> list[MissedMark]:
    """A mark per deadline kind missed (a tick's ``missed_deadlines``, a job's ``last_missed_deadlines``)."""
    return [MissedMark(f"missed {kind}", MISSED_MEANING.get(kind, f"missed its {kind}")) for kind in kinds]


class MissedSlot(NamedTuple):
    key: JobKey
    slot_ms: int
    marks: list[MissedMark]


def jobs_that_missed(misses: Sequence[RecordedMiss]) -> list[MissedSlot]:
    """One entry per job of ``misses`` (newest recorded first): its newest slot that missed a deadline, with
    every deadline that slot missed; in the order of each job's newest miss."""
    newest: dict[str, tuple[int, list[str]]] = {}
    for m in misses:
        slot, kinds = newest.setdefault(m.job_id, (m.scheduled_at_ms, []))
        if m.scheduled_at_ms == slot and m.kind not in kinds:
            kinds.append(m.kind)
    return [
        MissedSlot(split_key(job_id), slot, missed_marks(sorted(kinds))) for job_id, (slot, kinds) in newest.items()
    ]


def lateness_ms(tick: Tick) -> int | None:
    return None if tick.started_at_ms is None else tick.started_at_ms - tick.scheduled_at_ms


def tick_point(tick: Tick) -> dict:
    """A tick as the timeline and the live table take it (JSON)."""
    return {
        "slot_ms": tick.scheduled_at_ms,
        "status": tick.status.value,
        "lateness_ms": lateness_ms(tick),
        "attempt": tick.attempt,
        "manual": tick.manual,
        "node": tick.node_id,
        "fence": tick.fence,
        "slot": utc(tick.scheduled_at_ms),
        "started": utc(tick.started_at_ms),
        "finished": utc(tick.finished_at_ms),
        "error": tick.error or "",
        "acked": utc(tick.acked_at_ms),
        "missed": [mark._asdict() for mark in missed_marks(tick.missed_deadlines)],
    }


def palette_css() -> str:
    """The colour classes the pages use (no inline styles under the CSP): served as /palette.css."""
    rules = [f".c{c[1:]} {{ background: {c}; }}" for c in LEADER_PALETTE]
    rules.append(f".cnone {{ background: {NO_LEADER}; }}")
    rules += [f".s-{status} {{ background: {c}; }}" for status, c in STATUS_COLOURS.items()]
    rules.append(f".missed {{ background: {MISSED_COLOUR}; }}")
    return "\n".join(rules) + "\n"


def script_colours() -> str:
    """The colours app.js draws its charts with, as JSON for the page's ``<body data-colours>``: the
    script has none of its own, so each colour is defined here only (and no inline script is needed).

    ``status`` in the order the timeline lists them; ``series`` for one line per shard; ``missed`` for
    the ring around a tick that missed a deadline.
    """
    return json.dumps(
        {"status": STATUS_COLOURS, "series": LEADER_PALETTE, "counters": COUNTER_COLOURS, "missed": MISSED_COLOUR}
    )
