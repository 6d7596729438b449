"""Network namespaces for fault tests: each node behind its own veth, cut with iptables.

Layout of one ``NetLab`` (needs root, ``ip`` and ``iptables``)::

    root namespace                         namespace sc-<pid>-<n>-<node>
    bridge scb<pid>  10.200.K.1/24  <--veth-->  eth0  10.200.K.(10+i)/24
      etcd members, the HTTP sink and          one ``shardcron node`` process,
      a TCP forwarder to PostgreSQL            listening on its own address
      (127.0.0.1:5432) listen here

The subnet exists only on this machine's bridge and veths and no namespace has
a default route, so no test packet can leave the machine. Each namespace has
its own iptables; a chain ``SCFAULT`` is jumped to from its INPUT and OUTPUT,
so cutting a node is ``-A SCFAULT ... -j DROP`` inside its namespace (nothing
else sees the rule) and restoring it is ``-F SCFAULT``.

Names carry the pid of the process that made them, so a later run can tell a
crashed run's leftovers (owner gone: removed by ``cleanup_stale``) from a
concurrent run's (owner alive: left alone).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from shardcron.dev.testing.cluster import eventually

NS_PREFIX = "sc-"  # namespaces: sc-<owner pid>-<seq>-<label>
BRIDGE_PREFIX = "scb"  # bridges: scb<owner pid>
VETH_PREFIX = "scv"  # root-side veth ends: scv<owner pid>x<seq>
FAULT_CHAIN = "SCFAULT"
SUBNET_BASE = "10.200"  # 10.200.K.0/24, K picked free per lab
_IFNAME_MAX = 15  # Linux IFNAMSIZ - 1


class NetError(RuntimeError):
    """An ``ip``/``iptables`` command failed; the message has the command and its stderr."""


def missing_tools() -> str | None:
    """Why this machine cannot run namespace faults, or None if it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and iptables)"
    missing = [t for t in ("ip", "iptables") if shutil.which(t) is None]
    if missing:
        return f"{' and '.join(missing)} not on PATH (Debian: apt-get install iproute2 iptables)"
    return None


