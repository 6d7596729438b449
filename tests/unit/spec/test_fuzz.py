"""Fuzzed job specs, as plain data, as protobuf messages and as job files in TOML, YAML and JSON.

Every input is either refused with an ``InvalidJob`` (a file: a ``JobFileError``) whose short message
names the field, or accepted; an accepted job then round-trips through its dict and JSON forms and
its proto, computes its next slots, and renders in ``jobs list`` and in the dashboard's pages. No
other exception may escape from any of these steps: a traceback in front of a user is a bug.

``make test`` runs a bounded number of examples ("ci" profile); ``make fuzz`` runs 30 times more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import unicodedata
from datetime import UTC, datetime

import pytest
import yaml
from hypothesis import example, given
from prometheus_client import CollectorRegistry

from shardcron.cli.output import job_json, jobs_table, runs_json
from shardcron.dashboard import present
from shardcron.dashboard.history import MetricsHistory
from shardcron.dashboard.server import Dashboard
from shardcron.errors import InvalidJob
from shardcron.jobkey import split_key
from shardcron.model import Job, RecordedMiss, ScheduleKind
from shardcron.rules.runs import job_runs, next_run
from shardcron.rules.triggers import trigger_for
from shardcron.spec.job import JOB_KEYS, job_from_dict, job_from_json, job_to_dict, job_to_json
from shardcron.spec.jobfile import JobFileError, load_job_file
from shardcron.spec.schedule import SCHEDULE_KEYS
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.convert import job_from_proto, job_to_proto, stored_job_from_proto
from shardcron.wire.tick_convert import job_runs_to_proto
from tests.support.fuzz_strategies import fuzz_settings, job_dicts, job_files, messages

pytestmark = pytest.mark.fuzz

# A fixed "now" keeps each example's answer the same from run to run.
NOW_MS = int(datetime(2026, 12, 5, 9, 0, tzinfo=UTC).timestamp() * 1000)
YEAR_MS = 365 * 86_400_000
LAST_MS_OF_9999 = 253402300799999
INT64 = (-(2**63), 2**63 - 1)
# A refusal's message stays readable: an echoed value is cut short, whatever its size.
MAX_MESSAGE_CHARS = 2000
# What a refusal may name: a key of the job, of its schedule, or the job itself.
FIELD_ROOTS = JOB_KEYS | SCHEDULE_KEYS | {"job", "schedule"}
# Characters that change how the text around them reads without showing themselves.
INVISIBLE = {"Cf", "Cc", "Zl", "Zp", "Cs", "Co", "Cn"}


@pytest.fixture(scope="module")
def templates():
    """The dashboard's own template environment (its sampler is never started)."""
    dashboard = Dashboard(
        node_id="fuzz",
        api=None,
        tokens=None,
        history=MetricsHistory(CollectorRegistry()),
    )
    yield dashboard.templates
    dashboard.close()


def assert_names_a_field(e: InvalidJob) -> None:
    root = e.field.split(".")[0].split("[")[0]
    assert root in FIELD_ROOTS or "unknown key" in e.reason, f"names no field of a job: {e.field!r}: {e.reason[:200]}"
    assert len(str(e)) <= MAX_MESSAGE_CHARS, f"a {len(str(e))}-character message: {str(e)[:300]}..."


def assert_visible(text: str, what: str) -> None:
    hidden = [f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in INVISIBLE]
    assert not hidden, f"{what} {text[:80]!r} holds invisible or control characters {hidden[:5]}"


def assert_bounded(job: Job) -> None:
    """The spec's bounds: nothing an accepted job carries can overflow downstream."""
    key = split_key(job.id)
    assert_visible(key.id, "the id")
    assert_visible(key.namespace, "the namespace")
    s = job.schedule
    if s.kind is ScheduleKind.ONCE:
        assert 0 <= s.at_ms <= LAST_MS_OF_9999, f"at_ms {s.at_ms} is outside the years 1970-9999"
    for name, value in (
        ("interval_ms", s.interval_ms),
        ("version", job.version),
        ("history_limit", job.history_limit),
        ("retry.max_attempts", job.retry.max_attempts),
    ):
        assert value is None or INT64[0] <= value <= INT64[1], f"{name} {value} does not fit in 64 bits"


def assert_next_slots(job: Job) -> None:
    trigger = trigger_for(job.schedule)
    after = NOW_MS
    for _ in range(3):
        slot = trigger.next_after(after)
        if slot is None:
            break
        assert slot > after, f"slot {slot} is not after {after}"
        after = slot
    next_run(job, trigger, NOW_MS)
    if job.schedule.kind is ScheduleKind.CRON:
        now_ms = int(time.time() * 1000)
        first = trigger.next_after(now_ms)
        assert first is not None and first <= now_ms + 10 * YEAR_MS + 3 * 86_400_000, (
            f"cron {job.schedule.cron!r} does not fire in the next 10 years, yet it was accepted"
        )


def render_list(job: Job) -> str:
    """``jobs list``'s table and ``--json`` for the job, as the CLI prints them."""
    runs = job_runs(job, NOW_MS)
    table = jobs_table([(job, runs)], {job.id: 7}, namespaced=True)
    json.dumps([{**job_json(job, 7), "runs": runs_json(runs)}], indent=2, sort_keys=True)
    return table


