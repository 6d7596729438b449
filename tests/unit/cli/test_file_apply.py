"""`jobs apply` and `jobs diff` before any call: the file as the cluster should hold it, the plan as printed,
and the exit statuses (diff: 0 same, 1 different, 2 trouble)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from shardcron.cli import file_apply, main
from shardcron.cli.file_apply import Row, file_state, result_row, row_json
from shardcron.cli.plan_output import plan_json, plan_text
from shardcron.client.results import PutResult
from shardcron.jobkey import join_key
from shardcron.rules.job_plan import SOURCE_LABEL, plan, with_secret_checks
from shardcron.spec.job import job_from_dict
from shardcron.spec.jobfile import JobFileError
from shardcron.wire.convert import job_to_proto

NOOP = 'every = "1h"\nexecutor = { kind = "noop" }\n'


def args(path, namespace=None, source=None) -> argparse.Namespace:
    return argparse.Namespace(file=str(path), namespace=namespace, source=source)


@pytest.mark.parametrize(
    "text,flag,keys,namespaces",
    [
        # no namespace anywhere: -n, else default
        (f'[[jobs]]\nid = "a"\n{NOOP}', None, ["a"], ("default",)),
        (f'[[jobs]]\nid = "a"\n{NOOP}', "team-x", [join_key("team-x", "a")], ("team-x",)),
        # the file's namespace wins over -n; a job's own over the file's
        (f'namespace = "team-a"\n[[jobs]]\nid = "a"\n{NOOP}', "team-x", [join_key("team-a", "a")], ("team-a",)),
        (
            f'namespace = "team-a"\n[[jobs]]\nid = "a"\nnamespace = "team-b"\n{NOOP}',
            None,
            [join_key("team-b", "a")],
            ("team-a", "team-b"),  # the file names team-a too: its jobs not in the file are the file's business
        ),
        # default said in the file is default, whatever -n says
        (f'namespace = "default"\n[[jobs]]\nid = "a"\n{NOOP}', "team-x", ["a"], ("default",)),
        (f'[[jobs]]\nid = "a"\nnamespace = "default"\n{NOOP}', "team-x", ["a"], ("default",)),
        # a file with no jobs names its namespace (or -n's): applying it with --prune empties that namespace
        ('namespace = "team-a"\njobs = []\n', None, [], ("team-a",)),
        ("jobs = []\n", "team-x", [], ("team-x",)),
    ],
)
def test_the_namespaces_a_file_names(tmp_path, monkeypatch, text, flag, keys, namespaces):
    monkeypatch.delenv("SHARDCRON_NAMESPACE", raising=False)
    path = tmp_path / "jobs.toml"
    path.write_text(text)
    state = file_state(args(path, flag))
    assert [j.id for j in state.jobs] == keys
    assert state.namespaces == namespaces


def test_each_job_carries_the_files_path_as_given_or_the_source_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "jobs.toml").write_text(f'[[jobs]]\nid = "a"\n{NOOP}\n[[jobs]]\nid = "b"\n{NOOP}')
    state = file_state(args("./ci//jobs.toml"))
    assert {j.labels[SOURCE_LABEL] for j in state.jobs} == {"ci/jobs.toml"}
    assert {j.labels[SOURCE_LABEL] for j in file_state(args("ci/jobs.toml", source="prod")).jobs} == {"prod"}


def test_a_source_label_the_label_rules_refuse_names_the_file_the_job_and_the_flag(tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text(f'[[jobs]]\nid = "a"\n{NOOP}')
    with pytest.raises(JobFileError) as e:
        file_state(args(path, source="x" * 300))
    assert str(e.value).startswith(f"{path}: job 'a': labels: ") and "--source" in str(e.value)


@pytest.mark.parametrize(
    "argv,status",
    [
        (["jobs", "diff", "-f", "{missing}"], 2),  # diff: an error is 2, never its 1 (a difference)
        (["jobs", "apply", "-f", "{missing}"], 1),
        (["jobs", "apply", "--dry-run", "-f", "{missing}"], 1),
        (["jobs", "diff", "-f", "{bad}"], 2),
        (["jobs", "apply", "-f", "{bad}"], 1),
    ],
)
def test_a_file_refused_before_any_call_exits_with_the_commands_error_status(tmp_path, capsys, argv, status):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[jobs]]\nid = "a"\nevery = "1h"\ncatchup = "sometimes"\nexecutor = { kind = "noop" }\n')
    files = {"missing": str(tmp_path / "missing.toml"), "bad": str(bad)}
    assert main([arg.format(**files) for arg in argv] + ["--server", "127.0.0.1:1"]) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("shardcron: error: ")
    assert "job 'a': catchup" in err or "cannot read" in err


def job(job_id: str, **fields):
    return job_from_dict({"id": job_id, "every": "1h", "executor": {"kind": "noop"}, **fields})


SAMPLE = plan(
    [job("new"), job("edited", labels={"team": "ops"}, timeout="5s"), job("same")],
    [job("edited"), job("same"), job("gone", labels={SOURCE_LABEL: "old.toml"})],
    ["default"],
)


def test_the_plan_as_text():
    assert plan_text(SAMPLE, "jobs.toml", prune=False).splitlines() == [
        "+ new: to create",
        "~ edited: to change",
        '    labels.team: (absent) -> "ops"',
        '    timeout: "60000ms" -> "5000ms"',
        "= same: unchanged",
        f"- gone: in the cluster, not in jobs.toml (its {SOURCE_LABEL} is old.toml)",
        "jobs.toml against namespace default: 1 to create, 1 to change, 1 unchanged, 1 not in the file",
    ]
    assert "- gone: to delete (--prune)" in plan_text(SAMPLE, "jobs.toml", prune=True)
    same = plan([job("same")], [job("same")], ["default", "team-a"])
    assert plan_text(same, "j.toml", prune=False).splitlines() == [
        "= same: unchanged",
        "j.toml against namespaces default, team-a: no difference (1 unchanged)",
    ]


def test_a_plan_names_the_jobs_whose_secret_values_went_uncompared():
    hook = job("hook", executor={"kind": "http", "url": "https://example.com", "headers": [["Cookie", "c=1"]]})
    p = with_secret_checks(plan([hook], [hook], ["default"]), differing=[], unchecked=["hook"])
    assert plan_text(p, "j.toml", prune=False).splitlines() == [
        "= hook: unchanged (secret values not compared)",
        "j.toml against namespace default: no difference (1 unchanged)",
        "the secret values of 1 unchanged job(s) were not compared: that takes a token that may write to "
        "their namespace, and writes the servers accept",
    ]
    assert plan_json(p, "j.toml", prune=False)["secrets_unchecked"] == [{"namespace": "default", "id": "hook"}]


def test_the_plan_as_json_leaves_out_the_absent_side_of_a_change():
    got = json.loads(json.dumps(plan_json(SAMPLE, "jobs.toml", prune=False)))
    assert got["differs"] is True and got["namespaces"] == ["default"]
    assert [c["id"] for c in got["created"]] == ["new"]
    created = got["created"][0]["job"]
    assert (created["executor"], created["paused"], "version" in created) == ({"kind": "noop"}, False, False)
    assert got["changed"] == [
        {
            "namespace": "default",
            "id": "edited",
            "fields": [
                {"field": "labels.team", "new": "ops"},
                {"field": "timeout", "old": "60000ms", "new": "5000ms"},
            ],
        }
    ]
    assert got["unchanged"] == [{"namespace": "default", "id": "same"}]
    assert got["not_in_file"] == [{"namespace": "default", "id": "gone", "source": "old.toml"}]


def put_result(ok: bool, version: int = 0, unchanged: bool = False, message: str = "") -> PutResult:
    stored = job_to_proto(replace(job("a"), version=version), redact=True) if ok else None
    return PutResult("a", ok, "OK" if ok else "INVALID_ARGUMENT", message, unchanged=unchanged, stored=stored)


@pytest.mark.parametrize(
    "result,applied,row",
    [
        (
            put_result(False, message="executor.kind: refused"),
            False,
            Row(False, "INVALID_ARGUMENT", "executor.kind: refused"),
        ),
        (put_result(True, 1), False, Row(True, "OK", "valid, not written")),  # the check: nothing written
        (put_result(True, 1), True, Row(True, "OK", "created", applied=True, version=1)),
        (put_result(True, 4), True, Row(True, "OK", "updated", applied=True, version=4)),
        (
            put_result(True, 4, unchanged=True),
            True,
            Row(True, "OK", "unchanged", applied=True, version=4, unchanged=True),
        ),
    ],
)
def test_each_put_result_as_a_row_of_applys_answer(result, applied, row):
    assert result_row(job("a"), result, applied=applied) == row
    as_json = row_json(job("a"), row)
    assert (as_json["applied"], as_json["deleted"], bool(as_json["message"])) == (row.applied, False, not row.ok)


class RecordingClient:
    """A cluster that holds ``stored`` and records every PutJobs it is sent (``validate_only`` or not)."""

    def __init__(self, stored):
        self.stored, self.puts, self.deleted = stored, [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def list_jobs(self, namespace):
        return self.stored

    def put_jobs(self, jobs, validate_only=False):
        self.puts.append(([j.id for j in jobs], validate_only))
        return [PutResult(j.id, True, unchanged=True, stored=job_to_proto(j, redact=True)) for j in jobs]

    def delete_job(self, key):
        self.deleted.append(key)


def test_apply_prune_sends_no_validate_only_round_to_compare_secret_values(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SHARDCRON_NAMESPACE", raising=False)
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[[jobs]]\nid = "hook"\nevery = "1h"\n'
        'executor = { kind = "http", url = "https://example.com/", headers = { Authorization = "Bearer t" }, '
        'secret_headers = ["Authorization"] }\n'
    )
    hook = file_state(args(path)).jobs[0]
    cluster = RecordingClient([hook, job("gone")])
    monkeypatch.setattr(file_apply, "file_client", lambda a: cluster)
    a = argparse.Namespace(**vars(args(path)), json=True, dry_run=False, prune=True)
    assert file_apply.cmd_apply(a) == 0
    # the whole file checked, then written: the unchanged secret-holding job is not sent alone a third time
    assert cluster.puts == [(["hook"], True), (["hook"], False)]
    assert cluster.deleted == ["gone"]
