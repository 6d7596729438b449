"""Failure notifications, the pure parts: when one is owed, recovery detection, the default's rate
limit, the spec forms (job file, CLI, API) and the identity a notification carries."""

from __future__ import annotations

import json

import pytest

from shardcron.errors import ConfigError, InvalidJob
from shardcron.executors.admission import check_admissible
from shardcron.executors.identity import slot_uuid, tick_headers
from shardcron.leader.notification_context import NotificationContext, event, with_event_body
from shardcron.model import ExecutorKind, Tick, TickContext, TickStatus
from shardcron.rules.notification_rate import Rate, allows, parse_rate
from shardcron.rules.notifications import (
    GIVE_UP_AFTER_MS,
    Defaults,
    NotificationKind,
    Source,
    gives_up,
    owed_in,
    owed_kind,
    retry_after_ms,
    target_for,
)
from shardcron.spec.job import job_from_dict, job_from_json, job_to_json, redacted
from shardcron.spec.notifications import parse_cli
from shardcron.wire.convert import job_from_proto, job_to_proto

F, R = NotificationKind.ON_FAILURE, NotificationKind.ON_RECOVERY
S = TickStatus
HOOK = {"kind": "http", "url": "http://hooks.example/x"}


@pytest.mark.parametrize(
    "status, previous, owed",
    [
        (S.FAILED, None, F),
        (S.FAILED, S.FAILED, F),  # every failed slot owes its own
        (S.ABANDONED, S.SUCCEEDED, F),  # leader died, retries spent: a failure too
        (S.SUCCEEDED, S.FAILED, R),
        (S.SUCCEEDED, S.ABANDONED, R),
        (S.SUCCEEDED, S.SUCCEEDED, None),
        (S.SUCCEEDED, None, None),  # a first success recovers from nothing
        (S.SKIPPED, S.FAILED, None),
        (S.RUNNING, S.FAILED, None),
        (S.CLAIMED, None, None),
    ],
)
def test_owed_kind(status, previous, owed):
    assert owed_kind(status, previous) is owed


def tick(slot: int, status: TickStatus, finished: int | None = 0) -> Tick:
    return Tick("j", slot, 0, 1, "n", status, finished_at_ms=slot + 1 if finished == 0 else finished)


@pytest.mark.parametrize(
    "statuses, kinds, owed",
    [
        ([S.SUCCEEDED, S.FAILED, S.FAILED, S.SUCCEEDED, S.SUCCEEDED], {F, R}, [(2, F), (3, F), (4, R)]),
        ([S.FAILED, S.SKIPPED, S.SUCCEEDED], {F, R}, [(1, F), (3, R)]),  # a skip neither ends nor extends a streak
        ([S.FAILED, S.SUCCEEDED], {R}, [(2, R)]),  # only the kinds the job has a spec for
        ([S.FAILED, S.SUCCEEDED], {F}, [(1, F)]),
        ([S.SUCCEEDED, S.FAILED, S.RUNNING, S.SUCCEEDED], {F, R}, [(2, F), (4, R)]),
        ([S.SUCCEEDED], {F, R}, []),  # the window's first row: its previous run is unknown, no recovery
    ],
)
def test_owed_in_a_window(statuses, kinds, owed):
    rows = [tick(i + 1, s, None if s is S.RUNNING else 0) for i, s in enumerate(statuses)]
    assert owed_in(rows, frozenset(kinds), settled_before_ms=10**9) == owed


def test_a_notification_inside_the_grace_is_not_owed_yet():
    rows = [tick(1, S.FAILED, finished=100), tick(2, S.FAILED, finished=200)]
    assert owed_in(rows, frozenset({F}), settled_before_ms=150) == [(1, F)]


def test_the_jobs_own_spec_wins_over_the_default_and_the_default_covers_the_rest():
    own = job_from_dict({"id": "a", "every": "1s", "on_failure": HOOK})
    bare = job_from_dict({"id": "b", "every": "1s"})
    default = parse_cli("http://default.example/", "--notify-on-failure")
    defaults = Defaults(on_failure=default)
    assert target_for(own, F, defaults).source is Source.JOB
    assert target_for(bare, F, defaults).spec == default and target_for(bare, F, defaults).source is Source.DEFAULT
    assert target_for(bare, R, defaults) is None
    assert target_for(bare, F, Defaults()) is None


