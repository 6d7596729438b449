"""Schedules as code against a real cluster: `jobs diff`, `jobs apply --prune/--dry-run`, and a file the
servers refuse changing nothing. Two nodes, so that the jobs of a file are checked and written by more than
one leader (validate_only travels with the forwarded calls)."""

from __future__ import annotations

import json
import uuid

import pytest

from shardcron.dev.testing.etcd_server import free_port
from shardcron.rules.job_plan import SOURCE_LABEL
from tests.support.clusters import sqlite_cluster
from tests.support.commands import node_command, shardcron

pytestmark = pytest.mark.cluster

SHARDS = 4
NOOP = 'executor = { kind = "noop" }'


@pytest.fixture(scope="module")
def node(etcd_server, tmp_path_factory):
    with sqlite_cluster(etcd_server, tmp_path_factory, "jobs-diff", SHARDS, ["a", "b"]) as (_, nodes, _url):
        yield nodes[0]


@pytest.fixture
def namespace(node) -> str:
    """A namespace of the test's own, so that the module's tests cannot see each other's jobs."""
    name = f"diff-{uuid.uuid4().hex[:8]}"
    out = node_command(node, "namespaces", "create", name)
    assert out.returncode == 0, out.stderr
    return name


def jobs_file(tmp_path, namespace: str, jobs: dict[str, str], name: str = "jobs.toml"):
    """A TOML job file in ``namespace``: each job's id and its extra TOML lines (an hourly noop by default)."""
    body = "".join(f'\n[jobs.{jid}]\nevery = "1h"\n{extra or NOOP}\n' for jid, extra in jobs.items())
    path = tmp_path / name
    path.write_text(f'namespace = "{namespace}"\n{body}')
    return path


def cli(node, *args: str):
    out = node_command(node, *args)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def diff_json(node, path) -> tuple[int, dict]:
    out = cli(node, "jobs", "diff", "-f", str(path), "--json")
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def ids(entries: list[dict]) -> list[str]:
    return [e["id"] for e in entries]


def test_diff_of_a_file_against_an_empty_namespace_then_apply_then_no_difference(node, namespace, tmp_path):
    path = jobs_file(tmp_path, namespace, {"alpha": "", "beta": ""})
    out = cli(node, "jobs", "diff", "-f", str(path))
    assert out.returncode == 1, out.stderr  # a difference, as diff(1) says it
    assert out.stdout.splitlines() == [
        f"+ {namespace}/alpha: to create",
        f"+ {namespace}/beta: to create",
        f"{path} against namespace {namespace}: 2 to create, 0 to change, 0 unchanged, 0 not in the file",
    ]

    applied = cli(node, "jobs", "apply", "-f", str(path), "--json")
    assert applied.returncode == 0, applied.stderr
    assert [(r["id"], r["applied"], r["version"]) for r in json.loads(applied.stdout)] == [
        ("alpha", True, 1),
        ("beta", True, 1),
    ]
    status, plan = diff_json(node, path)
    assert (status, plan["differs"], ids(plan["unchanged"])) == (0, False, ["alpha", "beta"])
    got = json.loads(cli(node, "jobs", "get", "alpha", "-n", namespace, "--json").stdout)
    assert got["labels"] == {SOURCE_LABEL: str(path)}  # the dashboard shows it with the definition


def test_a_changed_field_is_shown_old_to_new(node, namespace, tmp_path):
    path = jobs_file(tmp_path, namespace, {"gamma": ""})
    assert cli(node, "jobs", "apply", "-f", str(path)).returncode == 0
    cli(node, "jobs", "pause", "gamma", "-n", namespace)  # apply keeps a pause: no difference
    edited = jobs_file(tmp_path, namespace, {"gamma": f'timeout = "5s"\n{NOOP}'})
    out = cli(node, "jobs", "diff", "-f", str(edited))
    assert out.returncode == 1
    assert out.stdout.splitlines()[:2] == [f"~ {namespace}/gamma: to change", '    timeout: "60000ms" -> "5000ms"']


