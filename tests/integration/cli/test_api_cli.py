"""`shardcron jobs ...` and `shardcron ticks ...` as a user runs them, against a real node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from shardcron.dev.testing.cluster import Cluster, wait_until
from shardcron.dev.testing.etcd_server import free_port
from tests.support.clusters import stopped_after

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def node(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-node")
    c = Cluster(etcd_server.endpoints, f"sqlite:///{d}/store.db", f"/t{uuid.uuid4().hex[:12]}", 2, 4, str(d))
    n = c.add("n0")
    with stopped_after(c):
        c.wait_all_led(60)
        yield n


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SHARDCRON_SERVER"}
    return {**env, **extra}


def run(node, *args: str, server: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "shardcron", *args]
    if server:
        cmd += ["--server", node.address]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env or _env())


def ok_json(node, *args: str):
    out = run(node, *args, "--json")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return json.loads(out.stdout)


def fails_with(node, *args: str, server: bool = True, env: dict | None = None) -> str:
    out = run(node, *args, server=server, env=env)
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardcron: error: "), out.stderr
    return lines[0]


def test_put_get_list_pause_resume_trigger_ticks_delete(node, tmp_path):
    a = ok_json(node, "jobs", "put", "cli-a", "--every", "1s", "--noop", "--label", "team=a")
    assert (a["id"], a["version"], a["schedule"], a["executor"]) == (
        "cli-a",
        1,
        {"interval_ms": 1000, "timezone": "UTC"},
        {"kind": "noop"},
    )

    b = ok_json(
        node,
        "jobs",
        "put",
        "cli-b",
        "--cron",
        "*/5 * * * *",
        "--tz",
        "Europe/Lisbon",
        "--http",
        "http://127.0.0.1:9/x",
        "--method",
        "GET",
        "--header",
        "X-A: 1",
        "--body",
        "{}",
        "--catchup",
        "latest",
        "--catchup-window",
        "10m",
        "--overlap",
        "allow",
        "--timeout",
        "30s",
        "--retries",
        "2",
        "--label",
        "team=b",
        "--label",
        "tier=1",
        "--paused",
    )
    assert b["schedule"] == {"cron": "*/5 * * * *", "timezone": "Europe/Lisbon"}
    assert (b["executor"]["url"], b["executor"]["method"], b["executor"]["headers"], b["executor"]["body"]) == (
        "http://127.0.0.1:9/x",
        "GET",
        [["X-A", "1"]],
        "{}",
    )
    assert (b["catchup"], b["catchup_window"], b["overlap"], b["timeout"], b["retry"]["max_attempts"]) == (
        "latest",
        "600000ms",
        "allow",
        "30000ms",
        3,
    )
    assert b["paused"] is True and b["labels"] == {"team": "b", "tier": "1"}
    got = ok_json(node, "jobs", "get", "cli-b")
    assert got.pop("runs")["next_slot_ms"] is None  # paused: no next run
    assert got == b

    assert [j["id"] for j in ok_json(node, "jobs", "list", "--label", "team=a")] == ["cli-a"]
    assert {j["id"] for j in ok_json(node, "jobs", "list")} >= {"cli-a", "cli-b"}
    shard = ok_json(node, "jobs", "get", "cli-a")["shard"]
    assert "cli-a" in [j["id"] for j in ok_json(node, "jobs", "list", "--shard", str(shard))]

    table = run(node, "jobs", "list")
    assert table.returncode == 0
    header, *rows = table.stdout.splitlines()
    assert header.split() == [
        "ID",
        "SHARD",
        "SCHEDULE",
        "EXECUTOR",
        "STATE",
        "VERSION",
        "LABELS",
        "NEXT",
        "LAST",
        "FAILS",
    ]
    row_b = next(r for r in rows if r.startswith("cli-b "))
    assert "cron */5 * * * * (Europe/Lisbon)" in row_b and "http GET http://127.0.0.1:9/x" in row_b
    assert "paused" in row_b and "team=b,tier=1" in row_b

    assert ok_json(node, "jobs", "pause", "cli-a")["paused"] is True
    resumed = ok_json(node, "jobs", "resume", "cli-a")
    assert resumed["paused"] is False and resumed["version"] == 3
    slot = ok_json(node, "jobs", "trigger", "cli-a")
    assert slot["id"] == "cli-a" and slot["scheduled_at_ms"] > 0

    ticks = wait_until(
        lambda: [
            t for t in ok_json(node, "ticks", "cli-a", "--limit", "50") if t["manual"] and t["status"] == "succeeded"
        ],
        20,
        0.5,
        what="the manual tick",
    )
    assert ticks[0]["scheduled_at_ms"] == slot["scheduled_at_ms"] and ticks[0]["node_id"] == "n0"
    human = run(node, "ticks", "cli-a", "--limit", "3")
    assert human.returncode == 0 and human.stdout.split()[:7] == [
        "SCHEDULED",
        "STATUS",
        "ATTEMPT",
        "NODE",
        "FENCE",
        "DURATION",
        "RESULT",
    ]

    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shardcron",
            "ticks",
            "cli-a",
            "--follow",
            "--json",
            "--limit",
            "1",
            "--server",
            node.address,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        lines = [follow.stdout.readline() for _ in range(3)]  # the latest, then new ones as they land
        events = [json.loads(line) for line in lines]
        assert all(e["job_id"] == "cli-a" for e in events)
        assert len({(e["scheduled_at_ms"], e["status"]) for e in events}) == 3
    finally:
        follow.send_signal(signal.SIGINT)
        assert follow.wait(20) == 130
    assert "Traceback" not in follow.stderr.read()

    assert ok_json(node, "jobs", "delete", "cli-a") == {"id": "cli-a", "deleted": True}
    said = run(node, "jobs", "delete", "cli-b")
    assert (said.returncode, said.stdout) == (0, "job 'cli-b' deleted\n")  # named as `put` and `pause` name it
    assert fails_with(node, "jobs", "get", "cli-a") == "shardcron: error: job 'cli-a' not found"
    assert fails_with(node, "jobs", "delete", "cli-a") == "shardcron: error: job 'cli-a' not found"


def test_apply_a_file_then_apply_it_again(node, tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  apply-a: {every: 1h, executor: {kind: noop}}\n"
        "  apply-b: {cron: '0 3 * * *', executor: {kind: http, url: 'https://example.invalid/b'}}\n"
    )
    first = ok_json(node, "jobs", "apply", "-f", str(path))
    assert [(r["id"], r["ok"], r["version"], r["unchanged"]) for r in first] == [
        ("apply-a", True, 1, False),
        ("apply-b", True, 1, False),
    ]
    again = ok_json(node, "jobs", "apply", "-f", str(path))
    assert [(r["id"], r["ok"], r["version"], r["unchanged"]) for r in again] == [
        ("apply-a", True, 1, True),
        ("apply-b", True, 1, True),
    ]
    table = run(node, "jobs", "apply", "-f", str(path))
    assert table.returncode == 0 and "unchanged" in table.stdout

    shelly = tmp_path / "shell.toml"
    shelly.write_text(
        '[[jobs]]\nid = "apply-c"\nevery = "1h"\nexecutor = { kind = "noop" }\n\n'
        '[[jobs]]\nid = "apply-sh"\nevery = "1h"\nexecutor = { kind = "shell", command = "true" }\n'
    )
    out = run(node, "jobs", "apply", "-f", str(shelly))
    assert out.returncode == 1
    assert "apply-sh" in out.stdout and "--allow-shell" in out.stdout
    assert out.stderr.startswith(f"shardcron: error: {shelly}: nothing was written: job 'apply-sh': executor")
    assert "--allow-shell" in out.stderr
    assert fails_with(node, "jobs", "get", "apply-c") == "shardcron: error: job 'apply-c' not found"  # all or nothing


def test_errors_are_one_line_and_exit_1(node, tmp_path):
    assert "schedule.cron" in fails_with(node, "jobs", "put", "bad", "--cron", "61 * * * *", "--noop")
    assert "--allow-shell" in fails_with(node, "jobs", "put", "sh", "--every", "1s", "--shell", "true")
    assert "executor.url" in fails_with(node, "jobs", "put", "u", "--every", "1s", "--http", "ftp://x/")
    assert "label" in fails_with(node, "jobs", "put", "l", "--every", "1s", "--noop", "--label", "novalue")
    dead = f"127.0.0.1:{free_port()}"
    line = fails_with(node, "jobs", "list", "--server", dead, server=False)
    assert f"no shardcron node answers at {dead}" in line
    missing = tmp_path / "missing.toml"
    assert "cannot read" in fails_with(node, "jobs", "apply", "-f", str(missing))


def test_the_server_comes_from_the_environment_by_default(node):
    out = run(node, "jobs", "list", "--json", server=False, env=_env(SHARDCRON_SERVER=node.address))
    assert out.returncode == 0, out.stderr
    assert isinstance(json.loads(out.stdout), list)
    dead = f"127.0.0.1:{free_port()}"
    # Several servers: the first that answers serves.
    out = run(node, "jobs", "list", "--json", "--server", dead, "--server", node.address, server=False)
    assert out.returncode == 0, out.stderr


# -- the minimum interval, a typo in a job file, and the other newcomer frictions -------------


def test_a_typo_of_1ms_for_1m_is_refused_naming_the_minimum(node, tmp_path):
    line = fails_with(node, "jobs", "put", "e2", "--every", "1ms", "--noop")
    assert line == (
        "shardcron: error: schedule.every: every 1ms: shorter than this cluster's minimum interval of "
        "1s; to allow it, lower the cluster's minimum with `shardcron config --min-interval DURATION`"
    )
    assert "minimum interval of 1s" in fails_with(node, "jobs", "put", "e3", "--every", "0.5s", "--noop")
    assert fails_with(node, "jobs", "get", "e2") == "shardcron: error: job 'e2' not found"  # nothing was stored
    assert ok_json(node, "jobs", "put", "e4", "--cron", "* * * * * *", "--noop", "--paused")["version"] == 1

    path = tmp_path / "fast.toml"
    path.write_text(
        '[[jobs]]\nid = "fast-ok"\nevery = "1m"\nexecutor = { kind = "noop" }\n\n'
        '[[jobs]]\nid = "fast-typo"\nevery = "1ms"\nexecutor = { kind = "noop" }\n'
    )
    out = run(node, "jobs", "apply", "-f", str(path), "--json")
    assert out.returncode == 1, out.stderr
    results = {r["id"]: r for r in json.loads(out.stdout)}
    assert (results["fast-ok"]["ok"], results["fast-ok"]["applied"]) == (True, False)  # valid, and not written
    assert fails_with(node, "jobs", "get", "fast-ok") == "shardcron: error: job 'fast-ok' not found"
    assert (
        results["fast-typo"]["code"] == "INVALID_ARGUMENT"
        and "minimum interval of 1s" in results["fast-typo"]["message"]
    )


@pytest.mark.parametrize(
    "body, message",
    [
        ('timzone = "Asia/Tokyo"', "job 'typo': timzone: unknown key; did you mean 'timezone'?"),
        ("retyr = { max_attempts = 3 }", "job 'typo': retyr: unknown key; did you mean 'retry'?"),
        ("bogus_field = 1", "job 'typo': bogus_field: unknown key; expected one of:"),
    ],
)
def test_apply_refuses_a_misspelled_key_naming_the_file_the_job_and_the_key(node, tmp_path, body, message):
    path = tmp_path / "typo.toml"
    path.write_text(f'[[jobs]]\nid = "typo"\nevery = "1m"\n{body}\nexecutor = {{ kind = "noop" }}\n')
    assert fails_with(node, "jobs", "apply", "-f", str(path)).startswith(f"shardcron: error: {path}: {message}")
    assert fails_with(node, "jobs", "get", "typo") == "shardcron: error: job 'typo' not found"


def test_apply_refuses_a_job_without_an_executor(node, tmp_path):
    path = tmp_path / "bare.toml"
    path.write_text('[[jobs]]\nid = "bare"\nevery = "1m"\n')
    assert fails_with(node, "jobs", "apply", "-f", str(path)) == (
        f"shardcron: error: {path}: job 'bare': executor: missing: every job needs one, of kind http, shell, noop, "
        "celery, rq, arq, nats, amqp, redis-stream, python"
    )


def test_ticks_of_a_missing_job_and_bad_limits_are_errors(node):
    assert fails_with(node, "ticks", "nosuchjob") == (
        "shardcron: error: no job named 'nosuchjob' (and no ticks "
        "recorded under that id); `shardcron jobs list` shows the jobs"
    )
    assert fails_with(node, "ticks", "nosuchjob", "--follow").startswith("shardcron: error: no job named")
    ok_json(node, "jobs", "put", "quiet", "--every", "1h", "--noop", "--paused")
    out = run(node, "ticks", "quiet")
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "no ticks recorded for quiet yet\n")
    assert ok_json(node, "ticks", "quiet") == []
    for limit in ("0", "-3"):
        out = run(node, "ticks", "quiet", "--limit", limit)
        assert (out.returncode, out.stderr) == (
            2,
            "shardcron ticks: error: argument --limit: must be a whole number "
            f"from 1 to 1000000, got '{limit}' (see shardcron ticks --help)\n",
        )
    for timeout in ("0", "-1"):
        out = run(node, "jobs", "list", "--request-timeout", timeout)
        assert (out.returncode, out.stderr) == (
            2,
            "shardcron jobs list: error: argument --request-timeout: must be "
            f"a number of seconds more than 0 and at most 315360000, got "
            f"'{timeout}' (see shardcron jobs list --help)\n",
        )


def test_flags_of_an_http_job_are_refused_on_another_kind(node):
    assert (
        fails_with(node, "jobs", "put", "n", "--every", "1m", "--noop", "--header", "X-A:1")
        == "shardcron: error: --header: only for --http or --nats or --amqp jobs; not for --noop"
    )
    assert (
        fails_with(node, "jobs", "put", "n", "--every", "1m", "--noop", "--method", "GET", "--body", "x")
        == "shardcron: error: --method: only for --http jobs; --body: only for --http or --nats or --amqp jobs; "
        "not for --noop"
    )
    assert (
        fails_with(node, "jobs", "put", "n", "--every", "1m", "--noop", "--retry-backoff", "5s")
        == "shardcron: error: --retry-backoff: only with --retries N (without retries there is nothing to delay)"
    )


def test_a_1_mib_body_comes_from_a_file_or_stdin(node, tmp_path):
    body = "0123456789abcdef" * 65536  # 1 MiB: far past what one argv string may hold
    path = tmp_path / "body.json"
    path.write_text(body)
    stored = ok_json(
        node,
        "jobs",
        "put",
        "big",
        "--every",
        "1h",
        "--http",
        "http://127.0.0.1:9/x",
        "--body-file",
        str(path),
        "--paused",
    )
    assert len(stored["executor"]["body"]) == len(body) == 1024 * 1024
    assert ok_json(node, "jobs", "get", "big")["executor"]["body"] == body

    piped = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "jobs",
            "put",
            "big-stdin",
            "--every",
            "1h",
            "--http",
            "http://127.0.0.1:9/x",
            "--body-file",
            "-",
            "--paused",
            "--json",
            "--server",
            node.address,
        ],
        input="from stdin",
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["executor"]["body"] == "from stdin"

    (tmp_path / "over.txt").write_text(body + "x")
    assert "is larger than the body limit of 1048576 bytes (1 MiB)" in fails_with(
        node,
        "jobs",
        "put",
        "big",
        "--every",
        "1h",
        "--http",
        "http://127.0.0.1:9/x",
        "--body-file",
        str(tmp_path / "over.txt"),
    )
    missing = tmp_path / "nope.json"
    assert (
        fails_with(
            node, "jobs", "put", "big", "--every", "1h", "--http", "http://127.0.0.1:9/x", "--body-file", str(missing)
        )
        == f"shardcron: error: --body-file: cannot read {missing}: No such file or directory"
    )
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    assert "is not UTF-8 text" in fails_with(
        node,
        "jobs",
        "put",
        "big",
        "--every",
        "1h",
        "--http",
        "http://127.0.0.1:9/x",
        "--body-file",
        str(tmp_path / "bin"),
    )


def test_authorization_is_secret_by_default_and_secret_header_takes_a_value(node):
    plain = ok_json(
        node,
        "jobs",
        "put",
        "auth-plain",
        "--cron",
        "0 9 * * 1-5",
        "--http",
        "https://example.invalid/",
        "--header",
        "Authorization:Bearer x",
        "--header",
        "X-Trace:7",
        "--paused",
    )
    assert plain["executor"]["headers"] == [["Authorization", "***"], ["X-Trace", "7"]]
    assert ok_json(node, "jobs", "get", "auth-plain")["executor"]["headers"] == [
        ["Authorization", "***"],
        ["X-Trace", "7"],
    ]
    secret = ok_json(
        node,
        "jobs",
        "put",
        "auth-secret",
        "--cron",
        "0 9 * * 1-5",
        "--http",
        "https://example.invalid/",
        "--secret-header",
        "Authorization:Bearer x",
        "--secret-header",
        "X-Key:k1",
        "--paused",
    )
    assert secret["executor"]["headers"] == [["Authorization", "***"], ["X-Key", "***"]]
    assert secret["executor"]["secret_headers"] == ["Authorization", "X-Key"]
    shown = run(node, "jobs", "get", "auth-secret", "--json")
    assert "Bearer x" not in shown.stdout and "k1" not in shown.stdout


def test_a_redis_stream_job_from_the_command_line_adds_one_entry_per_slot(node):
    """The whole road for a dispatch kind: flags -> API -> the shard's leader -> the broker, and back to the table."""
    import redis

    stream = f"sc-cli-{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        job = ok_json(
            node,
            "jobs",
            "put",
            "cli-stream",
            "--every",
            "1s",
            "--redis-stream",
            stream,
            "--broker",
            "redis://:s3cret@127.0.0.1:6379/0",
            "--field",
            "report=daily",
            "--maxlen",
            "100",
        )
        assert job["executor"] == {
            "kind": "redis-stream",
            "url": "redis://:***@127.0.0.1:6379/0",
            "stream": stream,
            "fields": {"report": "daily"},
            "maxlen": 100,
        }
        listed = run(node, "jobs", "list")
        assert f"redis-stream stream {stream}" in listed.stdout, listed.stdout
        # The password is wrong for this Redis (it has none): the node says so on the tick, naming the masked URL.
        wait_until(
            lambda: any(t["status"] == "failed" for t in ok_json(node, "ticks", "cli-stream")), 60, what="a failed tick"
        )
        failed = next(t for t in ok_json(node, "ticks", "cli-stream") if t["status"] == "failed")
        assert "redis://:***@127.0.0.1:6379/0" in failed["error"] and "s3cret" not in failed["error"], failed
        ok_json(
            node,
            "jobs",
            "put",
            "cli-stream",
            "--every",
            "1s",
            "--redis-stream",
            stream,
            "--broker",
            "redis://127.0.0.1:6379/0",
            "--field",
            "report=daily",
        )
        wait_until(lambda: r.xlen(stream) >= 3, 60, what="three entries in the stream")
        run(node, "jobs", "delete", "cli-stream")

        def slots_and_succeeded():
            entries = r.xrange(stream)
            assert all(
                fields[b"report"] == b"daily" and fields[b"shardcron_job_id"] == b"cli-stream" for _, fields in entries
            )
            slots = [int(fields[b"shardcron_scheduled_at_ms"]) for _, fields in entries]
            succeeded = {
                t["scheduled_at_ms"]
                for t in ok_json(node, "ticks", "cli-stream", "--limit", "100")
                if t["status"] == "succeeded"
            }
            return slots, succeeded

        # A tick in flight at the delete may still be recorded: wait until the store and the stream agree.
        wait_until(
            lambda: (lambda s, ok: sorted(s) == sorted(ok))(*slots_and_succeeded()),
            60,
            what="every entry to have its succeeded tick",
        )
        slots, _ = slots_and_succeeded()
        assert len(slots) == len(set(slots)), "one entry per slot"
    finally:
        r.delete(stream)
        r.close()


