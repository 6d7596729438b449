"""The dispatch executors' settings: tables of good executor tables, of bad ones (each naming its field),
round trips through the stored form, the proto and the ``jobs put`` flags, and admission."""

from __future__ import annotations

import re

import pytest

from shardcron.cli import build_parser
from shardcron.cli.job_flags import job_from_flags
from shardcron.errors import ConfigError, InvalidJob
from shardcron.executors.admission import check_admissible
from shardcron.executors.extras import EXTRAS, MissingExtra
from shardcron.model import (
    AmqpSpec,
    ArqSpec,
    CelerySpec,
    ExecutorKind,
    NatsSpec,
    PythonSpec,
    RedisStreamSpec,
    RqSpec,
)
from shardcron.spec.executors import python_module_allowed
from shardcron.spec.job import job_from_dict, job_to_dict, redacted
from shardcron.wire.convert import job_from_proto, job_to_proto

REDIS = "redis://127.0.0.1:6379/0"


def job(executor: dict) -> dict:
    return {"id": "j", "every": "1s", "executor": executor}


# (executor table, the settings it must parse to)
VALID = [
    ({"kind": "celery", "url": REDIS, "task": "app.tasks.report"}, CelerySpec(REDIS, "app.tasks.report")),
    (
        {
            "kind": "celery",
            "url": "amqp://u:p@mq:5672/vh",
            "task": "t",
            "args": [1, "a", None],
            "kwargs": {"x": [1]},
            "queue": "q",
            "routing_key": "rk",
            "priority": 9,
            "expires": "30s",
        },
        CelerySpec("amqp://u:p@mq:5672/vh", "t", (1, "a", None), {"x": [1]}, "q", "rk", 9, 30_000),
    ),
    ({"kind": "rq", "url": REDIS, "func": "app.tasks.report"}, RqSpec(REDIS, "app.tasks.report")),
    (
        {"kind": "rq", "url": "unix:///run/redis.sock", "func": "f", "queue": "high", "args": [2]},
        RqSpec("unix:///run/redis.sock", "f", "high", (2,)),
    ),
    ({"kind": "arq", "url": REDIS, "function": "report"}, ArqSpec(REDIS, "report")),
    (
        {"kind": "arq", "url": REDIS, "function": "report", "queue": "q", "kwargs": {"a": 1}, "tick_kwarg": "tick"},
        ArqSpec(REDIS, "report", "q", (), {"a": 1}, "tick"),
    ),
    (
        {"kind": "nats", "url": "nats://127.0.0.1:4222", "subject": "jobs.report"},
        NatsSpec("nats://127.0.0.1:4222", "jobs.report"),
    ),
    (
        {
            "kind": "nats",
            "url": "tls://n:4222",
            "subject": "a",
            "jetstream": False,
            "body": "{}",
            "headers": {"k": "v"},
        },
        NatsSpec("tls://n:4222", "a", False, "{}", (("k", "v"),)),
    ),
    (
        {"kind": "amqp", "url": "amqp://guest:guest@127.0.0.1/", "routing_key": "reports"},
        AmqpSpec("amqp://guest:guest@127.0.0.1/", "reports"),
    ),
    (
        {
            "kind": "amqp",
            "url": "amqps://mq/",
            "exchange": "ex",
            "routing_key": "",
            "persistent": False,
            "content_type": "text/plain",
            "body": "hi",
        },
        AmqpSpec("amqps://mq/", "", "ex", "hi", (), False, "text/plain"),
    ),
    ({"kind": "redis-stream", "url": REDIS, "stream": "reports"}, RedisStreamSpec(REDIS, "reports")),
    (
        {"kind": "redis-stream", "url": REDIS, "stream": "s", "fields": {"a": "1"}, "maxlen": 1000, "dedupe_ttl": "2h"},
        RedisStreamSpec(REDIS, "s", (("a", "1"),), 1000, 7_200_000),
    ),
    ({"kind": "python", "target": "app.jobs:report"}, PythonSpec("app.jobs:report")),
    (
        {"kind": "python", "target": "app:report", "args": [1], "session": True},
        PythonSpec("app:report", (1,), {}, True),
    ),
]


@pytest.mark.parametrize("table, settings", VALID)
def test_each_kind_parses_to_its_settings(table, settings):
    spec = job_from_dict(job(table), require_executor=True).executor
    assert spec.kind is ExecutorKind(table["kind"])
    assert spec.settings == settings


@pytest.mark.parametrize("table, settings", VALID)
def test_each_kind_round_trips_through_the_stored_form_and_the_proto(table, settings):
    parsed = job_from_dict(job(table), require_executor=True)
    assert job_from_dict(job_to_dict(parsed)) == parsed
    assert job_from_proto(job_to_proto(parsed, redact=False)) == parsed