def test_a_removed_job_is_shown_and_prune_deletes_it_in_the_files_namespace_only(node, namespace, tmp_path):
    other = f"{namespace}-other"
    assert cli(node, "namespaces", "create", other).returncode == 0
    assert cli(node, "jobs", "put", "delta", "-n", other, "--every", "1h", "--noop").returncode == 0
    full = jobs_file(tmp_path, namespace, {"delta": "", "eps": ""})
    assert cli(node, "jobs", "apply", "-f", str(full)).returncode == 0

    smaller = jobs_file(tmp_path, namespace, {"delta": ""})  # the same file, eps taken out: same source label
    status, plan = diff_json(node, smaller)
    assert (status, ids(plan["not_in_file"]), ids(plan["unchanged"])) == (1, ["eps"], ["delta"])
    assert plan["not_in_file"][0]["source"] == str(full)  # which file put it there

    dry = cli(node, "jobs", "apply", "-f", str(smaller), "--prune", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"- {namespace}/eps: to delete (--prune)" in dry.stdout
    assert cli(node, "jobs", "get", "eps", "-n", namespace).returncode == 0  # the dry run changed nothing

    pruned = cli(node, "jobs", "apply", "-f", str(smaller), "--prune", "--json")
    assert pruned.returncode == 0, pruned.stderr
    assert [(r["id"], r["applied"], r["unchanged"], r["deleted"]) for r in json.loads(pruned.stdout)] == [
        ("delta", True, True, False),
        ("eps", True, False, True),
    ]
    assert cli(node, "jobs", "get", "eps", "-n", namespace).returncode == 1
    assert cli(node, "jobs", "get", "delta", "-n", other).returncode == 0  # another namespace's job stays
    assert diff_json(node, smaller)[0] == 0


def test_a_file_with_one_job_the_servers_refuse_changes_nothing(node, namespace, tmp_path):
    path = jobs_file(tmp_path, namespace, {"zeta": ""})
    assert cli(node, "jobs", "apply", "-f", str(path)).returncode == 0
    # The client parses a shell job; the nodes run without --allow-shell, so their check refuses it.
    bad = jobs_file(
        tmp_path,
        namespace,
        {
            "zeta": f'timeout = "5s"\n{NOOP}',
            **{f"ok{i}": "" for i in range(8)},  # on several shards, so on both nodes' leaders
            "shelly": 'executor = { kind = "shell", command = "true" }',
        },
        name="bad.toml",
    )
    out = cli(node, "jobs", "apply", "-f", str(bad))
    assert out.returncode == 1
    line = out.stderr.strip()
    assert line.startswith(
        f"shardcron: error: {bad}: nothing was written: job 'shelly' in namespace '{namespace}': executor.kind: "
    ), line
    assert "--allow-shell" in line
    status, plan = diff_json(node, bad)
    assert status == 1 and ids(plan["created"]) == [*(f"ok{i}" for i in range(8)), "shelly"]
    assert ids(plan["changed"]) == ["zeta"]  # still as the first file left it


def test_diff_exits_2_on_an_error_never_1(tmp_path):
    path = jobs_file(tmp_path, "default", {"eta": ""})
    dead = f"127.0.0.1:{free_port()}"
    gone = shardcron("jobs", "diff", "-f", str(path), "--server", dead)
    assert gone.returncode == 2 and gone.stderr.startswith("shardcron: error: "), gone.stderr


def test_a_file_past_its_namespaces_quota_changes_nothing(node, namespace, tmp_path):
    """The quota is the store's check, made in the leader's transaction that validate_only rolls back."""
    path = jobs_file(tmp_path, namespace, {"theta": ""})
    assert cli(node, "jobs", "apply", "-f", str(path)).returncode == 0
    assert cli(node, "namespaces", "update", namespace, "--max-jobs", "1").returncode == 0
    more = jobs_file(tmp_path, namespace, {"theta": f'timeout = "5s"\n{NOOP}', "iota": ""})
    out = cli(node, "jobs", "apply", "-f", str(more))
    assert out.returncode == 1
    assert out.stderr.startswith(
        f"shardcron: error: {more}: nothing was written: job 'iota' in namespace '{namespace}'"
    )
    assert "its quota max_jobs is 1" in out.stderr
    status, plan = diff_json(node, more)
    assert (status, ids(plan["created"]), ids(plan["changed"])) == (1, ["iota"], ["theta"])  # theta kept its timeout


def test_a_secret_value_changed_alone_is_a_difference_the_servers_see(node, namespace, tmp_path):
    """Every answer masks a secret header, so only the leaders, which hold the values, can tell it changed."""

    def hook(secret: str) -> dict[str, str]:
        return {
            "kappa": 'paused = true\nexecutor = { kind = "http", url = "http://127.0.0.1:9/hook", '
            f'headers = {{ Authorization = "Bearer {secret}" }} }}'
        }

    path = jobs_file(tmp_path, namespace, hook("first"))
    assert cli(node, "jobs", "apply", "-f", str(path)).returncode == 0
    status, plan = diff_json(node, path)
    assert (status, ids(plan["unchanged"]), plan["secrets_unchecked"]) == (0, ["kappa"], [])

    rotated = jobs_file(tmp_path, namespace, hook("second"), name="rotated.toml")
    out = cli(node, "jobs", "diff", "-f", str(rotated), "--source", str(path))  # the same source label
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines()[:2] == [
        f"~ {namespace}/kappa: to change",
        '    (secret values): "***" -> "*** (another value)"',
    ]
    assert "second" not in out.stdout
    assert cli(node, "jobs", "apply", "-f", str(rotated), "--source", str(path)).returncode == 0
    assert diff_json(node, path)[0] == 1  # the first file is now the one that differs
