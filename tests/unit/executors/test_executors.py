"""Executors against a real HTTP server (devsink) and real subprocesses; no mocks."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
import trustme

from shardcron.abc import Executor
from shardcron.clock import rfc3339_ms
from shardcron.dev.sink import Sink
from shardcron.dev.testing.cluster import eventually
from shardcron.errors import InvalidJob
from shardcron.executors import Executors, HttpExecutor, NoopExecutor, ShellExecutor, describe, executor_for
from shardcron.executors.base import truncate_output
from shardcron.model import OUTPUT_LIMIT_BYTES, ExecutorKind, ExecutorSpec, HttpSpec, ShellSpec, TickContext
from shardcron.runtime.latch import Latch

pytestmark = pytest.mark.timeout(60)

CTX = TickContext(job_id="job-1", scheduled_at_ms=1_767_225_605_000, attempt=2, fence=7, shard=3, node_id="node-a")


@pytest.fixture
def http():
    """An http executor with its own loop and client (a node's comes from its ``Executors``)."""
    executor = HttpExecutor()
    yield executor
    executor.close()


def http_spec(url: str, **kw) -> ExecutorSpec:
    return ExecutorSpec(ExecutorKind.HTTP, http=HttpSpec(url, **kw))


def shell_spec(command: str) -> ExecutorSpec:
    return ExecutorSpec(ExecutorKind.SHELL, shell=ShellSpec(command))


def run(executor, spec, timeout_s=10.0, cancel=None):
    return executor.run(spec, CTX, timeout_s, cancel or Latch())


def wait_until(condition, timeout: float) -> bool:
    return eventually(condition, timeout, 0.01)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed orphan stays a zombie until PID 1 reaps it, and PID 1 in a
    # container often never does: a zombie has stopped running, so it counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# --- shared helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ms, text",
    [
        (1_767_225_605_000, "2026-01-01T00:00:05.000Z"),
        (1_767_225_605_123, "2026-01-01T00:00:05.123Z"),
        (0, "1970-01-01T00:00:00.000Z"),
    ],
)
def test_rfc3339_ms(ms, text):
    assert rfc3339_ms(ms) == text


@pytest.mark.parametrize(
    "data, limit, text",
    [
        (b"abc", 10, "abc"),
        (b"abcdef", 4, "abcd"),
        ("é".encode() * 3, 5, "éé"),  # the third é would be cut in half: dropped whole
        ("a€".encode(), 3, "a"),
        (b"ok\xff", 10, "ok\ufffd"),  # invalid bytes are replaced
        (b"\xff" * 10, 7, "\ufffd\ufffd"),  # ... and the replacements still fit the limit
    ],
)
def test_truncate_output(data, limit, text):
    out = truncate_output(data, limit)
    assert out == text
    assert len(out.encode()) <= limit


# --- http ----------------------------------------------------------------------------------------


def test_http_sends_tick_headers(sink, http):
    result = run(http, http_spec(sink.url + "/hook"))
    assert result.ok, result.error
    (req,) = sink.requests()
    assert req.header("X-Shardcron-Job-Id") == "job-1"
    assert req.header("X-Shardcron-Scheduled-At") == "2026-01-01T00:00:05.000Z"
    assert req.header("X-Shardcron-Scheduled-At-Ms") == "1767225605000"
    assert req.header("X-Shardcron-Attempt") == "2"
    assert req.header("X-Shardcron-Fence") == "7"
    assert req.header("X-Shardcron-Shard") == "3"
    assert req.header("X-Shardcron-Node") == "node-a"
    assert req.header("Idempotency-Key") == "job-1:1767225605000"


def test_http_method_body_and_user_headers_which_cannot_override_ours(sink, http):
    spec = http_spec(
        sink.url + "/put?x=1",
        method="PUT",
        body='{"a": 1}',
        headers=(
            ("Content-Type", "application/json"),
            ("X-Env", "prod"),
            ("x-shardcron-fence", "999"),
            ("IDEMPOTENCY-KEY", "forged"),
            ("X-Shardcron-Other", "forged"),
        ),
    )
    result = run(http, spec)
    assert result.ok, result.error
    (req,) = sink.requests()
    assert (req.method, req.path, req.body) == ("PUT", "/put?x=1", b'{"a": 1}')
    assert req.header("Content-Type") == "application/json"
    assert req.header("X-Env") == "prod"
    assert req.header("X-Shardcron-Fence") == "7"
    assert req.header("Idempotency-Key") == "job-1:1767225605000"
    assert req.header("X-Shardcron-Other") is None