@pytest.mark.parametrize(
    "text, rate",
    [
        ("10/1m", Rate(10, 60_000)),
        ("1/30s", Rate(1, 30_000)),
        (" 5 / 1h ", Rate(5, 3_600_000)),
        ("off", None),
    ],
)
def test_parse_rate(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["10", "x/1m", "0/1m", "10/0s", "10/soon", "-1/1m"])
def test_a_bad_rate_is_refused_naming_the_flag(text):
    with pytest.raises(ConfigError, match="--notify-rate"):
        parse_rate(text)


@pytest.mark.parametrize(
    "rate, claimed, allowed",
    [
        (Rate(3, 60_000), 0, True),
        (Rate(3, 60_000), 2, True),
        (Rate(3, 60_000), 3, False),
        (None, 10**6, True),
    ],
)
def test_allows(rate, claimed, allowed):
    assert allows(rate, claimed) is allowed


@pytest.mark.parametrize(
    "text, kind",
    [
        ("https://hooks.example/shardcron", ExecutorKind.HTTP),
        ('{"kind": "nats", "url": "nats://127.0.0.1", "subject": "alerts"}', ExecutorKind.NATS),
        ('{"kind": "rq", "url": "redis://127.0.0.1", "func": "app.alert"}', ExecutorKind.RQ),
    ],
)
def test_cli_spec_forms(text, kind):
    assert parse_cli(text, "--on-failure").kind is kind


@pytest.mark.parametrize(
    "text, field",
    [
        ("hooks.example/x", "--on-failure"),
        ('{"kind": "http", "url": "ftp://x"}', "--on-failure.url"),
        ('{"kind": "nats", "url": "nats://127.0.0.1"}', "--on-failure.subject"),
        ('{"kind": "carrier-pigeon"}', "--on-failure.kind"),
    ],
)
def test_a_bad_cli_spec_names_what_is_wrong(text, field):
    with pytest.raises(InvalidJob) as e:
        parse_cli(text, "--on-failure")
    assert e.value.field == field


@pytest.mark.parametrize(
    "table, field",
    [
        ({"on_failure": "http://x"}, "on_failure"),
        ({"on_failure": {"kind": "http"}}, "on_failure.url"),
        ({"on_recovery": {"kind": "http", "url": "http://x", "methd": "GET"}}, "on_recovery.methd"),
        ({"on_failur": HOOK}, "on_failur"),
    ],
)
def test_a_bad_job_file_notification_names_the_field(table, field):
    with pytest.raises(InvalidJob) as e:
        job_from_dict({"id": "a", "every": "1s", **table})
    assert e.value.field == field


def test_notifications_round_trip_through_the_store_form_and_the_api():
    job = job_from_dict(
        {
            "id": "a",
            "every": "1s",
            "executor": {"kind": "noop"},
            "on_failure": {**HOOK, "headers": {"Authorization": "Bearer s3cret"}},
            "on_recovery": {"kind": "nats", "url": "nats://u:pw@127.0.0.1", "subject": "ok"},
        }
    )
    assert job_from_json(job_to_json(job)) == job
    assert job_from_proto(job_to_proto(job, redact=False)) == job
    shown = json.dumps(redacted(job)) + str(job_to_proto(job, redact=True))
    assert "s3cret" not in shown and ":pw@" not in shown
    assert "on_failure" not in job_to_json(job_from_dict({"id": "b", "every": "1s"}))  # unchanged when unset


def test_a_shell_notification_needs_allow_shell():
    job = job_from_dict({"id": "a", "every": "1s", "on_failure": {"kind": "shell", "command": "true"}})
    with pytest.raises(InvalidJob) as e:
        check_admissible(job, allow_shell=False, now_ms=0)
    assert e.value.field == "on_failure.kind"


def test_a_notification_has_its_own_idempotency_key_and_says_what_it_is():
    ctx = NotificationContext("j", 1000, 1, 7, 0, "n1", notification="on_failure")
    slot = TickContext("j", 1000, 1, 7, 0, "n1")
    headers = tick_headers(ctx)
    assert headers["Idempotency-Key"] == "j:1000:on_failure" != slot.idempotency_key
    assert headers["X-Shardcron-Notification"] == "on_failure"
    assert "X-Shardcron-Notification" not in tick_headers(slot)
    assert slot_uuid(ctx) != slot_uuid(slot)
    assert slot_uuid(ctx) == slot_uuid(NotificationContext("j", 1000, 3, 9, 0, "n2", notification="on_failure"))