# (executor table, the field the error must name, a fragment of the reason)
BAD = [
    ({"kind": "celery", "task": "t"}, "executor.url", "needs the broker's url"),
    ({"kind": "celery", "url": "http://h/", "task": "t"}, "executor.url", "must start with one of redis://"),
    ({"kind": "celery", "url": "redis://", "task": "t"}, "executor.url", "names no host"),
    ({"kind": "celery", "url": "redis://h:notaport/", "task": "t"}, "executor.url", "not a valid URL"),
    ({"kind": "celery", "url": REDIS}, "executor.task", "missing"),
    ({"kind": "celery", "url": REDIS, "task": " t"}, "executor.task", "white space"),
    ({"kind": "celery", "url": REDIS, "task": "t", "args": "1"}, "executor.args", "list of JSON values"),
    ({"kind": "celery", "url": REDIS, "task": "t", "args": [float("nan")]}, "executor.args", "JSON values only"),
    ({"kind": "celery", "url": REDIS, "task": "t", "kwargs": [1]}, "executor.kwargs", "table"),
    ({"kind": "celery", "url": REDIS, "task": "t", "kwargs": {"not valid": 1}}, "executor.kwargs", "keyword argument"),
    ({"kind": "celery", "url": REDIS, "task": "t", "args": ["x" * (1 << 20)]}, "executor.args", "larger than"),
    ({"kind": "celery", "url": REDIS, "task": "t", "priority": 256}, "executor.priority", "at most 255"),
    ({"kind": "celery", "url": REDIS, "task": "t", "priority": -1}, "executor.priority", "at least 0"),
    ({"kind": "celery", "url": REDIS, "task": "t", "expires": "soon"}, "executor.expires", "duration"),
    ({"kind": "celery", "url": REDIS, "task": "t", "expires": "0s"}, "executor.expires", "positive"),
    ({"kind": "celery", "url": REDIS, "tsak": "t"}, "executor.tsak", "did you mean 'task'"),
    ({"kind": "rq", "url": "amqp://h/", "func": "f"}, "executor.url", "must start with one of redis://"),
    ({"kind": "rq", "url": REDIS, "func": "app tasks"}, "executor.func", "dotted path"),
    ({"kind": "rq", "url": REDIS, "func": "f", "queue": ""}, "executor.queue", "empty"),
    ({"kind": "arq", "url": REDIS, "function": "a.b"}, "executor.function", "function name"),
    (
        {"kind": "arq", "url": REDIS, "function": "f", "kwargs": {"tick": 1}, "tick_kwarg": "tick"},
        "executor.tick_kwarg",
        "also one of the kwargs",
    ),
    ({"kind": "nats", "url": REDIS, "subject": "a"}, "executor.url", "nats://"),
    ({"kind": "nats", "url": "nats://h", "subject": "jobs.>"}, "executor.subject", "no wildcards"),
    ({"kind": "nats", "url": "nats://h", "subject": "a..b"}, "executor.subject", "dot-separated"),
    ({"kind": "nats", "url": "nats://h", "subject": "a", "jetstream": "yes"}, "executor.jetstream", "true or false"),
    (
        {"kind": "nats", "url": "nats://h", "subject": "a", "headers": {"bad name": "v"}},
        "executor.headers",
        "bad header name",
    ),
    ({"kind": "amqp", "url": "amqp://h/"}, "executor.routing_key", "names the queue"),
    ({"kind": "amqp", "url": "amqp://h/", "routing_key": "q", "persistent": 1}, "executor.persistent", "true or false"),
    ({"kind": "amqp", "url": "amqp://h/", "routing_key": "q", "body": 3}, "executor.body", "string"),
    ({"kind": "redis-stream", "url": REDIS}, "executor.stream", "missing"),
    (
        {"kind": "redis-stream", "url": REDIS, "stream": "s", "fields": {"shardcron_fence": "1"}},
        "executor.fields",
        "carry the tick",
    ),
    ({"kind": "redis-stream", "url": REDIS, "stream": "s", "fields": {"a": 1}}, "executor.fields", "strings"),
    ({"kind": "redis-stream", "url": REDIS, "stream": "s", "maxlen": 0}, "executor.maxlen", "at least 1"),
    ({"kind": "redis-stream", "url": REDIS, "stream": "s", "dedupe_ttl": "5s"}, "executor.dedupe_ttl", "outlast"),
    ({"kind": "python"}, "executor.target", "missing"),
    ({"kind": "python", "target": "app.jobs"}, "executor.target", "package.module:function"),
    ({"kind": "python", "target": "app.jobs:"}, "executor.target", "package.module:function"),
    ({"kind": "python", "target": "app:f", "session": "true"}, "executor.session", "true or false"),
    ({"kind": "python", "target": "app:f", "url": REDIS}, "executor.url", "unknown key of the python executor"),
]