def test_http_get_without_body(sink, http):
    result = run(http, http_spec(sink.url + "/get", method="GET"))
    assert result.ok, result.error
    (req,) = sink.requests()
    assert (req.method, req.body, req.header("Content-Type")) == ("GET", b"", None)


def test_http_header_values_may_be_non_ascii(sink, http):
    ctx = replace(CTX, job_id="ジョブ-1")
    result = http.run(http_spec(sink.url + "/", headers=(("X-Note", "café ☕"),)), ctx, 10.0, Latch())
    assert result.ok, result.error
    (req,) = sink.requests()
    assert req.header("X-Shardcron-Job-Id") == "ジョブ-1"
    assert req.header("Idempotency-Key") == "ジョブ-1:1767225605000"
    assert req.header("X-Note") == "café ☕"


def test_http_2xx_is_ok_with_status_and_output(sink, http):
    before = int(time.time() * 1000)
    result = run(http, http_spec(sink.url + "/"))
    assert (result.ok, result.http_status, result.output, result.error) == (True, 200, "ok", None)
    assert before <= result.started_at_ms <= result.finished_at_ms <= int(time.time() * 1000)
    result = run(http, http_spec(sink.url + "/status/201"))
    assert (result.ok, result.http_status) == (True, 201)


@pytest.mark.parametrize("status", [500, 404, 302])
def test_http_non_2xx_fails_with_its_status(sink, status, http):
    result = run(http, http_spec(sink.url + f"/status/{status}"))
    assert not result.ok
    assert result.http_status == status
    assert str(status) in result.error
    assert result.output == str(status)


def test_http_connection_refused(http):
    port = unused_port()
    result = run(http, http_spec(f"http://127.0.0.1:{port}/"))
    assert not result.ok
    assert result.http_status is None
    assert result.error == f"connection refused by 127.0.0.1:{port}"


@pytest.fixture
def tls_sink():
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    sink = Sink()
    sink.start(ssl_context=server_context)
    yield sink, ca
    sink.stop()


def test_https_to_a_trusted_server(tls_sink, tmp_path, monkeypatch, http):
    sink, ca = tls_sink
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # read when the executor builds its TLS context
    result = run(http, http_spec(sink.url + "/tls"))
    assert (result.ok, result.http_status, result.output) == (True, 200, "ok"), result.error
    assert [r.path for r in sink.requests()] == ["/tls"]


def test_https_to_an_untrusted_server_fails_clearly(tls_sink, http):
    sink, _ = tls_sink
    result = run(http, http_spec(sink.url + "/tls"))
    assert not result.ok
    assert result.error.startswith(f"TLS certificate verification failed for 127.0.0.1:{sink.address[1]}")
    assert sink.requests() == []


def test_http_timeout(sink, http):
    t0 = time.monotonic()
    result = run(http, http_spec(sink.url + "/slow/10000"), timeout_s=0.3)
    assert time.monotonic() - t0 < 3
    assert not result.ok
    assert "timed out after 0.3s" in result.error


def test_http_cancel_interrupts_a_slow_request_and_drops_its_connection(sink, http):
    cancel = Latch()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(run, http, http_spec(sink.url + "/slow/10000"), 30.0, cancel)
        assert sink.wait_for(lambda reqs: len(reqs) == 1, timeout=5)
        t0 = time.monotonic()
        cancel.set()
        result = future.result(timeout=5)
    assert time.monotonic() - t0 < 1
    assert not result.ok
    assert result.error.startswith("cancelled: ")
    # The request was cancelled on the loop and its connection closed, not kept for the next tick.
    assert run(http, http_spec(sink.url + "/after")).ok
    assert sink.connections_accepted == 2


def test_http_output_is_truncated_on_a_character_boundary(sink, http):
    body = "a" + "é" * 40_000  # 80 001 bytes; byte 65 536 falls inside an é
    result = run(http, http_spec(sink.url + "/echo", body=body))
    assert result.ok, result.error
    assert result.output == "a" + "é" * 32_767
    assert len(result.output.encode()) == OUTPUT_LIMIT_BYTES - 1


