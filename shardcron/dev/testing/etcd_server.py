"""Start real etcd servers on free loopback ports: one member or a cluster.

Used by the test suite, ``shardcron dev`` and ``shardcron bench``; it needs
the ``etcd`` binary on PATH (``make dev``/``make test`` install it).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from shardcron.coordination.etcd import Etcd
from shardcron.errors import ConfigError

LOWEST_PORT = 10_000
_ports = random.SystemRandom()  # not the test's seeded global random: two runs must not pick alike


def ephemeral_ports_start() -> int:
    """The first port the kernel hands to outgoing connections (``ip_local_port_range``)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing on ``host`` is bound to, below the kernel's ephemeral range.

    A port the kernel picks (bind to 0) comes from the range it also hands to outgoing connections, so a
    connection opened between this check and the server's own bind could take it ("address already in
    use", seen starting etcd in the fault suite). A random port below that range cannot be taken that way.
    """
    below = ephemeral_ports_start()
    for _ in range(1000):
        port = _ports.randrange(LOWEST_PORT, below)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host} between {LOWEST_PORT} and {below}")


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: str
    log_path: str
    proc: subprocess.Popen | None = None
    extra_args: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"


class EtcdCluster:
    """``size`` etcd members on loopback with a temporary data directory each."""

    def __init__(
        self,
        size: int = 1,
        *,
        base_dir: str | None = None,
        host: str = "127.0.0.1",
        extra_args: list[str] | None = None,
        scheme: str = "http",
        client_security=None,
    ):
        if shutil.which("etcd") is None:
            raise ConfigError("etcd is not on PATH: run `make setup` (Debian: apt-get install etcd-server)")
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="shardcron-etcd-")
        os.makedirs(self.base_dir, exist_ok=True)
        self.scheme = scheme
        self.client_security = client_security  # how wait_ready talks to a TLS etcd
        self.members = [
            EtcdMember(
                f"m{i}",
                free_port(host),
                free_port(host),
                os.path.join(self.base_dir, f"m{i}"),
                os.path.join(self.base_dir, f"m{i}.log"),
                extra_args=list(extra_args or []),
                host=host,
            )
            for i in range(size)
        ]
        self.token = f"shardcron-{os.getpid()}-{time.monotonic_ns()}"

    @property
    def endpoints(self) -> str:
        prefix = "https://" if self.scheme == "https" else ""
        return ",".join(prefix + m.endpoint for m in self.members)

    def _initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    def start_member(self, m: EtcdMember, *, state: str = "new") -> subprocess.Popen[bytes]:
        """Start member ``m``'s etcd process (``m.proc``, returned too)."""
        url = f"{self.scheme}://{m.host}:{m.client_port}"
        cmd = [
            "etcd",
            "--name",
            m.name,
            "--data-dir",
            m.data_dir,
            "--listen-client-urls",
            url,
            "--advertise-client-urls",
            url,
            "--listen-peer-urls",
            m.peer_url,
            "--initial-advertise-peer-urls",
            m.peer_url,
            "--initial-cluster",
            self._initial_cluster(),
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            self.token,
            # Fast elections on loopback keep failover tests short.
            "--heartbeat-interval",
            "100",
            "--election-timeout",
            "1000",
            *m.extra_args,
        ]
        log = open(m.log_path, "ab")
        m.proc = proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return proc

    def start(self, timeout_s: float = 30.0) -> EtcdCluster:
        for m in self.members:
            self.start_member(m)
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 30.0, members: list[EtcdMember] | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        for m in members or self.members:
            while not port_open(m.host, m.client_port):
                if m.proc and m.proc.poll() is not None:
                    raise RuntimeError(f"etcd {m.name} exited: {open(m.log_path).read()[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd {m.name} did not listen on {m.endpoint} in {timeout_s}s")
                time.sleep(0.05)
        # A quorum must answer a linearizable read before we hand the cluster out.
        client = Etcd(self.endpoints, timeout_s=2.0, security=self.client_security)
        try:
            while True:
                try:
                    client.status()
                    return
                except Exception:  # noqa: BLE001 - not ready yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        finally:
            client.close()

    def kill(self, m: EtcdMember, sig: int = signal.SIGKILL) -> None:
        if m.proc and m.proc.poll() is None:
            m.proc.send_signal(sig)
            m.proc.wait(10)

    def restart(self, m: EtcdMember) -> None:
        self.kill(m)
        self.start_member(m, state="existing")

    def stop(self) -> None:
        for m in self.members:
            if m.proc and m.proc.poll() is None:
                m.proc.terminate()
        for m in self.members:
            if m.proc:
                try:
                    m.proc.wait(5)
                except subprocess.TimeoutExpired:
                    m.proc.kill()
                    m.proc.wait(5)
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