@pytest.mark.parametrize("table, field, reason", BAD, ids=[f"{t['kind']}-{f}-{i}" for i, (t, f, _) in enumerate(BAD)])
def test_each_bad_field_is_refused_naming_it(table, field, reason):
    with pytest.raises(InvalidJob) as caught:
        job_from_dict(job(table), require_executor=True)
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_an_unknown_kind_lists_every_kind():
    with pytest.raises(InvalidJob, match="celery, rq, arq, nats, amqp, redis-stream, python"):
        job_from_dict(job({"kind": "sqs"}), require_executor=True)


@pytest.mark.parametrize(
    "kind, url",
    [
        ("celery", "redis://user:s3cret@h:6379/0"),
        ("amqp", "amqp://guest:s3cret@h:5672/"),
        ("nats", "nats://user:s3cret@h:4222"),
    ],
)
def test_broker_passwords_are_masked_in_answers_and_logs_but_kept_in_the_store(kind, url):
    table = {
        "kind": kind,
        "url": url,
        **{"celery": {"task": "t"}, "amqp": {"routing_key": "q"}, "nats": {"subject": "s"}}[kind],
    }
    parsed = job_from_dict(job(table), require_executor=True)
    assert job_to_dict(parsed)["executor"]["url"] == url
    assert "s3cret" not in str(redacted(parsed)) and ":***@" in redacted(parsed)["executor"]["url"]
    answer = job_to_proto(parsed, redact=True)
    assert "s3cret" not in str(answer) and ":***@" in getattr(answer, kind).url


def test_bad_json_in_the_proto_names_the_field():
    from shardcron.v1 import scheduler_pb2 as pb

    p = pb.Job(id="j", schedule=pb.Schedule(interval_ms=1000))
    p.rq.url, p.rq.func, p.rq.kwargs_json = REDIS, "f", "{nope"
    with pytest.raises(InvalidJob, match=r"^executor\.kwargs: is not valid JSON"):
        job_from_proto(p)


# -- admission -----------------------------------------------------------------------------


def admit(table: dict, **kw):
    defaults = {"allow_shell": False, "now_ms": 0}
    check_admissible(job_from_dict(job(table), require_executor=True), **{**defaults, **kw})


@pytest.mark.parametrize(
    "target, prefixes, allowed",
    [
        ("myapp:f", ("myapp",), True),
        ("myapp.tasks:f", ("myapp",), True),
        ("myapp.tasks.deep:f", ("myapp.tasks",), True),
        ("myappx.tasks:f", ("myapp",), False),
        ("myapp:f", ("myapp.tasks",), False),
        ("other:f", ("myapp", "other"), True),
        ("os:system", ("myapp",), False),
    ],
)
def test_allow_python_covers_modules_on_dotted_boundaries(target, prefixes, allowed):
    assert python_module_allowed(target, prefixes) is allowed


def test_python_jobs_need_allow_python_covering_their_module():
    with pytest.raises(InvalidJob, match="--allow-python"):
        admit({"kind": "python", "target": "app:f"})
    with pytest.raises(
        InvalidJob,
        match=r"executor\.target: os:system is refused: module 'os' is not under the "
        r"--allow-python prefixes \(tests\.support\.pytargets\)",
    ):
        admit({"kind": "python", "target": "os:system"}, allow_python=("tests.support.pytargets",))
    with pytest.raises(
        InvalidJob,
        match=r"executor\.target: tests\.support\.pytargets:os\.system is refused: "
        r"'os' is a module",
    ):
        admit(
            {"kind": "python", "target": "tests.support.pytargets:os.system"}, allow_python=("tests.support.pytargets",)
        )
    with pytest.raises(InvalidJob, match=r"executor\.target: .*cannot import"):
        admit(
            {"kind": "python", "target": "tests.support.pytargets.absent:f"}, allow_python=("tests.support.pytargets",)
        )
    admit({"kind": "python", "target": "tests.support.pytargets.sub:shared"}, allow_python=("tests.support",))


def test_a_python_notification_is_admitted_by_the_same_target_rules():
    notified = job_from_dict(
        {**job({"kind": "noop"}), "on_failure": {"kind": "python", "target": "tests.support.pytargets:spawnl"}},
        require_executor=True,
    )
    with pytest.raises(InvalidJob, match=r"on_failure\.target: .*spawnl.* is refused: .*defined in module 'os'"):
        check_admissible(notified, allow_shell=False, now_ms=0, allow_python=("tests.support.pytargets",))