def sh(*cmd: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess:
    out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and out.returncode != 0:
        raise NetError(f"`{' '.join(cmd)}` exited {out.returncode}: {(out.stderr or out.stdout).strip()}")
    return out


def _owner_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return b"python" in cmdline or b"pytest" in cmdline


def _namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _links() -> list[str]:
    out = sh("ip", "-o", "link", "show", check=False)
    names = []
    for line in out.stdout.splitlines():
        m = re.match(r"\d+:\s+([^:@\s]+)", line)
        if m:
            names.append(m.group(1))
    return names


def kill_namespace_processes(ns: str) -> list[int]:
    """SIGKILL every process inside ``ns`` (ours: only the harness starts processes there)."""
    out = sh("ip", "netns", "pids", ns, check=False)
    pids = [int(p) for p in out.stdout.split() if p.isdigit()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def cleanup_stale(log=print) -> list[str]:
    """Remove namespaces, bridges and veths left by harness runs whose process is gone."""
    removed = []
    for ns in _namespaces():
        m = re.fullmatch(rf"{NS_PREFIX}(\d+)-.*", ns)
        if m and not _owner_alive(int(m.group(1))):
            kill_namespace_processes(ns)
            sh("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    for link in _links():
        m = re.fullmatch(rf"(?:{BRIDGE_PREFIX}|{VETH_PREFIX})(\d+)(?:x\d+)?", link)
        if m and not _owner_alive(int(m.group(1))):
            sh("ip", "link", "del", link, check=False)
            removed.append(link)
    if removed:
        log(f"netns: removed leftovers of a previous run: {', '.join(removed)}")
    return removed


@dataclass
class NodeNet:
    """One node's namespace: run its process under ``wrapper``, reach it at ``addr``."""

    label: str
    ns: str
    addr: str
    host_if: str
    cuts: list[str] = field(default_factory=list)  # descriptions of the rules in force

    @property
    def wrapper(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]


class NetLab:
    """A bridge in the root namespace and one namespace per node behind it."""

    def __init__(self, owner_pid: int | None = None):
        self.pid = owner_pid or os.getpid()
        self.bridge = f"{BRIDGE_PREFIX}{self.pid}"
        assert len(self.bridge) <= _IFNAME_MAX
        self.subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""  # the bridge's address: what the nodes reach etcd, the store and the sink at
        self.nodes: dict[str, NodeNet] = {}
        self._seq = 0
        self._next_host = 0
        self._lock = threading.Lock()

    # -- lab lifecycle -------------------------------------------------------------

    def start(self) -> NetLab:
        self.subnet = self._free_subnet()
        self.gateway = str(self.subnet.network_address + 1)
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        try:
            # A fixed MAC: a bridge without one takes its lowest port's MAC and changes it as veths
            # come and go, leaving the namespaces' ARP entries for the gateway pointing nowhere.
            p = self.pid
            mac = f"02:5c:{(p >> 24) & 0xFF:02x}:{(p >> 16) & 0xFF:02x}:{(p >> 8) & 0xFF:02x}:{p & 0xFF:02x}"
            sh("ip", "link", "set", self.bridge, "address", mac)
            sh("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
        except NetError:
            sh("ip", "link", "del", self.bridge, check=False)
            raise
        return self

    def close(self) -> None:
        for label in list(self.nodes):
            self.remove(label)
        sh("ip", "link", "del", self.bridge, check=False)

    def _free_subnet(self) -> ipaddress.IPv4Network:
        used = sh("ip", "-4", "-o", "addr", "show").stdout
        start = self.pid % 200 + 1
        for i in range(254):
            k = (start + i - 1) % 254 + 1
            net = ipaddress.IPv4Network(f"{SUBNET_BASE}.{k}.0/24")
            if f" {SUBNET_BASE}.{k}." not in used:
                return net
        raise NetError(f"no free /24 left in {SUBNET_BASE}.0.0/16")

    # -- namespaces ------------------------------------------------------------------

    def add(self, label: str) -> NodeNet:
        """A namespace for ``label`` (reused if it exists: a restarted node keeps its address)."""
        with self._lock:
            if label in self.nodes:
                return self.nodes[label]
            self._seq += 1
            seq = self._seq
            # A fresh address for every new namespace (round robin over .10-.249): the root namespace's
            # ARP entry for a reused address would still name the deleted veth's MAC, and Linux ignores
            # a new MAC for an entry updated within the last second (neigh locktime), so the new
            # namespace could not be answered for seconds.
            used = {n.addr for n in self.nodes.values()}
            hosts = [10 + (self._next_host + i) % 240 for i in range(240)]
            host_no = next(h for h in hosts if str(self.subnet.network_address + h) not in used)
            self._next_host = host_no - 10 + 1
        addr = str(self.subnet.network_address + host_no)
        ns = f"{NS_PREFIX}{self.pid}-{seq}-{re.sub(r'[^A-Za-z0-9_.-]', '_', label)}"[:200]
        host_if = f"{VETH_PREFIX}{self.pid}x{seq}"
        assert len(host_if) <= _IFNAME_MAX, host_if
        node = NodeNet(label, ns, addr, host_if)
        sh("ip", "netns", "add", ns)
        try:
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", host_if, "master", self.bridge)
            sh("ip", "link", "set", host_if, "up")
            inside = ["ip", "netns", "exec", ns]
            sh(*inside, "ip", "link", "set", "lo", "up")
            sh(*inside, "ip", "addr", "add", f"{addr}/{self.subnet.prefixlen}", "dev", "eth0")
            sh(*inside, "ip", "link", "set", "eth0", "up")
            ipt = [*inside, "iptables", "-w", "5"]
            sh(*ipt, "-N", FAULT_CHAIN)
            sh(*ipt, "-I", "INPUT", "-j", FAULT_CHAIN)
            sh(*ipt, "-I", "OUTPUT", "-j", FAULT_CHAIN)
        except Exception:
            self._delete(node)
            raise
        with self._lock:
            self.nodes[label] = node
        self.wait_reachable(node)
        return node

    def wait_reachable(self, node: NodeNet, timeout_s: float = 5.0) -> None:
        """Until the bridge forwards for ``node`` (a fresh bridge port starts forwarding at once
        with STP off, but the link may take a moment to come up)."""
        code = (
            "import socket,sys\n"
            "s=socket.socket(); s.settimeout(0.5)\n"
            f"r=s.connect_ex(({self.gateway!r}, 9)); sys.exit(0 if r in (0, 111) else 1)\n"
        )
        last = None

        def reachable() -> bool:
            nonlocal last
            last = sh(*node.wrapper, sys.executable, "-c", code, check=False)
            return last.returncode == 0

        if not eventually(reachable, timeout_s, 0.1):
            raise NetError(f"{node.ns} cannot reach {self.gateway}: {last.stderr.strip() if last else ''}")

    def remove(self, label: str) -> None:
        with self._lock:
            node = self.nodes.pop(label, None)
        if node:
            self._delete(node)

    def _delete(self, node: NodeNet) -> None:
        kill_namespace_processes(node.ns)
        sh("ip", "link", "del", node.host_if, check=False)
        sh("ip", "netns", "del", node.ns, check=False)
        sh("ip", "neigh", "flush", "to", node.addr, "dev", self.bridge, check=False)

    # -- faults ------------------------------------------------------------------------

    def cut(self, label: str, host: str, ports: list[int], *, what: str = "") -> None:
        """Drop every TCP packet between ``label``'s namespace and ``host``:``ports``, both ways.

        Established connections hang (no RST, no FIN), like a partition; new ones time out.
        """
        node = self.nodes[label]
        ipt = [*node.wrapper, "iptables", "-w", "5"]
        plist = ",".join(str(p) for p in ports)
        sh(*ipt, "-A", FAULT_CHAIN, "-p", "tcp", "-d", host, "-m", "multiport", "--dports", plist, "-j", "DROP")
        sh(*ipt, "-A", FAULT_CHAIN, "-p", "tcp", "-s", host, "-m", "multiport", "--sports", plist, "-j", "DROP")
        node.cuts.append(what or f"{host}:{plist}")

    def restore(self, label: str) -> None:
        """Remove every cut of ``label``."""
        node = self.nodes[label]
        sh(*node.wrapper, "iptables", "-w", "5", "-F", FAULT_CHAIN)
        node.cuts.clear()

    def rules(self, label: str) -> str:
        return sh(*self.nodes[label].wrapper, "iptables", "-w", "5", "-S", FAULT_CHAIN).stdout


class TcpForwarder:
    """Listen on ``listen_host`` and pipe each connection to ``upstream``: how nodes in their
    namespaces reach a server that listens on 127.0.0.1 only (PostgreSQL here).

    A connection whose upstream refuses is closed at once, so a stopped server
    looks stopped to the client (its connect fails) rather than hung.
    """

    def __init__(self, listen_host: str, upstream: tuple[str, int], *, connect_timeout_s: float = 3.0):
        self.listen_host = listen_host
        self.upstream = upstream
        self.connect_timeout_s = connect_timeout_s
        self.port = 0
        self._sock: socket.socket | None = None
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> TcpForwarder:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.listen_host, 0))
        s.listen(128)
        s.settimeout(0.2)
        self._sock = s
        self.port = s.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-forwarder", daemon=True)
        self._thread.start()
        return self

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    def stop(self) -> None:
        self._stopping.set()
        if self._thread:
            self._thread.join(5)
        if self._sock:
            self._sock.close()
        self.reset_all()

    def reset_all(self) -> None:
        """End every forwarded connection, both ways, as a server's connections being killed would.

        Shut down, not just closed: closing a socket does not wake a pump blocked in ``recv`` on it, and
        the kernel keeps such a socket open, so a client waiting for an answer would never see the
        connection end (it would wait forever, its keepalives answered). ``shutdown`` wakes the pumps,
        which then close both sides.
        """
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), name="tcp-forwarder-conn", daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        client.settimeout(None)
        try:
            upstream = socket.create_connection(self.upstream, timeout=self.connect_timeout_s)
            upstream.settimeout(None)
        except OSError:
            with contextlib.suppress(OSError):
                client.close()
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._conns.update((client, upstream))
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # One side ended: end both, as a server process dying would.
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)


__all__ = [
    "NetError",
    "NetLab",
    "NodeNet",
    "TcpForwarder",
    "cleanup_stale",
    "kill_namespace_processes",
    "missing_tools",
]
