"""The audit's rules, one table per rule, one row per case. No database: rows are plain ``Tick``s."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shardcron.audit.report import AuditReport, JobSummary
from shardcron.cli.admin import format_report
from shardcron.cli.common import parse_time_ms
from shardcron.errors import ConfigError
from shardcron.model import CatchUp, Tick, TickStatus
from shardcron.rules.audit import (
    OVERLAP_SLACK_MS,
    FenceRaise,
    Finding,
    FindingKind,
    MissingSlots,
    find_duplicates,
    find_false_overlap,
    find_missing,
    find_stale,
    find_unresolved,
)
from shardcron.rules.policies import OVERLAP_SKIP_REASON, plan_catch_up
from shardcron.spec.job import job_from_dict

S = 1000  # one second; the test job runs every second, at whole seconds


def tick(
    job_id: str = "j",
    at: int = S,
    *,
    shard: int = 0,
    fence: int = 100,
    node: str = "a",
    status: TickStatus = TickStatus.SUCCEEDED,
    manual: bool = False,
    claimed: int | None = None,
    started: int | None = None,
    finished: int | None = None,
    error: str | None = None,
) -> Tick:
    return Tick(
        job_id,
        at,
        shard,
        fence,
        node,
        status,
        attempt=1,
        manual=manual,
        claimed_at_ms=claimed,
        started_at_ms=started,
        finished_at_ms=finished,
        error=error,
    )


# -- duplicates ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows, expected",
    [
        pytest.param([], [], id="no rows"),
        pytest.param([tick(at=S), tick(at=2 * S)], [], id="one row per slot"),
        pytest.param([tick("a", S), tick("b", S)], [], id="two jobs, same time"),
        pytest.param([tick(at=S), tick(at=S, fence=200, node="b")], [("j", S, 2)], id="two rows"),
        pytest.param([tick(at=S)] * 3 + [tick(at=2 * S)], [("j", S, 3)], id="three rows"),
        pytest.param([tick(at=S), tick(at=S, manual=True)], [], id="a manual row is not a duplicate"),
        pytest.param([tick(at=2 * S)] * 2 + [tick(at=S)] * 2, [("j", S, 2), ("j", 2 * S, 2)], id="oldest first"),
    ],
)
def test_find_duplicates(rows, expected):
    found = find_duplicates(rows)
    assert [(f.job_id, f.scheduled_at_ms, int(f.detail.split()[0])) for f in found] == expected
    assert all(f.kind is FindingKind.DUPLICATE for f in found)


def test_a_duplicate_names_each_row():
    [f] = find_duplicates([tick(fence=100, node="a"), tick(fence=200, node="b", status=TickStatus.RUNNING)])
    assert f.detail == "2 rows for one slot: fence 100 on a (succeeded), fence 200 on b (running)"


# -- missing ---------------------------------------------------------------------------------


def every_second(**fields):
    job = job_from_dict({"id": "j", "every": "1s"})
    return replace(job, **fields)


def rows(*slots_s: int, claimed_lead_s: int = 1) -> dict[int, int]:
    """Present slots (in seconds) -> claimed one second ahead, as the loop's lookahead does."""
    return {s * S: (s - claimed_lead_s) * S for s in slots_s}


def secs(*slots_s: int) -> tuple[int, ...]:
    return tuple(s * S for s in slots_s)