def render_dashboard(templates, job: Job) -> None:
    """The jobs page's table and the job's page, with the context the dashboard's handlers give them."""
    runs = job_runs(job, NOW_MS)
    key = split_key(job.id)
    common = dict(visitor=None, csrf="", present=present, checks_tokens=False, node="fuzz")
    missed = present.jobs_that_missed([RecordedMiss(job.id, NOW_MS, "deadline", NOW_MS)])
    templates.get_template("_jobs.html").render(
        rows=[(job, runs, key)], error=None, next_url=None, first_url=None, path="/jobs", missed=missed, **common
    )
    definition = yaml.safe_dump(job_to_dict(job), sort_keys=False, allow_unicode=True)
    templates.get_template("job.html").render(
        job=job,
        runs=runs,
        ticks=[],
        definition=definition,
        points=[],
        job_id=key.id,
        namespace=key.namespace,
        error=None,
        events_url="/events/job",
        path="/job",
        **common,
    )


def check_accepted(job: Job, templates) -> None:
    assert_bounded(job)
    assert job_from_dict(job_to_dict(job)) == job, "job_to_dict -> job_from_dict changed the job"
    assert job_from_json(job_to_json(job)) == job, "job_to_json -> job_from_json changed the job"
    assert_next_slots(job)
    wire = job_to_proto(job, redact=False).SerializeToString()
    assert stored_job_from_proto(pb.Job.FromString(wire)) == job, "the job changed through its proto"
    job_to_proto(job, redact=True).SerializeToString()
    render_list(job)
    render_dashboard(templates, job)


@fuzz_settings(300)
@given(d=job_dicts())
def test_a_job_dict_is_refused_naming_the_field_or_works_everywhere(templates, d):
    try:
        job = job_from_dict(d, require_executor=True)
    except InvalidJob as e:
        assert_names_a_field(e)
        return
    check_accepted(job, templates)


@fuzz_settings(300)
@given(p=messages(pb.Job.DESCRIPTOR))
def test_a_job_proto_is_refused_naming_the_field_or_works_everywhere(templates, p):
    try:
        job = job_from_proto(p)
    except InvalidJob as e:
        assert_names_a_field(e)
        return
    check_accepted(job, templates)


@fuzz_settings(200)
@given(file=job_files())
def test_a_job_file_is_refused_saying_where_or_its_jobs_work_everywhere(templates, file):
    suffix, data = file
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"jobs.{suffix}")
        with open(path, "wb") as f:
            f.write(data)
        try:
            jobs = load_job_file(path)
        except JobFileError as e:
            message = str(e)
            assert message.startswith(f"{path}: "), f"says not which file: {message[:200]}"
            assert len(message) <= MAX_MESSAGE_CHARS + len(path), (
                f"a {len(message)}-character message: {message[:300]}..."
            )
            return
    for job in jobs:
        check_accepted(job, templates)


@fuzz_settings(200)
@given(d=job_dicts())
# Found by this test: a history_limit past int64 in a stored job made the API's answer raise.
@example(d={"id": "a", "every": "1s", "executor": {"kind": "noop"}, "history_limit": 2**63})
def test_a_stored_job_outside_todays_bounds_still_lists_everywhere(templates, d):
    """A job an earlier version admitted (read back from its stored JSON, without the spec's bounds) must still
    be answered by the API, read by the client, and shown by ``jobs list`` and the dashboard."""
    try:
        text = json.dumps(d, default=str)
    except (RecursionError, ValueError):
        return  # never in a store: every version wrote its jobs with json.dumps
    try:
        job = job_from_json(text)
    except InvalidJob as e:
        assert_names_a_field(e)
        return
    assert job_from_json(job_to_json(job)) == job, "the store's JSON changed the job"
    runs = job_runs(job, NOW_MS)
    job_runs_to_proto(runs).SerializeToString()
    answer = job_to_proto(job, redact=True).SerializeToString()
    listed = stored_job_from_proto(pb.Job.FromString(answer))
    for shown in (job, listed):
        render_list(shown)
        render_dashboard(templates, shown)


# A YAML "billion laughs": 534 bytes that expand to 9^9 list items through aliases.
ALIAS_BOMB = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    + ["jobs:", "  bomb:", "    every: 1h", "    executor: {kind: celery, url: 'redis://h', task: t, args: [*a8]}"]
)

LOADER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))
from shardcron.spec.jobfile import JobFileError, load_job_file
try:
    load_job_file(sys.argv[1])
except JobFileError as e:
    print("refused:", str(e)[:500])
else:
    print("accepted")
"""


def test_a_yaml_alias_bomb_is_refused_in_bounded_memory(tmp_path):
    # In a child process under a 2 GiB address-space limit: the expansion must not reach it.
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 700
    done = subprocess.run([sys.executable, "-c", LOADER, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("refused:"), (
        f"exit {done.returncode}; stdout {done.stdout[:300]!r}; stderr ends {done.stderr[-1500:]}"
    )
    assert "alias" in done.stdout.lower() or "limit" in done.stdout.lower() or "large" in done.stdout.lower(), (
        done.stdout
    )
