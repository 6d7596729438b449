"""`make dev` (`shardcron dev`) starts, shows ticks, and stops cleanly on SIGINT."""

from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from shardcron.dev.testing.cluster import eventually
from shardcron.dev.testing.etcd_server import free_port, port_open

pytestmark = pytest.mark.cluster


def descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.add(k)
            todo.append(k)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def without_shardcron_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("SHARDCRON_")}


def free_ports_below_ephemeral(count: int, avoid: range = range(0)) -> int:
    """The first of ``count`` consecutive free loopback ports below the kernel's ephemeral range."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(10_000, ephemeral_low - count)
        ports = range(first, first + count)
        if not set(ports) & set(avoid) and all(_bindable(p) for p in ports):
            return first
    raise RuntimeError(f"no {count} consecutive free ports between 10000 and {ephemeral_low}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def exports(text: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines `shardcron dev` prints."""
    found = re.findall(r"^\s*export (SHARDCRON_[A-Z_]+)=(\S+)$", text, re.MULTILINE)
    return dict(found)


def test_dev_cluster_streams_ticks_and_leaves_nothing_behind_on_ctrl_c(tmp_path):
    # Runs of consecutive ports below the ephemeral range: etcd's ports and outgoing connections come from
    # that range, and one of them took a dashboard's port between the check and the bind once.
    base = free_ports_below_ephemeral(3)
    http_base = free_ports_below_ephemeral(3, avoid=range(base, base + 3))
    # No --dir: the temporary directory `make dev` announces, made under TMPDIR.
    env = {**without_shardcron_env(), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shardcron",
            "dev",
            "--base-port",
            str(base),
            "--sink-port",
            str(free_port()),
            "--http-base-port",
            str(http_base),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    lines: list[str] = []
    seen = threading.Event()
    streamed = threading.Event()  # the demo's redis-stream job: make test starts the Redis it needs

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "heartbeat" in line and "succeeded" in line:
                seen.set()
            if "to-redis-stream" in line and "succeeded" in line:
                streamed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(180), "no tick streamed:\n" + "".join(lines[-60:])
        assert streamed.wait(60), "the redis-stream demo job did not succeed:\n" + "".join(lines[-60:])
        children = descendants(proc.pid)
        assert len(children) >= 4, "three nodes and an etcd run under `shardcron dev`"

        # What it prints to export is enough for the README's commands: the API, etcd and the store.
        told = exports("".join(lines))
        assert set(told) == {"SHARDCRON_SERVER", "SHARDCRON_ETCD", "SHARDCRON_DB"}, "".join(lines[-40:])
        as_told = {**without_shardcron_env(), **told}
        for command in (["shards"], ["nodes"], ["jobs", "list"], ["ticks", "heartbeat", "--limit", "1"]):
            out = subprocess.run(
                [sys.executable, "-m", "shardcron", *command], capture_output=True, text=True, timeout=60, env=as_told
            )
            assert out.returncode == 0 and "Traceback" not in out.stderr, (command, out.stdout, out.stderr)
        shards = subprocess.run(
            [sys.executable, "-m", "shardcron", "shards", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=as_told,
        )
        assert json.loads(shards.stdout)["shard_count"] == 16
        # Each node's dashboard, as announced, shows the cluster (the dev cluster checks no tokens).
        announced = re.findall(r"Dashboard of (node-\d): (http://\S+)", "".join(lines))
        assert [n for n, _ in announced] == ["node-1", "node-2", "node-3"]
        import httpx

        page = httpx.get(announced[2][1] + "cluster", follow_redirects=True, timeout=30)
        assert page.status_code == 200 and 'id="shard-grid"' in page.text and "node-1" in page.text
        logs_dir = re.search(r"logs in (\S+)", "".join(lines)).group(1)
        assert logs_dir.startswith(str(tmp_path)) and os.path.isdir(logs_dir)

        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0, "".join(lines[-40:])
        reader.join(10)
        left = [p for p in children if alive(p)]
        assert not left, f"processes left behind: {left}"
        text = "".join(lines)
        assert "submitted heartbeat" in text and "ping-sink" in text and "FAIR SHARE" in text
        assert "Traceback" not in text
        # Ctrl-C keeps the logs it announced (and says so); only etcd's data goes.
        assert f"logs and the store are kept in {logs_dir}" in text
        node_logs = [f for f in os.listdir(logs_dir) if f.endswith(".log")]
        assert len(node_logs) >= 3 and any("node-1" in f for f in node_logs), os.listdir(logs_dir)
        assert not os.path.exists(os.path.join(logs_dir, "etcd"))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_an_unreachable_etcd_names_the_flag_and_the_variable():
    port = free_port()
    for command in ("shards", "nodes"):
        out = subprocess.run(
            [sys.executable, "-m", "shardcron", command],
            capture_output=True,
            text=True,
            timeout=60,
            env={**without_shardcron_env(), "SHARDCRON_ETCD": f"127.0.0.1:{port}"},
        )
        assert out.returncode == 1 and "Traceback" not in out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert f"127.0.0.1:{port}" in line and "--etcd (or SHARDCRON_ETCD)" in line, line


# -- nothing left behind, whichever way dev ends -------------------------------------------------------


class RunningDev:
    """`shardcron dev` on free ports, its stdout and stderr into a pipe whose read end the test holds."""

    def __init__(self, tmp_path):
        self.base = free_ports_below_ephemeral(3)
        self.http_base = free_ports_below_ephemeral(3, avoid=range(self.base, self.base + 3))
        self.sink_port = free_port()
        read_end, write_end = os.pipe()
        env = {**without_shardcron_env(), "TMPDIR": str(tmp_path)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shardcron",
                "dev",
                "--base-port",
                str(self.base),
                "--sink-port",
                str(self.sink_port),
                "--http-base-port",
                str(self.http_base),
            ],
            stdout=write_end,
            stderr=write_end,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        os.close(write_end)
        self.read_end: int | None = read_end
        self.text = ""
        self.children: set[int] = set()

    def read_until(self, marker: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while marker not in self.text:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} from dev within {timeout_s} s:\n{self.text[-3000:]}"
            ready, _, _ = select.select([self.read_end], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.read_end, 65536)
                assert chunk, f"dev ended its output before {marker!r}:\n{self.text[-3000:]}"
                self.text += chunk.decode("utf-8", "replace")

    def ports(self) -> list[int]:
        etcd_port = int(re.search(r"etcd at (?:https?://)?127\.0\.0\.1:(\d+)", self.text).group(1))
        return [*range(self.base, self.base + 3), *range(self.http_base, self.http_base + 3), self.sink_port, etcd_port]

    def close_output(self) -> None:
        """What a `| tee` that dies with Ctrl-C does to dev: every later write to stdout or stderr fails."""
        os.close(self.read_end)
        self.read_end = None

    def kill_leftovers(self) -> None:
        for pid in [self.proc.pid, *self.children]:
            try:
                os.killpg(pid, signal.SIGKILL)  # each child leads a process group of its own
            except (ProcessLookupError, PermissionError):
                pass
        if self.read_end is not None:
            os.close(self.read_end)


def nothing_left(children: set[int], ports: list[int]) -> bool:
    return not [p for p in children if alive(p)] and not [p for p in ports if port_open("127.0.0.1", p)]


def assert_nothing_left(dev: RunningDev, ports: list[int], timeout_s: float = 90) -> None:
    if not eventually(lambda: nothing_left(dev.children, ports), timeout_s, 0.2):
        left = [p for p in dev.children if alive(p)]
        listening = [p for p in ports if port_open("127.0.0.1", p)]
        raise AssertionError(f"processes left behind: {left}; ports still listening: {listening}")


def test_dev_stops_every_child_when_its_output_pipe_is_gone(tmp_path):
    # `make dev 2>&1 | tee log`, then Ctrl-C: tee dies with the Ctrl-C, so dev's cleanup writes to a closed pipe.
    dev = RunningDev(tmp_path)
    try:
        dev.read_until("Streaming ticks", 180)
        dev.children = descendants(dev.proc.pid)
        assert len(dev.children) >= 4, "three nodes and an etcd run under `shardcron dev`"
        ports = dev.ports()
        dev.close_output()
        dev.proc.send_signal(signal.SIGINT)
        status = dev.proc.wait(120)
        assert_nothing_left(dev, ports)
        # 141 when a tick's line met the closed pipe first; 0 when the Ctrl-C ended the stream first.
        assert status in (0, 141)
    finally:
        dev.kill_leftovers()


def test_dev_killed_outright_takes_its_children_with_it(tmp_path):
    # SIGKILL runs no cleanup at all: the reaper dev starts first stops the children when dev's pipe to it ends.
    dev = RunningDev(tmp_path)
    try:
        dev.read_until("Streaming ticks", 180)
        dev.children = descendants(dev.proc.pid)
        assert len(dev.children) >= 4, "three nodes and an etcd run under `shardcron dev`"
        ports = dev.ports()
        dev.proc.kill()
        dev.proc.wait(30)
        assert_nothing_left(dev, ports)
    finally:
        dev.kill_leftovers()


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_dev_stops_every_child_on_hang_up_and_terminate(tmp_path, sig):
    # SIGHUP comes with a closed terminal window; its default action ended dev with no cleanup at all.
    dev = RunningDev(tmp_path)
    try:
        dev.read_until("Streaming ticks", 180)
        dev.children = descendants(dev.proc.pid)
        ports = dev.ports()
        dev.proc.send_signal(sig)
        dev.read_until("logs and the store are kept in", 120)
        assert dev.proc.wait(60) == 0
        assert_nothing_left(dev, ports)
    finally:
        dev.kill_leftovers()
