"""Real ``shardcron node`` processes for tests, ``shardcron dev`` and ``shardcron bench``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from shardcron.cli import shard_map
from shardcron.coordination.balancer import Owner, assign
from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.coordination.view import read_view
from shardcron.dev.testing.etcd_server import free_port

T = TypeVar("T")


class GaveUp(Exception):
    """Raised by a ``wait_until`` predicate that knows the condition can no longer come true."""


def wait_until(predicate: Callable[[], T | None], timeout_s: float, interval_s: float = 0.05, what: str = "") -> T:
    """Poll ``predicate`` until it returns something truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except GaveUp:
            raise
        except Exception as e:  # noqa: BLE001 - keep polling; report the last error on timeout
            last_error = e
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout_s}s waiting for {what or predicate}"
                + (f" (last error: {last_error})" if last_error else "")
            )
        time.sleep(interval_s)


def eventually(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.02) -> bool:
    """True as soon as ``predicate`` holds, False if it still does not after ``timeout_s``."""
    try:
        wait_until(predicate, timeout_s, interval_s)
        return True
    except TimeoutError:
        return False


@dataclass
class NodeProcess:
    node_id: str
    etcd: str
    db: str
    prefix: str
    shards: int
    ttl: int
    log_path: str
    port: int = field(default_factory=free_port)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    wrapper: list[str] = field(default_factory=list)  # e.g. ["ip", "netns", "exec", "ns1"]
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            *self.wrapper,
            sys.executable,
            "-m",
            "shardcron",
            "node",
            "--node-id",
            self.node_id,
            "--etcd",
            self.etcd,
            "--db",
            self.db,
            "--prefix",
            self.prefix,
            "--shards",
            str(self.shards),
            "--ttl",
            str(self.ttl),
            "--listen",
            f"{self.host}:{self.port}",
            *self.extra_args,
        ]

    def start(self) -> NodeProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait(10)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait; returns the exit code (SIGKILL after ``timeout_s``)."""
        if self.proc is None:
            return None
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""


@dataclass
class Cluster:
    """A group of node processes over one etcd and one store."""

    etcd: str
    db: str
    prefix: str
    shards: int
    ttl: int
    log_dir: str
    extra_args: list[str] = field(default_factory=list)
    nodes: dict[str, NodeProcess] = field(default_factory=dict)

    def add(
        self,
        node_id: str,
        *,
        start: bool = True,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        wrapper: list[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
    ) -> NodeProcess:
        n = NodeProcess(
            node_id,
            self.etcd,
            self.db,
            self.prefix,
            self.shards,
            self.ttl,
            os.path.join(self.log_dir, f"{node_id}.log"),
            extra_args=[*self.extra_args, *(extra_args or [])],
            env=dict(env or {}),
            wrapper=list(wrapper or []),
            host=host,
        )
        if port:
            n.port = port
        self.nodes[node_id] = n
        return n.start() if start else n

    def shard_map(self) -> dict:
        return shard_map(self.etcd, self.prefix)

    def leaders(self) -> dict[int, str | None]:
        return {r["shard"]: r["leader"] for r in self.shard_map()["shards"]}

    def wait_all_led(self, timeout_s: float, by: set[str] | None = None) -> dict[int, str]:
        def ok():
            m = self.leaders()
            if len(m) != self.shards or any(v is None for v in m.values()):
                return None
            if by is not None and set(m.values()) - by:
                return None
            return m

        return wait_until(ok, timeout_s, 0.1, "every shard to have a leader")

    def wait_balanced(self, members: set[str], timeout_s: float) -> dict[int, str]:
        lo = self.shards // len(members)
        hi = -(-self.shards // len(members))

        def ok():
            for n in members & set(self.nodes):
                if not self.nodes[n].alive():
                    tail = self.nodes[n].log_text().strip().splitlines()[-3:]
                    raise GaveUp(f"node {n} exited: " + " | ".join(tail))
            m = self.leaders()
            if any(v is None or v not in members for v in m.values()) or len(m) != self.shards:
                return None
            counts = {n: list(m.values()).count(n) for n in members}
            return m if all(lo <= c <= hi for c in counts.values()) else None

        return wait_until(ok, timeout_s, 0.1, f"shards balanced over {sorted(members)}")

    def wait_settled(self, members: set[str], timeout_s: float) -> dict[int, str]:
        """Wait until every shard is led by the node the balancer places it on: nothing is left to move."""
        etcd = Etcd(self.etcd, timeout_s=5.0)

        def ok():
            for n in members & set(self.nodes):
                if not self.nodes[n].alive():
                    tail = self.nodes[n].log_text().strip().splitlines()[-3:]
                    raise GaveUp(f"node {n} exited: " + " | ".join(tail))
            view = read_view(etcd, KeyLayout(self.prefix))
            if set(view.active_members()) != members or view.shard_count != self.shards:
                return None
            heads = {s: h for s in range(self.shards) if (h := view.leader(s)) is not None and h.leader_since_ms}
            if len(heads) != self.shards:
                return None
            plan = assign(self.shards, members, {s: Owner(h.node_id, h.create_revision) for s, h in heads.items()})
            leaders = {s: h.node_id for s, h in heads.items()}
            return leaders if all(plan[s].primary == n for s, n in leaders.items()) else None

        try:
            return wait_until(ok, timeout_s, 0.1, f"every shard on its placed node, over {sorted(members)}")
        finally:
            etcd.close()

    def stop_all(self) -> None:
        for n in self.nodes.values():
            n.signal(signal.SIGCONT)
            n.signal(signal.SIGTERM)
        for n in self.nodes.values():
            n.terminate(20)
