"""The cluster's minimum interval on real nodes: a job file below it stops the node at start, naming the file,
the job and the minimum; a cluster whose first node ran with a lower minimum accepts (and runs) what the
default refuses; the value lives in ``<prefix>/config``, a node given another one refuses to start, and
``shardcron config --min-interval`` changes it on every live node at once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import func, select

from shardcron import Client
from shardcron.client.errors import InvalidRequest
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.dev.testing.cluster import wait_until
from shardcron.spec.job import job_from_dict
from shardcron.store.engine import make_engine
from shardcron.store.schema import ticks

pytestmark = pytest.mark.cluster


def succeeded_ticks(engine, job_id: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            select(func.count()).select_from(ticks).where(ticks.c.job_id == job_id, ticks.c.status == "succeeded")
        ).scalar()


def node_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcron", "node", "--listen", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def config_cli(etcd_server, prefix: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcron", "config", "--etcd", etcd_server.endpoints, "--prefix", prefix, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def the_one_error_line(out: subprocess.CompletedProcess) -> str:
    """Exit 1 and one error line, the last one (a node logs its start-up before it); no traceback."""
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("shardcron: error:")]
    assert "Traceback" not in out.stderr and len(errors) == 1 and lines[-1] == errors[0], out.stderr
    return errors[0]


def stored_config(etcd_server, prefix: str) -> dict | None:
    etcd = Etcd(etcd_server.endpoints, timeout_s=3.0)
    try:
        kv = etcd.get(KeyLayout(prefix).config)
        return json.loads(kv.value) if kv else None
    finally:
        etcd.close()


def job(job_id: str, every: str, paused: bool = True):
    return job_from_dict({"id": job_id, "every": every, "executor": {"kind": "noop"}, "paused": paused})


def admitted(client: Client, job_id: str, every: str) -> bool:
    try:
        client.put_job(job(job_id, every))
        return True
    except InvalidRequest as e:
        assert "shorter than this cluster's minimum interval" in str(e), e
        return False


@pytest.mark.parametrize(
    "schedule, minimum, said",
    [
        ('every = "1ms"', "1s", "schedule.every: every 1ms: shorter than this cluster's minimum interval of 1s"),
        (
            'cron = "* * * * * *"',
            "2s",
            "schedule.cron: '* * * * * *' has slots 1s apart: shorter than this cluster's minimum interval of 2s",
        ),
        (
            'cron = "*/5 * * * *"',
            "10m",
            "schedule.cron: '*/5 * * * *' has slots 5m apart: shorter than this cluster's minimum interval of 10m",
        ),
    ],
)
def test_a_job_file_below_the_minimum_stops_the_node_naming_file_job_and_minimum(
    tmp_path, etcd_server, etcd_prefix, schedule, minimum, said
):
    path = tmp_path / "jobs.toml"
    path.write_text(f'[[jobs]]\nid = "e2"\n{schedule}\nexecutor = {{ kind = "noop" }}\n')
    out = node_cli(
        "--etcd",
        etcd_server.endpoints,
        "--prefix",
        etcd_prefix,
        "--db",
        f"sqlite:///{tmp_path}/x.db",
        "--jobs",
        str(path),
        "--min-interval",
        minimum,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line == (
        f"shardcron: error: {path}: job 'e2': {said}; to allow it, lower the cluster's "
        "minimum with `shardcron config --min-interval DURATION`"
    )


def test_a_bad_min_interval_is_refused_naming_the_flag(tmp_path, etcd_server):
    out = node_cli("--etcd", etcd_server.endpoints, "--db", f"sqlite:///{tmp_path}/x.db", "--min-interval", "fast")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert (
        out.stderr.strip().splitlines()[-1]
        == "shardcron: error: --min-interval: expected a duration such as 1s, 500ms or 1m (0: no minimum), got 'fast'"
    )


def test_a_lower_minimum_admits_sub_second_jobs_from_the_file_and_the_api(make_cluster, tmp_path):
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[[jobs]]\nid = "fast-file"\nevery = "250ms"\nexecutor = { kind = "noop" }\n')
    db = f"sqlite:///{tmp_path}/store.db"
    c = make_cluster(db, shards=2, extra_args=["--jobs", str(jobs)])
    n = c.add("n0", env={"SHARDCRON_MIN_INTERVAL": "200ms"})  # the variable works as the flag does
    c.wait_all_led(60)
    with Client(n.address) as client:
        assert (
            client.put_job(
                job_from_dict({"id": "fast-api", "every": "200ms", "executor": {"kind": "noop"}, "paused": True})
            ).version
            == 1
        )
        with pytest.raises(InvalidRequest, match="every 100ms: shorter than this cluster's minimum interval of 200ms"):
            client.put_job(job_from_dict({"id": "too-fast", "every": "100ms", "executor": {"kind": "noop"}}))
        results = client.put_jobs(
            [
                job_from_dict({"id": "b-ok", "every": "200ms", "paused": True}),
                job_from_dict({"id": "b-bad", "every": "199ms"}),
            ]
        )
        assert [r.ok for r in results] == [True, False] and "minimum interval of 200ms" in results[1].message
    engine = make_engine(db)
    try:

        def succeeded() -> int:
            return succeeded_ticks(engine, "fast-file")

        wait_until(lambda: succeeded() >= 8, 60, 0.2, what="the 250ms job from the file to run")
    finally:
        engine.dispose()


def test_the_first_node_writes_the_minimum_a_node_given_another_refuses_and_one_without_adopts_it(
    make_cluster, etcd_server, etcd_prefix, tmp_path
):
    db = f"sqlite:///{tmp_path}/store.db"
    c = make_cluster(db, shards=2)
    c.add("n0", extra_args=["--min-interval", "200ms"])
    wait_until(lambda: stored_config(etcd_server, etcd_prefix), 60, 0.1, what="the first node to write the config")
    assert stored_config(etcd_server, etcd_prefix)["min_interval_ms"] == 200

    base = ["--etcd", etcd_server.endpoints, "--prefix", etcd_prefix, "--db", db, "--shards", "2"]
    refused = node_cli(*base, "--node-id", "n-flag", "--min-interval", "1s")
    assert the_one_error_line(refused) == (
        f"shardcron: error: the cluster under {etcd_prefix} has a minimum interval of 200ms, but this node was "
        "started with --min-interval 1s (SHARDCRON_MIN_INTERVAL); start it without the flag to use the "
        "cluster's, or change the cluster's with `shardcron config --min-interval 1s`"
    )
    by_env = node_cli(*base, "--node-id", "n-env", env={**_env(), "SHARDCRON_MIN_INTERVAL": "500ms"})
    assert "but this node was started with --min-interval 500ms" in the_one_error_line(by_env)

    n1 = c.add("n1")  # no flag: the cluster's 200ms
    c.wait_balanced({"n0", "n1"}, 60)
    with Client(n1.address) as client:
        for i in range(4):  # on either shard: received by n1, written by whichever node leads
            assert admitted(client, f"ok-{i}", "200ms")
            assert not admitted(client, f"fast-{i}", "150ms")
    shown = json.loads(config_cli(etcd_server, etcd_prefix, "--json").stdout)
    assert shown["shards"] == 2 and shown["min_interval_ms"] == 200 and shown["created_at_ms"] > 0


def test_shardcron_config_changes_the_minimum_on_every_live_node(make_cluster, etcd_server, etcd_prefix, tmp_path):
    db = f"sqlite:///{tmp_path}/store.db"
    c = make_cluster(db, shards=2)
    n0, n1 = c.add("n0"), c.add("n1")  # neither gives a minimum: the cluster's is the default 1s
    c.wait_balanced({"n0", "n1"}, 60)
    assert stored_config(etcd_server, etcd_prefix)["min_interval_ms"] == 1000
    ids = [f"j{i}" for i in range(6)]  # spread over both shards, each led by one of the nodes
    with Client(n0.address) as a, Client(n1.address) as b:
        assert not any(admitted(client, i, "300ms") for client in (a, b) for i in ids)

        out = config_cli(etcd_server, etcd_prefix, "--min-interval", "300ms")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == (
            "the cluster's minimum interval is now 300ms (was 1s): every node admits new "
            "and changed jobs by it at once; stored jobs keep running as stored"
        )
        assert stored_config(etcd_server, etcd_prefix)["shards"] == 2  # the other keys are kept
        for client in (a, b):
            for i in ids:  # each node's view follows the watch: wait, then every write is admitted
                wait_until(
                    lambda client=client, i=i: admitted(client, i, "300ms"),
                    30,
                    0.1,
                    what=f"{i} at 300ms to be admitted once the minimum is 300ms",
                )
        assert not admitted(a, "still-too-fast", "299ms")

        # Raise it again: new writes are refused at once on both nodes, a stored job keeps running.
        a.put_job(job("runs-on", "300ms", paused=False))
        assert config_cli(etcd_server, etcd_prefix, "--min-interval", "1s").returncode == 0
        for client in (a, b):
            wait_until(
                lambda client=client: not admitted(client, "late", "300ms"),
                30,
                0.1,
                what="a 300ms job to be refused once the minimum is back to 1s",
            )
    engine = make_engine(db)
    try:

        def succeeded() -> int:
            return succeeded_ticks(engine, "runs-on")

        before = succeeded()
        wait_until(lambda: succeeded() >= before + 5, 60, 0.2, what="the stored 300ms job to keep running")
    finally:
        engine.dispose()
    shown = config_cli(etcd_server, etcd_prefix)
    assert shown.returncode == 0 and "min interval  1s" in shown.stdout and "shards        2" in shown.stdout


def test_an_older_cluster_without_the_key_means_one_second(etcd_server, etcd_prefix, tmp_path):
    etcd = Etcd(etcd_server.endpoints, timeout_s=3.0)
    try:
        etcd.put(KeyLayout(etcd_prefix).config, json.dumps({"shards": 2, "created_at_ms": 1}).encode())
    finally:
        etcd.close()
    shown = json.loads(config_cli(etcd_server, etcd_prefix, "--json").stdout)
    assert shown == {"prefix": etcd_prefix, "shards": 2, "min_interval_ms": 1000, "created_at_ms": 1}
    refused = node_cli(
        "--etcd",
        etcd_server.endpoints,
        "--prefix",
        etcd_prefix,
        "--db",
        f"sqlite:///{tmp_path}/x.db",
        "--shards",
        "2",
        "--min-interval",
        "200ms",
    )
    assert "has a minimum interval of 1s, but this node was started with --min-interval 200ms" in the_one_error_line(
        refused
    )
    assert config_cli(etcd_server, etcd_prefix, "--min-interval", "200ms").returncode == 0
    assert stored_config(etcd_server, etcd_prefix) == {"shards": 2, "created_at_ms": 1, "min_interval_ms": 200}


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ["--min-interval", "soon"],
            "--min-interval: expected a duration such as 1s, 500ms or 1m (0: no minimum), got 'soon'",
        ),
        (["--min-interval=-1s"], "--min-interval: "),
    ],
)
def test_shardcron_config_refuses_a_bad_value_naming_the_flag(etcd_server, etcd_prefix, args, said):
    assert the_one_error_line(config_cli(etcd_server, etcd_prefix, *args)).startswith(f"shardcron: error: {said}")


def test_shardcron_config_without_a_cluster_or_during_a_reshard_is_a_clear_error(etcd_server, etcd_prefix):
    for args in ([], ["--min-interval", "200ms"]):
        assert the_one_error_line(config_cli(etcd_server, etcd_prefix, *args)) == (
            f"shardcron: error: no cluster under {etcd_prefix} in etcd (no node has started yet): start a node first"
        )
    layout = KeyLayout(etcd_prefix)
    etcd = Etcd(etcd_server.endpoints, timeout_s=3.0)
    try:
        etcd.put(layout.config, json.dumps({"shards": 2, "created_at_ms": 1, "min_interval_ms": 1000}).encode())
        etcd.put(layout.reshard, json.dumps({"from": 2, "to": 4, "state": "draining"}).encode())
        assert the_one_error_line(config_cli(etcd_server, etcd_prefix, "--min-interval", "200ms")) == (
            "shardcron: error: a reshard is in progress (`shardcron shards` shows it); change the minimum interval "
            "once it has finished"
        )
        assert json.loads(etcd.get(layout.config).value)["min_interval_ms"] == 1000
    finally:
        etcd.close()


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "SHARDCRON_MIN_INTERVAL"}