# -- tokens as people paste them, and a reader that goes away ---------------------------------------

TOKEN = "cli-legacy-secret"


@pytest.fixture(scope="module")
def token_node(etcd_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-token-node")
    (d / "tokens").write_text(f"# a legacy bare token: admin on every namespace\n{TOKEN}\n")
    c = Cluster(
        etcd_server.endpoints,
        f"sqlite:///{d}/store.db",
        f"/t{uuid.uuid4().hex[:12]}",
        2,
        4,
        str(d),
        extra_args=["--auth-token-file", str(d / "tokens")],
    )
    n = c.add("n0")
    with stopped_after(c):
        c.wait_all_led(60)
        yield n


@pytest.mark.parametrize("how", ["env", "flag"])
@pytest.mark.parametrize("typed", [f"{TOKEN}\n", f"{TOKEN}\t", f" {TOKEN}", f"Bearer {TOKEN}", f"bearer {TOKEN}\n"])
def test_a_token_with_whitespace_or_a_scheme_around_it_works(token_node, typed, how):
    # "x\n" (from `$(cat file)` kept by a script) gave "Invalid metadata" and a gRPC C-core trace;
    # " x" was refused with a misleading "pass --token".
    if how == "env":
        out = run(token_node, "jobs", "list", "--json", env=_env(SHARDCRON_TOKEN=typed))
    else:
        out = run(token_node, "jobs", "list", "--json", "--token", typed)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    assert json.loads(out.stdout) == []


def test_a_token_that_cannot_be_sent_is_one_line_naming_where_it_came_from(token_node):
    line = fails_with(token_node, "jobs", "list", "--token", f"{TOKEN[:3]} {TOKEN[3:]}")
    assert line == (
        "shardcron: error: --token holds a space at character 4: a token is printable ASCII with no "
        "whitespace inside (check how it was copied)"
    )
    line = fails_with(token_node, "jobs", "list", env=_env(SHARDCRON_TOKEN=f"{TOKEN}\x07"))
    assert line.startswith("shardcron: error: SHARDCRON_TOKEN holds U+0007 at character 18")


def closed_stdout_run(*args: str) -> subprocess.CompletedProcess:
    """``shardcron ARGS | head -0``: the reader of stdout is gone before the command writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "shardcron", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=_env(),
        )
    finally:
        os.close(write_end)


def test_a_reader_that_goes_away_ends_the_command_quietly(node, etcd_server):
    ok_json(node, "jobs", "put", "piped", "--every", "1h", "--noop")
    for args in (
        ["shards", "--etcd", etcd_server.endpoints, "--prefix", node.prefix],
        ["jobs", "list", "--server", node.address],
        ["jobs", "get", "piped", "--server", node.address],
    ):
        out = closed_stdout_run(*args)
        # 141: 128 + SIGPIPE, what a shell shows for a command its pipe's reader left
        assert (out.returncode, out.stderr) == (141, ""), (args, out.stderr)