@pytest.mark.parametrize(
    "job, present, window, now_s, expected",
    [
        pytest.param(every_second(), rows(1, 2, 3, 4, 5), (0, 5), 100, MissingSlots(5, (), ()), id="all there"),
        pytest.param(every_second(), rows(1, 2, 4, 5), (0, 5), 100, MissingSlots(5, secs(3), ()), id="a gap"),
        pytest.param(every_second(), {}, (0, 5), 100, MissingSlots(5, secs(1, 2, 3, 4, 5), ()), id="no rows"),
        pytest.param(
            every_second(), rows(2, 3), (1, 3), 100, MissingSlots(2, (), ()), id="from is exclusive, to inclusive"
        ),
        pytest.param(
            every_second(active_since_ms=2500),
            rows(3, 4, 5),
            (0, 5),
            100,
            MissingSlots(3, (), ()),
            id="nothing owed before active_since",
        ),
        pytest.param(
            every_second(active_since_ms=3 * S),
            rows(4, 5),
            (0, 5),
            100,
            MissingSlots(2, (), ()),
            id="a slot at active_since is not owed",
        ),
        pytest.param(
            every_second(active_since_ms=9 * S),
            {},
            (0, 5),
            100,
            MissingSlots(0, (), ()),
            id="a job newer than the window",
        ),
        pytest.param(
            every_second(), rows(1, 2, 3), (0, 10), 3, MissingSlots(3, (), ()), id="slots after now are not owed yet"
        ),
        # A paused job owes nothing after its last row: the pause, or a leader that
        # did not catch up a paused job's backlog.
        pytest.param(
            every_second(paused=True),
            rows(1, 2, 3),
            (0, 10),
            100,
            MissingSlots(3, (), ()),
            id="paused: nothing after the last row",
        ),
        pytest.param(
            every_second(paused=True),
            rows(1, 3),
            (0, 10),
            100,
            MissingSlots(3, secs(2), ()),
            id="paused: a gap before the last row",
        ),
        pytest.param(
            every_second(paused=True), {}, (0, 10), 100, MissingSlots(0, (), ()), id="paused: no rows, nothing owed"
        ),
        pytest.param(
            every_second(),
            {S: None, 3 * S: None},
            (0, 3),
            100,
            MissingSlots(3, secs(2), ()),
            id="a row without a claim time counts as claimed at its slot",
        ),
        # Rows after the window are not checked, but say when the slots before them were caught up.
        pytest.param(
            every_second(),
            rows(1, 2, 20),
            (0, 5),
            100,
            MissingSlots(5, secs(3, 4, 5), ()),
            id="the next row is after the window",
        ),
    ],
)
def test_find_missing(job, present, window, now_s, expected):
    assert find_missing(job, present, window[0] * S, window[1] * S, now_ms=now_s * S) == expected


def test_slots_beyond_the_catch_up_window_are_excused_not_missing():
    """A leader back at R after an outage writes rows only for slots in [R - window, R]
    (policies.plan_catch_up, for every policy); the older ones are excused."""
    job = every_second(catchup=CatchUp.NONE, catchup_window_ms=5 * S)
    back_at = 40 * S
    plan = plan_catch_up(job.catchup, job.catchup_window_ms, secs(*range(21, 41)), back_at)
    present = rows(*range(1, 21)) | {s: back_at for s in plan.skip} | rows(*range(41, 61))
    result = find_missing(job, present, 0, 60 * S, now_ms=100 * S)
    assert result == MissingSlots(60, (), secs(*range(21, 35)))
    assert len(result.excused) == plan.beyond_window

    # The same, but the catch-up lost the first slot it owed: that one is missing.
    present.pop(35 * S)
    assert find_missing(job, present, 0, 60 * S, now_ms=100 * S) == MissingSlots(60, secs(35), secs(*range(21, 35)))


def test_a_gap_not_yet_caught_up_is_owed_if_inside_the_window_as_of_now():
    job = every_second(catchup_window_ms=5 * S)
    result = find_missing(job, rows(*range(1, 11)), 0, 20 * S, now_ms=20 * S)
    # A leader back now would still write rows for 15..20: those are missing, 11..14 are past saving.
    assert result == MissingSlots(20, secs(*range(15, 21)), secs(11, 12, 13, 14))