def test_the_event_becomes_the_body_only_when_the_spec_has_none():
    t = Tick("j", 1000, 0, 7, "n1", S.FAILED, attempt=3, http_status=500, error="HTTP 500")
    body = event("on_failure", "j", 1000, t)
    assert body["status"] == "failed" and body["attempts"] == 3 and body["error"] == "HTTP 500"
    hook = job_from_dict({"id": "a", "every": "1s", "on_failure": HOOK}).on_failure
    sent = with_event_body(hook, body)
    assert json.loads(sent.http.body) == body and ("Content-Type", "application/json") in sent.http.headers
    own = job_from_dict({"id": "a", "every": "1s", "on_failure": {**HOOK, "body": "job failed"}}).on_failure
    assert with_event_body(own, body) == own


def test_a_python_notification_cannot_take_a_fenced_session():
    with pytest.raises(InvalidJob) as e:
        job_from_dict(
            {"id": "a", "every": "1s", "on_failure": {"kind": "python", "target": "app.alerts:page", "session": True}}
        )
    assert e.value.field == "on_failure.session"


def test_an_api_notification_without_a_kind_is_refused_naming_the_field():
    from shardcron.v1 import scheduler_pb2 as pb

    p = job_to_proto(job_from_dict({"id": "a", "every": "1s", "executor": {"kind": "noop"}}), redact=False)
    p.on_recovery.SetInParent()
    with pytest.raises(InvalidJob) as e:
        job_from_proto(p)
    assert e.value.field == "on_recovery.kind"
    p.on_recovery.CopyFrom(pb.Notification(http=pb.HttpExecutor(url="mailto:x")))
    with pytest.raises(InvalidJob) as e:
        job_from_proto(p)
    assert e.value.field == "on_recovery.url"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--notify-on-failure", '{"kind": "shell", "command": "page-me"}'],
            "--notify-on-failure: a shell notification",
        ),
        (["--notify-on-recovery", "ftp://x"], "--notify-on-recovery"),
        (["--notify-rate", "lots"], "--notify-rate"),
    ],
)
def test_bad_node_notification_flags_are_refused_naming_the_flag(argv, message):
    import argparse

    from shardcron.cli.flags import add_node_flags, node_config_from_args

    p = argparse.ArgumentParser()
    add_node_flags(p)
    with pytest.raises(ConfigError, match=message):
        node_config_from_args(p.parse_args(argv))


@pytest.mark.parametrize(
    ("rounds", "wait_ms"),
    [(1, 10_000), (2, 20_000), (3, 40_000), (7, 640_000), (8, 900_000), (10_000, 900_000)],
)
def test_a_notification_failing_is_tried_again_after_a_doubling_wait(rounds, wait_ms):
    assert retry_after_ms(rounds) == wait_ms


def test_a_notification_is_given_up_a_day_after_its_claim():
    assert not gives_up(1_000, 1_000 + GIVE_UP_AFTER_MS - 1)
    assert gives_up(1_000, 1_000 + GIVE_UP_AFTER_MS)


@pytest.mark.parametrize(
    ("job", "defaults", "expected"),
    [
        ({"on_deadline": {"kind": "noop"}, "on_failure": {"kind": "shell", "command": "x"}}, None, ("noop", "job")),
        ({"on_failure": {"kind": "shell", "command": "x"}}, {"kind": "noop"}, ("shell", "job")),
        ({}, {"kind": "noop"}, ("noop", "default")),
        ({}, None, None),
    ],
)
def test_a_missed_deadline_goes_to_on_deadline_else_where_failures_go(job, defaults, expected):
    j = job_from_dict({"id": "j", "every": "1m", "deadline": "1m", **job})
    d = (
        Defaults(on_failure=job_from_dict({"id": "d", "every": "1m", "executor": defaults}).executor)
        if defaults
        else Defaults()
    )
    for kind in (NotificationKind.START_DEADLINE, NotificationKind.DEADLINE, NotificationKind.HEARTBEAT):
        target = target_for(j, kind, d)
        assert (target.spec.kind.value, target.source.value) == expected if target else expected is None
