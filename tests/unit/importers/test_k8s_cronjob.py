from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from shardcron.importers.k8s_cronjob import ManifestError, import_k8s_cronjobs
from tests.unit.importers.slots import croniter_slots, shardcron_slots

TEXT = (Path(__file__).parent / "fixtures" / "cronjobs.yaml").read_text()
URL = "https://worker.example/run"
SHELL = import_k8s_cronjobs(TEXT, "cronjobs.yaml", "shell")
HTTP = import_k8s_cronjobs(TEXT, "cronjobs.yaml", "http", URL)
RETRY = {"max_attempts": 7, "backoff": "10s", "backoff_max": "6m"}  # Kubernetes' default backoffLimit, 6

NIGHTLY = {
    "id": "finance-nightly-report",
    "cron": "0 2 * * *",
    "timezone": "Europe/Lisbon",
    "overlap": "skip",  # Forbid
    "catchup": "latest",
    "catchup_window": "600s",
    "timeout": "1800s",
    "retry": {**RETRY, "max_attempts": 3},
}
HOURLY = {
    "id": "default-hourly-sync",
    "cron": "0 * * * *",
    "timezone": "UTC",
    "overlap": "skip",  # Replace, noted
    "catchup": "latest",
    "retry": RETRY,
    "paused": True,
}
PING = {
    "id": "ops-weekday-ping",
    "cron": "*/30 9-17 * * 1-5",
    "timezone": "America/New_York",
    "overlap": "allow",
    "catchup": "latest",
    "retry": RETRY,
}
ENTRYPOINT = {
    "id": "ops-entrypoint-only",
    "cron": "0 3 * * *",
    "timezone": "UTC",
    "overlap": "allow",
    "catchup": "latest",
    "retry": RETRY,
}
SHELL_COMMANDS = {
    "finance-nightly-report": """python -m report --since yesterday --title 'it'"'"'s "done"'""",
    "default-hourly-sync": "/bin/sync-all",
    "ops-weekday-ping": "curl -fsS https://example.com/ping",
}


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            SHELL,
            [{**j, "executor": {"kind": "shell", "command": SHELL_COMMANDS[j["id"]]}} for j in (NIGHTLY, HOURLY, PING)],
        ),
        (HTTP, [{**j, "executor": {"kind": "http", "url": URL}} for j in (NIGHTLY, HOURLY, PING, ENTRYPOINT)]),
    ],
    ids=["shell", "http"],
)
def test_jobs(result, expected):
    assert [imported.job for imported in result.jobs] == expected


@pytest.mark.parametrize(
    ("result", "source", "reason"),
    [
        (SHELL, "document 3 (ConfigMap default/settings)", "not a CronJob"),
        (SHELL, "document 4 item 2 (CronJob ops/tz-in-schedule)", "TZ= or CRON_TZ= prefix"),
        (SHELL, "document 4 item 3 (CronJob ops/entrypoint-only)", "the container has no command"),
        (HTTP, "document 3 (ConfigMap default/settings)", "not a CronJob"),
        (HTTP, "document 4 item 2 (CronJob ops/tz-in-schedule)", "TZ= or CRON_TZ= prefix"),
    ],
)
def test_refused(result, source, reason):
    found = [r for r in result.refused if r.source == f"cronjobs.yaml {source}"]
    assert len(found) == 1 and reason in found[0].reason
    assert len(result.jobs) + len(result.refused) == 6


@pytest.mark.parametrize(
    ("result", "job_id", "note"),
    [
        (
            SHELL,
            "finance-nightly-report",
            "left out: pod restartPolicy; container image 'registry.example.com/report:1.4'; container env; container resources",
        ),
        (SHELL, "default-hourly-sync", "concurrencyPolicy Replace"),
        (SHELL, "default-hourly-sync", "no spec.timeZone"),
        (HTTP, "ops-weekday-ping", "left out: container 'ping' (image 'curl:8')"),
    ],
)
def test_notes(result, job_id, note):
    imported = next(j for j in result.jobs if j.job["id"] == job_id)
    assert any(note in n for n in imported.notes), imported.notes


def _cronjob(**spec_fields) -> str:
    spec = {
        "schedule": "0 1 * * *",
        "jobTemplate": {
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "command": ["run"]}]}}}
        },
        **spec_fields,
    }
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"}, "spec": spec})


@pytest.mark.parametrize(
    ("spec_fields", "reason"),
    [
        ({"schedule": 5}, "spec.schedule: missing, or not a string"),
        ({"schedule": "0 0 L * *"}, "Quartz"),
        ({"schedule": "@reboot"}, "@reboot"),
        ({"concurrencyPolicy": "Sometimes"}, "not Allow, Forbid or Replace"),
        ({"startingDeadlineSeconds": -1}, "startingDeadlineSeconds"),
        ({"timeZone": "Mars/Olympus"}, "shardcron refuses it"),
        (
            {
                "jobTemplate": {
                    "spec": {"backoffLimit": 200, "template": {"spec": {"containers": [{"command": ["x"]}]}}}
                }
            },
            "retry.max_attempts",
        ),
        ({"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}, "containers: missing"),
        ({"jobTemplate": "no"}, "jobTemplate: missing, or not a mapping"),
        (
            {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"command": "run"}]}}}}},
            "not a list of strings",
        ),
        (
            {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"command": ["a"]}, {"command": ["b"]}]}}}}},
            "2 containers",
        ),
    ],
)
def test_unusable_cronjobs_are_refused_naming_the_field(spec_fields, reason):
    result = import_k8s_cronjobs(_cronjob(**spec_fields), "cj.yaml", "shell")
    assert not result.jobs
    assert reason in result.refused[0].reason


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a: 1\n---\nkind: [\n", "cj.yaml: document 2: "),
        ("a: &x 1\nb: *x\n", "cj.yaml: document 1: line 1, column 4: YAML anchors and aliases"),
    ],
)
def test_unreadable_yaml_is_an_error_naming_the_document(text, error):
    with pytest.raises(ManifestError, match="^" + error.replace("(", r"\(")):
        import_k8s_cronjobs(text, "cj.yaml", "shell")


@pytest.mark.parametrize("doc", ["just a string\n", "- a list\n", "kind: CronJob\napiVersion: batch/v2alpha9\n"])
def test_other_documents_are_refused_not_errors(doc):
    result = import_k8s_cronjobs(doc, "cj.yaml", "shell")
    assert not result.jobs and len(result.refused) == 1


def test_ids_stay_unique():
    text = _cronjob() + "---\n" + _cronjob()
    assert [j.job["id"] for j in import_k8s_cronjobs(text, "cj.yaml", "shell").jobs] == ["default-x", "default-x-2"]


@pytest.mark.parametrize(
    ("schedule", "zone"),
    [
        ("*/30 9-17 ? * mon-fri", "America/New_York"),
        ("5/10 1 * * *", "Europe/Lisbon"),
        ("@hourly", "America/New_York"),
        ("0 0 */2 * 1", "UTC"),  # robfig/cron: OR, as croniter
    ],
)
def test_slots_equal_croniters_for_the_source_schedule(schedule, zone):
    job = import_k8s_cronjobs(_cronjob(schedule=schedule, timeZone=zone), "cj.yaml", "shell").jobs[0].job
    for start in (datetime(2026, 10, 20, tzinfo=ZoneInfo("UTC")), datetime(2027, 3, 10, tzinfo=ZoneInfo("UTC"))):
        assert shardcron_slots(job, start) == croniter_slots(schedule, zone, start)