def test_find_missing_once_and_cron_jobs():
    once = job_from_dict({"id": "o", "at": "2030-01-01T00:00:05Z"})
    at = once.schedule.at_ms
    assert find_missing(once, {}, at - 10 * S, at + 10 * S, now_ms=at + 60 * S) == MissingSlots(1, (at,), ())
    assert find_missing(once, {at: at - S}, at - 10 * S, at + 10 * S, now_ms=at + 60 * S) == MissingSlots(1, (), ())
    assert find_missing(once, {}, at, at + 10 * S, now_ms=at + 60 * S) == MissingSlots(0, (), ())

    cron = job_from_dict({"id": "c", "cron": "*/15 * * * * *"})  # seconds first: :00, :15, :30, :45
    minute = 60 * S
    present = {s: s - S for s in (15 * S, 45 * S, 60 * S)}
    assert find_missing(cron, present, 0, minute, now_ms=2 * minute) == MissingSlots(4, (30 * S,), ())


# -- stale fences ----------------------------------------------------------------------------

F1, F2, F3 = 100, 200, 300
RAISES = [FenceRaise(0, F1, "a", 1 * S), FenceRaise(0, F2, "b", 5 * S), FenceRaise(0, F3, "c", 9 * S)]


@pytest.mark.parametrize(
    "row, tolerance, expected",
    [
        pytest.param(tick(fence=F2, claimed=6 * S, started=7 * S), 0, None, id="current fence"),
        pytest.param(tick(fence=F1, claimed=4 * S, started=4500), 0, None, id="all before the raise"),
        pytest.param(tick(fence=F1, claimed=5 * S), 0, None, id="at the raise itself"),
        pytest.param(
            tick(fence=F1, claimed=6 * S),
            0,
            "claimed at 1970-01-01T00:00:06.000Z under fence 100, "
            "after fence 200 was raised at 1970-01-01T00:00:05.000Z by b",
            id="claimed after",
        ),
        pytest.param(tick(fence=F1, claimed=4 * S, started=6 * S), 0, "started", id="started after"),
        pytest.param(
            tick(fence=F1, claimed=6 * S, started=6 * S),
            0,
            "claimed at 1970-01-01T00:00:06.000Z and started at",
            id="both",
        ),
        pytest.param(tick(fence=F1, claimed=7 * S), 2 * S, None, id="within the clock tolerance"),
        pytest.param(tick(fence=F1, claimed=7 * S + 1), 2 * S, "claimed", id="beyond the clock tolerance"),
        pytest.param(tick(fence=F1, claimed=6 * S, shard=1), 0, None, id="another shard's raise"),
        # take_over rewrote an adopted orphan's fence: its old claim time is no finding.
        pytest.param(tick(fence=F2, claimed=4 * S, started=6 * S), 0, None, id="an adopted orphan"),
        pytest.param(tick(fence=F2, claimed=10 * S), 0, "after fence 300", id="stale against a later fence"),
        pytest.param(tick(fence=F1, claimed=10 * S), 0, "after fence 200", id="the earliest newer raise is named"),
        pytest.param(tick(fence=F3, claimed=99 * S), 0, None, id="the newest fence"),
        pytest.param(tick(fence=0, claimed=2 * S), 0, "after fence 100", id="a fence never raised"),
        pytest.param(tick(fence=F1), 0, None, id="no claim or start time"),
    ],
)
def test_find_stale(row, tolerance, expected):
    found = find_stale([row], RAISES, tolerance)
    if expected is None:
        assert found == []
    else:
        [f] = found
        assert expected in f.detail
        assert (f.kind, f.job_id, f.shard, f.fence) == (FindingKind.STALE_FENCE, "j", row.shard, row.fence)
        assert f.node_id == "a"


def test_find_stale_with_raises_given_in_any_order():
    assert find_stale([tick(fence=F1, claimed=6 * S)], list(reversed(RAISES)))[0].detail.endswith("by b")
    assert find_stale([tick(fence=F1, claimed=6 * S)], []) == []


# -- unresolved ------------------------------------------------------------------------------

NOW = 100 * S
GRACE = 60 * S