# --- shell ---------------------------------------------------------------------------------------


def test_shell_environment(monkeypatch):
    monkeypatch.setenv("SHARDCRON_TEST_INHERITED", "yes")
    names = [
        "SHARDCRON_JOB_ID",
        "SHARDCRON_SCHEDULED_AT",
        "SHARDCRON_SCHEDULED_AT_MS",
        "SHARDCRON_FENCE",
        "SHARDCRON_ATTEMPT",
        "SHARDCRON_SHARD",
        "SHARDCRON_NODE_ID",
        "SHARDCRON_IDEMPOTENCY_KEY",
        "SHARDCRON_TEST_INHERITED",
    ]
    command = "".join(f'printf "%s\\n" "${name}"; ' for name in names)
    result = run(ShellExecutor(), shell_spec(command))
    assert result.ok, result.error
    assert result.output.splitlines() == [
        "job-1",
        "2026-01-01T00:00:05.000Z",
        "1767225605000",
        "7",
        "2",
        "3",
        "node-a",
        "job-1:1767225605000",
        "yes",
    ]


def test_shell_success_merges_stdout_and_stderr():
    result = run(ShellExecutor(), shell_spec("echo out; echo err >&2"))
    assert (result.ok, result.exit_code, result.error) == (True, 0, None)
    assert result.output == "out\nerr\n"
    assert result.started_at_ms <= result.finished_at_ms


def test_shell_non_zero_exit_fails():
    result = run(ShellExecutor(), shell_spec("echo boom; exit 3"))
    assert (result.ok, result.exit_code, result.output) == (False, 3, "boom\n")
    assert result.error == "exited with code 3"


def test_shell_large_output_is_drained_and_truncated():
    t0 = time.monotonic()
    result = run(ShellExecutor(), shell_spec("yes | head -c 1000000; yes | head -c 1000000 >&2; echo done >&2"))
    assert time.monotonic() - t0 < 5
    assert result.ok, result.error
    assert result.output == "y\n" * (OUTPUT_LIMIT_BYTES // 2)


def test_shell_output_truncated_on_a_character_boundary():
    # "a" then 100 000 bytes of é: byte 65 536 falls inside an é.
    result = run(ShellExecutor(), shell_spec("printf a; yes é | tr -d '\\n' | head -c 100000"))
    assert result.ok, result.error
    assert result.output == "a" + "é" * 32_767


def test_shell_background_process_holding_the_output_does_not_hold_the_attempt(tmp_path):
    pidfile = tmp_path / "child.pid"
    t0, cpu0 = time.monotonic(), time.thread_time()
    result = run(ShellExecutor(), shell_spec(f"sleep 30 & echo $! > {pidfile}; echo bg"), timeout_s=10)
    elapsed, cpu = time.monotonic() - t0, time.thread_time() - cpu0
    child = int(pidfile.read_text())
    os.kill(child, 9)
    assert (result.ok, result.output) == (True, "bg\n"), result.error
    assert 0.9 < elapsed < 3  # the shell exited at once; the output is read for EXIT_DRAIN_S more
    assert cpu < 0.5  # waited, did not spin


@pytest.mark.parametrize("ignore_sigterm", [False, True], ids=["sigterm", "sigkill-after-grace"])
def test_shell_timeout_kills_the_whole_process_group(tmp_path, ignore_sigterm):
    pidfile = tmp_path / "child.pid"
    trap = "trap '' TERM; " if ignore_sigterm else ""
    command = f"{trap}echo started; sleep 60 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    result = run(ShellExecutor(), shell_spec(command), timeout_s=0.5)
    elapsed = time.monotonic() - t0
    assert not result.ok
    assert result.error.startswith("timed out after 0.5s")
    assert result.exit_code == (-9 if ignore_sigterm else -15)
    assert result.output == "started\n"
    assert elapsed < (4 if ignore_sigterm else 2)
    child = int(pidfile.read_text())
    assert wait_until(lambda: not process_alive(child), timeout=3), f"child {child} outlived the timeout"


def test_shell_cancel_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    cancel = Latch()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            run,
            ShellExecutor(),
            shell_spec(f"sleep 60 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait"),
            30.0,
            cancel,
        )
        assert wait_until(pidfile.exists, timeout=5)
        t0 = time.monotonic()
        cancel.set()
        result = future.result(timeout=5)
    assert time.monotonic() - t0 < 1
    assert not result.ok
    assert result.error.startswith("cancelled: ")
    assert result.exit_code == -15
    child = int(pidfile.read_text())
    assert wait_until(lambda: not process_alive(child), timeout=3), f"child {child} outlived the cancel"


