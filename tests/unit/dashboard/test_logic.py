"""The dashboard's pure parts: percentiles from histogram buckets, the charts' series, leader colours,
sessions and the guards' small decisions."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from importlib import resources

import pytest
from prometheus_client import CollectorRegistry, Counter

from shardcron.dashboard import present
from shardcron.dashboard.guard import FIELD_LIMITS, FieldTooLong, Visitor, field, local_path
from shardcron.dashboard.history import MetricsHistory, Reading, chart_series, quantile, read_registry
from shardcron.dashboard.live import visitor_key, watch_refusal
from shardcron.dashboard.sessions import Session, Sessions
from shardcron.metrics import CountedHistogram
from shardcron.model import RecordedMiss, Tick, TickStatus
from shardcron.rules.deadlines import DeadlineKind
from shardcron.rules.scopes import Role, Token
from shardcron.runtime import crashpoints
from shardcron.runtime.lifeline import Lifeline
from shardcron.spec.job import job_from_dict
from tests.support.aio import until

BOUNDS = (0.001, 0.01, 0.1)


@pytest.mark.parametrize(
    "cumulative, q, expected, why",
    [
        ((0, 0, 0, 0), 0.99, None, "no observations: no percentile"),
        ((10, 10, 10, 10), 0.5, 0.0005, "all in the first bucket: linear from 0"),
        ((0, 10, 10, 10), 0.5, 0.0055, "all in (1 ms, 10 ms]: the middle of it"),
        ((50, 100, 100, 100), 0.99, 0.001 + 0.009 * (49 / 50), "the rank falls in the second bucket"),
        ((0, 0, 0, 4), 0.5, 0.1, "in the +Inf bucket: the highest finite bound"),
        ((100, 100, 100, 100), 1.0, 0.001, "q = 1: the top of the bucket holding the last"),
    ],
)
def test_quantile(cumulative, q, expected, why):
    got = quantile(BOUNDS, cumulative, q)
    assert (got is None and expected is None) or math.isclose(got, expected, rel_tol=1e-9), why


def _registry_with(observations: dict[str, list[float]], fenced: int, failed: int) -> CollectorRegistry:
    reg = CollectorRegistry()
    h = CountedHistogram("shardcron_tick_lateness_seconds", "x", "shard", BOUNDS, registry=reg)
    for shard, values in observations.items():
        for v in values:
            h.observe(shard, v)
    Counter("shardcron_fenced_writes_total", "x", registry=reg).inc(fenced)
    ticks = Counter("shardcron_ticks_total", "x", ["namespace", "status"], registry=reg)
    ticks.labels("default", "failed").inc(failed)
    ticks.labels("default", "succeeded").inc(1000)
    return reg


def test_a_reading_of_a_real_registry_and_the_series_between_two():
    before = read_registry(_registry_with({"0": [0.0005] * 10}, fenced=1, failed=2).collect(), 100.0)
    after = read_registry(
        _registry_with({"0": [0.0005] * 10 + [0.05] * 10, "1": [0.005] * 4}, fenced=4, failed=2).collect(), 105.0
    )
    assert before.bounds == BOUNDS and before.lateness["0"] == (10, 10, 10, 10)
    assert before.fenced == 1 and before.failed == 2, "only failed ticks count as failures"
    s = chart_series([before, after])
    assert s["t"] == [105.0]
    # Between the readings shard 0 started 10 ticks, all in (10 ms, 100 ms]: not the earlier fast ones.
    assert s["lateness_p50_ms"]["0"] == [55.0]
    assert s["lateness_p99_ms"]["1"] == [round((0.001 + 0.009 * 0.99) * 1000, 3)], "a shard new since"
    assert s["fenced"] == [3] and s["failed"] == [0] and s["caught_up"] == [0]


def test_a_shard_that_started_nothing_in_an_interval_has_a_gap_not_a_zero():
    r = [Reading(t, BOUNDS, {"0": (5, 5, 5, 5)}) for t in (0.0, 5.0, 10.0)]
    assert chart_series(r)["lateness_p99_ms"]["0"] == [None, None]
    assert chart_series(r[:1])["t"] == [], "one reading: no interval yet"


@pytest.mark.parametrize("nodes", [["n0", "n1", "n2"], ["a", "b", "c", "d", "e"], [f"node-{i}" for i in range(8)]])
def test_leader_colours_are_distinct_while_there_are_colours_enough(nodes):
    colours = present.leader_colours(nodes)
    assert len(set(colours.values())) == len(nodes)
    assert set(colours.values()) <= set(present.LEADER_PALETTE)


def test_a_node_keeps_its_colour_when_another_leaves():
    before = present.leader_colours(["n0", "n1", "n2"])
    for gone in before:
        after = present.leader_colours([n for n in before if n != gone])
        # The dead node's shards move to the others: they must look different from before.
        assert all(after[n] == before[n] for n in after), f"{gone} left and another node changed colour"
        assert before[gone] not in after.values()


def test_sessions_expire_when_idle_and_the_oldest_go_first():
    s = Sessions(idle_s=10, max_sessions=2)
    a = s.open("secret-a", None, now=0.0)
    assert s.find(a.id, now=9.0) == a
    assert s.find(a.id, now=18.0) == a, "each request renews it"
    assert s.find(a.id, now=28.5) is None, "idle for longer than idle_s"
    b, c, d = (s.open(x, None, now=30.0) for x in "bcd")
    assert s.find(b.id, 30.0) is None and s.find(c.id, 30.0) == c and s.find(d.id, 30.0) == d
    assert a.csrf != c.csrf and len(c.id) >= 40
    s.close(c.id)
    assert s.find(c.id, 30.0) is None
    assert s.find(None, 30.0) is None and s.find("forged", 30.0) is None


@pytest.mark.parametrize(
    "target, expected",
    [
        # paths of this site go through as they are
        ("/jobs?q=a", "/jobs?q=a"),
        ("/cluster", "/cluster"),
        ("/job?id=a%2Fb&namespace=team-a", "/job?id=a%2Fb&namespace=team-a"),
        ("/jobs?q=%C3%A9t%C3%A9", "/jobs?q=%C3%A9t%C3%A9"),
        # nothing, or not a path
        (None, "/"),
        ("", "/"),
        ("jobs", "/"),
        ("evil.example/x", "/"),
        # another host or scheme
        ("https://evil.example/", "/"),
        ("http://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("//evil.example/x", "/"),
        ("///evil.example/x", "/"),
        ("/\\evil.example", "/"),
        ("\\\\evil.example", "/"),
        ("/x\\..\\evil", "/"),
        # browsers drop tabs and newlines: /<tab>/x is //x (the finding: /login?next=/%09/evil.example/phish)
        ("/\t/evil.example/phish", "/"),
        ("/%09/evil.example/phish", "/"),
        ("\t//evil.example", "/"),
        ("/\n/evil.example", "/"),
        ("/%0a/evil.example", "/"),
        ("/%0D%0A/evil.example", "/"),
        (" //evil.example", "/"),
        # control and format characters (NUL, DEL, bidi overrides, zero-width space)
        ("/jobs\x00", "/"),
        ("/jobs\x7f", "/"),
        ("/jobs\u202e", "/"),
        ("/jobs\u200b", "/"),
        ("/%E2%80%AEjobs", "/"),
        # encoded slashes and backslashes, once or twice
        ("/%2Fevil.example", "/"),
        ("/%2fevil.example", "/"),
        ("/%5Cevil.example", "/"),
        ("/%252Fevil.example", "/"),
        ("%2F%2Fevil.example", "/"),
        ("/%25252525252F", "/"),
        # over the field's limit
        ("/" + "a" * 5000, "/"),
    ],
)
def test_after_login_only_a_path_of_this_site(target, expected):
    assert local_path(target) == expected


def test_palette_css_has_a_class_for_every_colour_the_pages_use():
    css = present.palette_css()
    for colour in (*present.LEADER_PALETTE, present.NO_LEADER, present.MISSED_COLOUR, *present.STATUS_COLOURS.values()):
        assert colour in css
    assert ".cnone" in css and ".s-failed" in css


def test_the_metrics_sampler_is_a_task_on_the_loop_and_its_stop_is_no_death():
    told: list[tuple[str, BaseException | None]] = []
    lifeline = Lifeline(lambda name, error: told.append((name, error)))
    history = MetricsHistory(CollectorRegistry(), every_s=0.05, lifeline=lifeline)

    async def scenario() -> None:
        history.start()
        await until(lambda: len(history.series()["t"]) >= 2, "three readings (two intervals)")
        assert not [t for t in threading.enumerate() if t.name == "dashboard-metrics"], "a task, not a thread"
        await history.stop()
        await history.stop()  # the node's stop and the server's both stop it: the second does nothing

    asyncio.run(scenario())
    assert told == []
    asyncio.run(MetricsHistory(CollectorRegistry()).stop())  # never started: nothing to wait for


def test_a_metrics_sampler_that_crashes_is_reported_to_the_lifeline(monkeypatch):
    told: list[tuple[str, BaseException | None]] = []
    lifeline = Lifeline(lambda name, error: told.append((name, error)))
    history = MetricsHistory(CollectorRegistry(), every_s=0.01, lifeline=lifeline)

    def fail(name: str | None = None) -> None:
        raise RuntimeError(f"a bug in {name}")

    monkeypatch.setattr(crashpoints, "fail_worker", fail)

    async def scenario() -> None:
        history.start()
        await until(lambda: bool(told), "the sampler's death to be told")

    asyncio.run(scenario())
    assert [(name, str(error)) for name, error in told] == [("dashboard-metrics", "a bug in dashboard-metrics")]


def test_the_scripts_colours_are_defined_in_python_only():
    colours = json.loads(present.script_colours())
    assert list(colours["status"].items()) == list(present.STATUS_COLOURS.items()), "the timeline's order too"
    assert colours["series"] == list(present.LEADER_PALETTE) and colours["counters"] == present.COUNTER_COLOURS
    assert colours["missed"] == present.MISSED_COLOUR
    script = (resources.files("shardcron.dashboard") / "static" / "app.js").read_text()
    assert not re.findall(r"#[0-9a-fA-F]{3,8}\b", script), "app.js takes its colours from the page"


def _visitor(token: Token | None, session_id: str = "") -> Visitor:
    return Visitor(Session(session_id, None, token, csrf=""), by_bearer=not session_id)


TEAM_A_READER = Token("reader-a", "sha256:" + "0" * 64, Role.READ, frozenset({"team-a"}))


@pytest.mark.parametrize(
    "namespace, refused", [("team-a", False), ("team-b", True), ("", True), ("default", True), ("Not A Name!", True)]
)
def test_a_job_stream_is_refused_before_it_opens_when_the_api_would_refuse_it(namespace, refused):
    reason = watch_refusal(_visitor(TEAM_A_READER), namespace)
    assert (reason is not None) is refused, reason
    assert watch_refusal(_visitor(None, "s1"), "team-b") is None, "without tokens the API decides"


def test_a_visitor_is_its_token_else_its_session_else_its_address():
    assert visitor_key(_visitor(TEAM_A_READER, "s1"), "10.0.0.1") == visitor_key(_visitor(TEAM_A_READER), "10.0.0.2")
    assert visitor_key(_visitor(None, "s1"), "10.0.0.1") != visitor_key(_visitor(None, "s2"), "10.0.0.1")
    assert visitor_key(_visitor(None), "10.0.0.1") != visitor_key(_visitor(None), "10.0.0.2")


@pytest.mark.parametrize("name", sorted(FIELD_LIMITS))
def test_every_form_field_has_a_limit_named_in_its_error(name):
    limit = FIELD_LIMITS[name]
    assert field({name: "x" * limit}, name) == "x" * limit
    with pytest.raises(FieldTooLong, match=f"^{name}: at most {limit} characters, got {limit + 1}$"):
        field({name: "x" * (limit + 1)}, name)
    with pytest.raises(FieldTooLong, match=f"^{name}: expected text"):
        field({name: object()}, name)
    assert field({}, name, "dflt") == "dflt"


# -- missed deadlines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({}, "none"),
        ({"deadline": "1s"}, "succeed within 1s"),
        ({"start_deadline": "30s", "heartbeat": "5m"}, "start within 30s, acked within 5m"),
        (
            {"start_deadline": "30s", "deadline": "1m", "heartbeat": "2m"},
            "start within 30s, succeed within 1m, acked within 2m",
        ),
    ],
)
def test_a_jobs_deadlines_read_as_what_must_happen_within_what(fields, expected):
    job = job_from_dict({"id": "j", "every": "1h", **fields})
    assert present.deadlines_text(job) == expected


@pytest.mark.parametrize(
    "kinds, texts",
    [
        ((), []),
        (("deadline",), ["missed deadline"]),
        (("start_deadline", "deadline", "heartbeat"), ["missed start_deadline", "missed deadline", "missed heartbeat"]),
    ],
)
def test_a_mark_per_missed_deadline_says_which_and_what_it_means(kinds, texts):
    marks = present.missed_marks(kinds)
    assert [m.text for m in marks] == texts
    assert [m.title for m in marks] == [present.MISSED_MEANING[DeadlineKind(k)] for k in kinds]
    assert set(present.MISSED_MEANING) == set(DeadlineKind), "every kind has its meaning"


def test_a_tick_point_carries_its_ack_and_its_missed_deadlines_for_the_live_table():
    tick = Tick("default/j", 1_000, 0, 1, "n0", TickStatus.SUCCEEDED, acked_at_ms=2_000, missed_deadlines=("deadline",))
    point = present.tick_point(tick)
    assert point["acked"] == present.utc(2_000)
    assert point["missed"] == [{"text": "missed deadline", "title": present.MISSED_MEANING[DeadlineKind.FINISH]}]
    assert json.loads(json.dumps(point)) == point
    quiet = present.tick_point(Tick("default/j", 1_000, 0, 1, "n0", TickStatus.RUNNING))
    assert (quiet["acked"], quiet["missed"]) == ("—", [])


def test_the_jobs_that_missed_a_deadline_are_listed_once_each_with_their_newest_slot():
    misses = [  # newest recorded first, as ListDeadlineMisses answers
        RecordedMiss("b", 3_000, "heartbeat", 9_000),
        RecordedMiss("team-a\x1fd", 2_000, "deadline", 8_000),
        RecordedMiss("b", 1_000, "deadline", 7_000),  # b's older slot: not shown
        RecordedMiss("team-a\x1fd", 2_000, "start_deadline", 6_000),  # d's same slot: shown with it
    ]
    got = present.jobs_that_missed(misses)
    assert [(m.key.namespace, m.key.id, m.slot_ms, [x.text for x in m.marks]) for m in got] == [
        ("default", "b", 3_000, ["missed heartbeat"]),
        ("team-a", "d", 2_000, ["missed deadline", "missed start_deadline"]),
    ]
    assert present.jobs_that_missed([]) == []