@pytest.mark.parametrize(
    "row, live, expected",
    [
        pytest.param(tick(at=30 * S, status=TickStatus.CLAIMED), None, True, id="old claimed"),
        pytest.param(tick(at=30 * S, status=TickStatus.RUNNING), None, True, id="old running"),
        pytest.param(tick(at=30 * S, status=TickStatus.RUNNING, manual=True), None, True, id="manual, old running"),
        pytest.param(tick(at=50 * S, status=TickStatus.RUNNING), None, False, id="within the grace"),
        pytest.param(tick(at=40 * S, status=TickStatus.CLAIMED), None, False, id="exactly at the grace"),
        pytest.param(tick(at=30 * S, status=TickStatus.SUCCEEDED), None, False, id="final: succeeded"),
        pytest.param(tick(at=30 * S, status=TickStatus.FAILED), None, False, id="final: failed"),
        pytest.param(tick(at=30 * S, status=TickStatus.SKIPPED), None, False, id="final: skipped"),
        pytest.param(tick(at=30 * S, status=TickStatus.ABANDONED), None, False, id="final: abandoned"),
        pytest.param(tick(at=30 * S, status=TickStatus.RUNNING), {0}, False, id="a live leader will settle it"),
        pytest.param(tick(at=30 * S, status=TickStatus.RUNNING, shard=1), {0}, True, id="its shard has no leader"),
    ],
)
def test_find_unresolved(row, live, expected):
    leaders = None if live is None else live.__contains__
    found = find_unresolved([row], now_ms=NOW, grace_ms=GRACE, live_leaders=leaders)
    assert bool(found) is expected
    if found:
        assert found[0].kind is FindingKind.UNRESOLVED and found[0].status == row.status.value
        assert "70s after its slot" in found[0].detail
        assert ("no live leader" in found[0].detail) is (live is not None)


# -- false overlap -----------------------------------------------------------------------------


def ran(at_s: float, finished_s: float | None, job_id: str = "j", started_s: float | None = None, **kw) -> Tick:
    """A run of slot ``at_s`` that started at ``started_s`` (its slot when not given) and finished at
    ``finished_s`` (None: still running)."""
    status = kw.pop("status", TickStatus.SUCCEEDED if finished_s is not None else TickStatus.RUNNING)
    return tick(
        job_id,
        int(at_s * S),
        status=status,
        started=int((at_s if started_s is None else started_s) * S),
        finished=None if finished_s is None else int(finished_s * S),
        **kw,
    )


def claimed(at_s: float, job_id: str = "j") -> Tick:
    """Slot ``at_s``, claimed and not started."""
    return tick(job_id, int(at_s * S), status=TickStatus.CLAIMED)


def overlap_skip(at_s: float, job_id: str = "j", decided_s: float | None = None) -> Tick:
    decided = int((at_s if decided_s is None else decided_s) * S)
    return tick(
        job_id, int(at_s * S), status=TickStatus.SKIPPED, started=decided, finished=decided, error=OVERLAP_SKIP_REASON
    )


SLACK_S = OVERLAP_SLACK_MS / S