def test_shell_cancelled_before_start_runs_nothing(tmp_path):
    cancel = Latch()
    cancel.set()
    result = run(ShellExecutor(), shell_spec(f"touch {tmp_path}/ran"), cancel=cancel)
    assert not result.ok and result.error.startswith("cancelled: ")
    assert not (tmp_path / "ran").exists()


# --- executor_for, noop, describe ----------------------------------------------------------------


def test_executor_for_refuses_shell_without_allow_shell():
    with pytest.raises(InvalidJob) as info:
        executor_for(ExecutorKind.SHELL, allow_shell=False)
    assert info.value.field == "executor.kind"
    assert info.value.reason == "shell jobs are refused: this node runs without --allow-shell"
    assert isinstance(executor_for(ExecutorKind.SHELL, allow_shell=True), ShellExecutor)


def test_executor_for_shares_instances():
    for kind in (ExecutorKind.NOOP, ExecutorKind.SHELL):
        executor = executor_for(kind, allow_shell=True)
        assert isinstance(executor, Executor)
        assert executor is executor_for(kind, allow_shell=True)
    assert executor_for(ExecutorKind.NOOP, allow_shell=False) is executor_for(ExecutorKind.NOOP, allow_shell=True)


def test_a_nodes_executors_make_one_instance_per_kind_on_first_use():
    executors = Executors(allow_shell=True, allow_python=("tests",))
    try:
        for kind in ExecutorKind:
            executor = executors.for_kind(kind)
            assert isinstance(executor, Executor), kind
            assert executor is executors.for_kind(kind), kind
    finally:
        executors.close()


@pytest.mark.parametrize("kind", [ExecutorKind.CELERY, ExecutorKind.HTTP])
def test_executor_for_refuses_the_kinds_a_node_owns(kind):
    with pytest.raises(InvalidJob, match=f"{kind.value} executors belong to a node's Executors"):
        executor_for(kind, allow_shell=True)


def test_noop_is_ok():
    result = run(executor_for(ExecutorKind.NOOP, allow_shell=False), ExecutorSpec(ExecutorKind.NOOP))
    assert result.ok and result.error is None
    assert 0 <= result.duration_ms < 100
    assert isinstance(NoopExecutor(), Executor)


def test_describe_masks_secrets():
    spec = http_spec(
        "https://bot:hunter2@hooks.example/run?x=1",
        method="POST",
        headers=(("Authorization", "Bearer s3cret"), ("X-Env", "prod")),
        body="{}",
        secret_headers=("authorization",),
    )
    line = describe(spec)
    assert (
        line
        == "http POST https://bot:***@hooks.example/run?x=1 (headers: Authorization: ***, X-Env: prod; body: 2 bytes)"
    )
    assert "s3cret" not in line and "hunter2" not in line
    assert describe(shell_spec("set -e\n  backup   --full\n")) == "shell: set -e backup --full"
    assert describe(ExecutorSpec(ExecutorKind.NOOP)) == "noop"


# --- devsink -------------------------------------------------------------------------------------


def test_devsink_main_prints_one_line_per_request(http):
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardcron.dev.sink", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("devsink listening on http://127.0.0.1:"), first + proc.stderr.read()
        url = first.split()[-1]
        result = run(http, http_spec(url + "/hook"))
        assert result.ok, result.error
        line = proc.stdout.readline()
        assert "POST /hook job=job-1 scheduled_at=2026-01-01T00:00:05.000Z fence=7" in line
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        proc.stdout.close()
        proc.stderr.close()


def test_devsink_any_method_and_wait_for(sink):
    request = urllib.request.Request(sink.url + "/x", method="DELETE")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert (response.status, response.read()) == (200, b"ok")
    assert sink.wait_for(lambda reqs: any(r.method == "DELETE" for r in reqs), timeout=1)
    assert not sink.wait_for(lambda reqs: len(reqs) > 1, timeout=0.05)
