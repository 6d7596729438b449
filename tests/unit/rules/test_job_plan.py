"""rules/job_plan.py: what applying a job file would change, field by field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardcron.errors import InvalidJob
from shardcron.jobkey import join_key
from shardcron.model import Job
from shardcron.rules.job_plan import (
    ABSENT,
    SECRET_CHANGED,
    SECRET_VALUES,
    SOURCE_LABEL,
    FieldChange,
    JobChange,
    field_changes,
    has_secrets,
    plan,
    with_secret_checks,
    with_source,
)
from shardcron.spec.job import MAX_LABELS, job_from_dict


def job(job_id: str, namespace: str = "default", **fields) -> Job:
    schedule = {} if "cron" in fields else {"every": "1m"}
    return job_from_dict({"id": job_id, **schedule, "executor": {"kind": "noop"}, **fields, "namespace": namespace})


def http(headers: list[list[str]]) -> dict:
    return {"kind": "http", "url": "https://example.com/hook", "headers": headers}


@pytest.mark.parametrize(
    "old,new,expected",
    [
        (job("a"), job("a"), []),
        # what the store sets, or keeps on a re-apply, is no difference
        (replace(job("a"), version=7), job("a"), []),
        (job("a", paused=True), job("a"), []),
        (job("a"), job("a", every="5m"), [FieldChange("schedule.interval_ms", 60_000, 300_000)]),
        (
            job("a"),
            job("a", cron="0 3 * * *"),
            [FieldChange("schedule.cron", ABSENT, "0 3 * * *"), FieldChange("schedule.interval_ms", 60_000, ABSENT)],
        ),
        (job("a"), job("a", timeout="5s"), [FieldChange("timeout", "60000ms", "5000ms")]),
        (job("a"), job("a", labels={"team": "ops"}), [FieldChange("labels.team", ABSENT, "ops")]),
        (
            job("a", labels={"team": "ops"}),
            job("a", labels={"team": "web"}),
            [FieldChange("labels.team", "ops", "web")],
        ),
        (job("a"), job("a", jitter="10s"), [FieldChange("jitter", ABSENT, "10000ms")]),
        (job("a", retry={"max_attempts": 3}), job("a"), [FieldChange("retry.max_attempts", 3, 1)]),
        (
            job("a", executor=http([["X-Trace", "1"]])),
            job("a", executor=http([["X-Trace", "2"]])),
            [FieldChange("executor.headers", [["X-Trace", "1"]], [["X-Trace", "2"]])],
        ),
        # a secret reads masked on both sides (as the API answers it): its value alone is no difference seen
        (
            job("a", executor=http([["Authorization", "Bearer old"]])),
            job("a", executor=http([["Authorization", "Bearer new"]])),
            [],
        ),
    ],
)
def test_field_changes(old, new, expected):
    assert field_changes(old, new) == expected


def test_the_plan_sorts_each_job_of_the_file_and_each_of_its_namespaces_it_no_longer_has():
    stored = [
        job("same"),
        job("edited"),
        job("gone"),
        job("gone", namespace="team-a"),  # a namespace the file names
        job("elsewhere", namespace="team-b"),  # one it does not: not the file's business
    ]
    desired = [job("same"), job("edited", timeout="5s"), job("new"), job("new", namespace="team-a")]
    p = plan(desired, stored, ["default", "team-a"])
    assert [j.id for j in p.created] == ["new", join_key("team-a", "new")]
    assert p.changed == (JobChange("edited", (FieldChange("timeout", "60000ms", "5000ms"),)),)
    assert p.unchanged == ("same",)
    assert [j.id for j in p.not_in_file] == ["gone", join_key("team-a", "gone")]
    assert p.namespaces == ("default", "team-a")
    assert p.differs


@pytest.mark.parametrize(
    "desired,stored,differs",
    [
        ([], [], False),
        ([job("a")], [job("a")], False),
        ([job("a")], [], True),  # to create
        ([], [job("a")], True),  # not in the file
        ([job("a", every="5m")], [job("a")], True),  # changed
        ([], [job("a", namespace="team-b")], False),  # another namespace's job
    ],
)
def test_a_plan_differs_when_apply_would_change_anything(desired, stored, differs):
    assert plan(desired, stored, ["default"]).differs is differs


def test_the_source_label_is_added_unless_the_job_sets_it():
    assert with_source(job("a"), "jobs/prod.toml").labels == {SOURCE_LABEL: "jobs/prod.toml"}
    own = job("a", labels={SOURCE_LABEL: "generated"})
    assert with_source(own, "jobs/prod.toml") is own


@pytest.mark.parametrize(
    "labels,source",
    [
        ({f"k{i}": "v" for i in range(MAX_LABELS)}, "jobs.toml"),  # one label too many
        ({}, "x" * 300),  # a value past the label rules' bound
        ({}, "jobs\n.toml"),  # not printable
    ],
    ids=["too-many", "too-long", "control-char"],
)
def test_a_source_label_that_breaks_the_label_rules_is_refused_naming_labels(labels, source):
    with pytest.raises(InvalidJob) as e:
        with_source(job("a", labels=labels), source)
    assert e.value.field == "labels"


def test_a_secret_value_changed_alone_reads_the_same_until_a_server_says_otherwise():
    old = job("hook", executor=http([["Authorization", "Bearer old"]]))
    new = job("hook", executor=http([["Authorization", "Bearer new"]]))
    p = plan([new, job("plain")], [old, job("plain")], ["default"])
    assert (p.changed, p.unchanged) == ((), ("hook", "plain"))
    told = with_secret_checks(p, differing=["hook"], unchecked=[])
    assert told.changed == (JobChange("hook", (FieldChange(SECRET_VALUES, "***", SECRET_CHANGED),)),)
    assert (told.unchanged, told.secrets_unchecked, told.differs) == (("plain",), (), True)


def test_secret_values_no_server_compared_stay_unchanged_and_are_listed():
    same = job("hook", executor=http([["Authorization", "Bearer x"]]))
    p = with_secret_checks(plan([same], [same], ["default"]), differing=[], unchecked=["hook"])
    assert (p.unchanged, p.secrets_unchecked, p.differs) == (("hook",), ("hook",), False)


def test_a_servers_word_on_a_job_the_plan_already_changes_or_creates_changes_nothing():
    p = plan([job("new"), job("edited", timeout="5s")], [job("edited")], ["default"])
    assert with_secret_checks(p, differing=["new", "edited"], unchecked=["new"]) == p


@pytest.mark.parametrize(
    "executor,secret",
    [
        ({"kind": "noop"}, False),
        (http([["X-Team", "ops"]]), False),
        (http([["Authorization", "Bearer x"]]), True),
        ({**http([["X-Signature", "abc"]]), "secret_headers": ["X-Signature"]}, True),
        ({"kind": "redis-stream", "url": "redis://:pw@127.0.0.1:6379/0", "stream": "s"}, True),
        ({"kind": "redis-stream", "url": "redis://127.0.0.1:6379/0", "stream": "s"}, False),
    ],
)
def test_has_secrets(executor, secret):
    assert has_secrets(job("a", executor=executor)) is secret