@pytest.mark.parametrize(
    "rows, expected",
    [
        pytest.param([], [], id="no rows"),
        pytest.param([ran(1, 2.5), overlap_skip(2), ran(3, 4.5)], [], id="skipped while the run went on"),
        pytest.param([ran(1, None), overlap_skip(2), overlap_skip(3)], [], id="the run is still unresolved"),
        pytest.param(
            [ran(1, 1.5), overlap_skip(3), overlap_skip(4)],
            [3, 4],
            id="the run was over before each skip (the re-put bug)",
        ),
        pytest.param([ran(1, 3 - SLACK_S), overlap_skip(3)], [], id="finished within the slack: no finding"),
        pytest.param([ran(1, 3 - SLACK_S - 0.001), overlap_skip(3)], [3], id="finished just beyond the slack"),
        pytest.param([overlap_skip(2)], [2], id="no earlier run at all"),
        pytest.param([overlap_skip(2), ran(3, None)], [2], id="a later run does not cover an earlier skip"),
        pytest.param([ran(1, None, job_id="other"), overlap_skip(2)], [2], id="another job's run does not count"),
        pytest.param([ran(1.5, 3, manual=True), overlap_skip(2)], [], id="a manual run in flight covers it"),
        pytest.param(
            [ran(1, 3, status=TickStatus.FAILED), overlap_skip(2)],
            [],
            id="a failed run, still retrying then, covers it",
        ),
        pytest.param([claimed(1), overlap_skip(2)], [2], id="a claimed, unstarted slot does not cover it"),
        pytest.param(
            [ran(1, 2.5, started_s=2.181), overlap_skip(2, decided_s=2.016)],
            [2],
            id="an earlier slot claimed but started after the skip (a catch-up waiting its turn)",
        ),
        pytest.param(
            [ran(1, None, started_s=2.181), overlap_skip(2, decided_s=2.016)],
            [2],
            id="... still running now, started after the skip",
        ),
        pytest.param(
            [ran(0, 1.9 - SLACK_S), ran(1, 2.5, started_s=2.181), overlap_skip(2, decided_s=2.016)],
            [2],
            id="... and the run before it had finished beyond the slack",
        ),
        pytest.param(
            [ran(1, 2.5, started_s=2.016), overlap_skip(2, decided_s=2.016)],
            [],
            id="started at the very moment of the skip: it covers it",
        ),
        pytest.param(
            [ran(0, 2.05), ran(1, 2.5, started_s=2.181), overlap_skip(2, decided_s=2.016)],
            [],
            id="the slot before the catch-up was still going: it covers it",
        ),
        pytest.param(
            [ran(1, 3, started_s=1.2, status=TickStatus.FAILED), overlap_skip(2)],
            [],
            id="a run in its retry backoff has started and not finished: it covers it",
        ),
        pytest.param(
            [tick(at=1 * S, status=TickStatus.SKIPPED, finished=1 * S, error="catch-up policy"), overlap_skip(2)],
            [2],
            id="a skipped row is not a run",
        ),
        pytest.param(
            [tick(at=2 * S, status=TickStatus.SKIPPED, finished=2 * S, error="catch-up policy")],
            [],
            id="other skips are not judged",
        ),
        pytest.param(
            [ran(1, 2.5), overlap_skip(2, decided_s=4)], [2], id="judged when the skip was decided, not at its slot"
        ),
    ],
)
def test_find_false_overlap(rows, expected):
    found = find_false_overlap(rows)
    assert [f.scheduled_at_ms for f in found] == [s * S for s in expected]
    assert all(f.kind is FindingKind.FALSE_OVERLAP and f.status == "skipped" for f in found)


def test_a_false_overlap_names_the_last_run():
    [f] = find_false_overlap([ran(1, 1.5), overlap_skip(3)])
    assert f.detail == (
        "skipped at 1970-01-01T00:00:03.000Z as overlapping, but no earlier run of the job had "
        "started and not finished (the last one finished at 1970-01-01T00:00:01.500Z)"
    )
    [f] = find_false_overlap([overlap_skip(3)])
    assert f.detail.endswith("(none had run)")


def test_a_false_overlap_names_the_earlier_slot_that_had_not_started():
    [f] = find_false_overlap([ran(1, 2.5, started_s=2.181), overlap_skip(2, decided_s=2.016)])
    assert f.detail.endswith(
        "(slot 1970-01-01T00:00:01.000Z was claimed and had not started: it started at 1970-01-01T00:00:02.181Z)"
    )
    [f] = find_false_overlap([claimed(1), overlap_skip(2)])
    assert f.detail.endswith("(slot 1970-01-01T00:00:01.000Z was claimed and had not started)")


# -- the report ------------------------------------------------------------------------------