def test_a_fenced_session_is_refused_on_sqlite_only():
    table = {"kind": "python", "target": "tests.support.pytargets:helper", "session": True}
    with pytest.raises(InvalidJob, match=r"executor\.session: a fenced session needs a PostgreSQL or MariaDB"):
        admit(table, allow_python=("tests.support.pytargets",), store_dialect="sqlite")
    for dialect in ("postgresql", "mysql"):
        admit(table, allow_python=("tests.support.pytargets",), store_dialect=dialect)


def test_a_missing_extra_is_refused_naming_the_extra(monkeypatch):
    from shardcron.executors import extras

    monkeypatch.setattr(extras, "_importable", lambda module: module != "nats")
    with pytest.raises(MissingExtra, match=re.escape("pip install 'shardcron[nats]'")):
        admit({"kind": "nats", "url": "nats://h", "subject": "s"})
    admit({"kind": "rq", "url": REDIS, "func": "f"})


def test_every_broker_kind_names_an_extra_that_the_project_declares():
    import tomllib
    from pathlib import Path

    declared = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for kind, (extra, _) in EXTRAS.items():
        assert extra in declared, f"{kind.value} names the extra {extra!r}, which pyproject.toml lacks"


# -- jobs put flags ------------------------------------------------------------------------------


def put(argv: str):
    return job_from_flags(build_parser().parse_args(["jobs", "put", "j", "--every", "1s", *argv.split()]))


@pytest.mark.parametrize(
    "argv, settings",
    [
        (
            f'--celery app.t --broker {REDIS} --args [1] --kwargs {{"a":2}} --queue q --priority 3 --expires 1m',
            CelerySpec(REDIS, "app.t", (1,), {"a": 2}, "q", None, 3, 60_000),
        ),
        (f"--rq app.tasks.f --broker {REDIS} --queue high", RqSpec(REDIS, "app.tasks.f", "high")),
        (f"--arq report --broker {REDIS} --tick-kwarg tick", ArqSpec(REDIS, "report", tick_kwarg="tick")),
        (
            "--nats jobs.a --broker nats://h:4222 --no-jetstream --header k:v --body hi",
            NatsSpec("nats://h:4222", "jobs.a", False, "hi", (("k", "v"),)),
        ),
        (
            "--amqp reports --broker amqp://h/ --transient --content-type text/plain",
            AmqpSpec("amqp://h/", "reports", persistent=False, content_type="text/plain"),
        ),
        (
            f"--redis-stream s --broker {REDIS} --field a=1 --maxlen 10 --dedupe-ttl 2h",
            RedisStreamSpec(REDIS, "s", (("a", "1"),), 10, 7_200_000),
        ),
        ("--python app.jobs:f --session --args [1]", PythonSpec("app.jobs:f", (1,), {}, True)),
    ],
)
def test_jobs_put_builds_each_kind_from_its_flags(argv, settings):
    assert put(argv).executor.settings == settings


def test_the_broker_may_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SHARDCRON_BROKER", REDIS)
    assert put("--rq app.f").executor.settings.url == REDIS


@pytest.mark.parametrize(
    "argv, message",
    [
        ("--celery t", "--celery: give the broker's URL with --broker URL"),
        (f"--celery t --broker {REDIS} --args [1,", "--args: not valid JSON"),
        ("--python app:f --queue q", "--queue: only for --celery or --rq or --arq jobs; not for --python"),
        ("--http http://h/ --session", "--session: only for --python jobs; not for --http"),
        (f"--rq f --broker {REDIS} --body x", "--body: only for --http or --nats or --amqp jobs; not for --rq"),
        (
            "--python app:f --queue q --args [1] --exchange x",
            "--queue: only for --celery or --rq or --arq jobs; --exchange: only for --amqp jobs; not for --python",
        ),
        ("--noop --broker redis://h", "--broker: only for"),
    ],
)
def test_a_flag_of_another_kind_or_a_bad_value_is_one_line_naming_the_flag(argv, message, monkeypatch):
    monkeypatch.delenv("SHARDCRON_BROKER", raising=False)
    with pytest.raises(ConfigError) as caught:
        put(argv)
    assert str(caught.value).startswith(message)


def test_a_bad_value_behind_a_flag_is_refused_by_jobspec_naming_the_field():
    with pytest.raises(InvalidJob, match=r"^executor\.url"):
        put("--rq f --broker http://h/")