def test_report_is_clean_only_without_findings_and_serialises():
    empty = AuditReport(10, [], [], [], [], {"j": JobSummary("j", slots_checked=10, ticks=10)}, excused=3)
    assert empty.clean()
    gap = replace(empty, missing=[Finding(FindingKind.MISSING, "j", 5 * S, "no tick row")])
    assert not gap.clean()
    d = json.loads(json.dumps(gap.to_dict()))
    assert d["clean"] is False and d["excused"] == 3
    assert d["missing"] == [
        {
            "kind": "missing",
            "job_id": "j",
            "scheduled_at_ms": 5 * S,
            "detail": "no tick row",
            "shard": None,
            "fence": None,
            "node_id": None,
            "status": None,
            "namespace": "default",
        }
    ]
    assert d["per_job"]["j"]["slots_checked"] == 10
    assert d["duplicates"] == d["stale_fence"] == d["unresolved"] == d["false_overlap"] == []
    phantom = replace(empty, false_overlap=find_false_overlap([overlap_skip(2)]))
    assert not phantom.clean() and phantom.findings()[FindingKind.FALSE_OVERLAP]
    assert phantom.to_dict()["false_overlap"][0]["kind"] == "false_overlap"


def test_the_text_report_caps_jobs_and_findings():
    per_job = {f"job-{n:03}": JobSummary(f"job-{n:03}", slots_checked=60, ticks=60) for n in range(80)}
    per_job["job-079"].missing = 30
    missing = [Finding(FindingKind.MISSING, "job-079", s * S, "no tick row") for s in range(1, 31)]
    text = format_report(AuditReport(4800, [], missing, [], [], per_job), shown=5)
    lines = text.splitlines()
    assert lines[0].endswith("80 jobs, 4800 slots, 0 ticks")
    assert lines[3].split()[:5] == ["job-079", "active", "60", "60", "30"]  # jobs with findings first
    assert "…and 30 more jobs, all clean" in lines
    assert text.count("    job-079  1970-") == 5 and "    …and 25 more" in lines
    assert lines[-1] == "FOUND: 30 missing"
    small = format_report(AuditReport(60, [], [], [], [], {"j": JobSummary("j", slots_checked=60)})).splitlines()
    assert small[0].endswith(": 1 job, 60 slots, 0 ticks") and small[-1] == "clean"
    assert small[3].split() == ["j", "active", "60", "0", "0", "0", "0", "0", "0", "0"]


def test_the_text_report_shows_false_overlaps_per_job_and_in_detail():
    found = find_false_overlap([ran(1, 1.5), overlap_skip(3), overlap_skip(4)])
    per_job = {"j": JobSummary("j", slots_checked=4, ticks=3, false_overlap=len(found))}
    lines = format_report(replace(AuditReport(4, [], [], [], [], per_job), false_overlap=found)).splitlines()
    assert lines[2].rstrip().endswith("FALSE OVERLAP") and lines[3].split()[-1] == "2"
    assert any(line.startswith("overlap skips with no started run going") and line.endswith(": 2") for line in lines)
    assert sum(line.split()[:2] == ["j", "1970-01-01T00:00:03.000Z"] for line in lines) == 1
    assert sum("no earlier run of the job had started and not finished" in line for line in lines) == 2
    assert lines[-1] == "FOUND: 2 false overlap"


# -- the command's time flags ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1772953200000", 1_772_953_200_000),
        ("2026-03-08T07:00:00Z", 1_772_953_200_000),
        ("2026-03-08T07:00:00+00:00", 1_772_953_200_000),
        ("2026-03-08T02:00:00-05:00", 1_772_953_200_000),
        ("2026-03-08T07:00:00", 1_772_953_200_000),  # no offset: UTC
        ("2026-03-08T07:00:00.123Z", 1_772_953_200_123),
        ("2026-03-08", 1_772_928_000_000),
        (" 0 ", 0),
    ],
)
def test_parse_time_ms(text, expected):
    assert parse_time_ms(text, "--from") == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "1.5", ""])
def test_parse_time_ms_refuses(text):
    with pytest.raises(ConfigError, match="--to: expected ISO-8601"):
        parse_time_ms(text, "--to")
