"""The soak's nemesis: a seeded plan of overlapping faults (pure), and the ``Nemesis`` that applies and heals
them on a ``harness.FaultCluster``, recording each as a ``history.Fault`` with its real start and end.

The plan (``plan_faults``) holds, for any seed:

* at most 2 faults busy at once (a fault is busy from its start to its end plus ``AFTERMATH_S`` of its kind:
  a restarted node booting, a restarted etcd member rejoining, PostgreSQL coming back);
* never two faults busy on one target at once (a node id, an etcd member name, ``etcd``, ``postgresql``), so
  at most one etcd member is down (quorum kept) and a node is never killed while it is stopped;
* a db-restart never busy together with another database fault (``DB_KINDS``);
* every fault, aftermath included, over by ``seconds``.

Kinds: see ``KINDS``; their durations are ``_duration``'s. The first faults of a plan are one of each kind
in a shuffled order (so short runs cover many kinds), then kinds are drawn by ``WEIGHTS``.

``Nemesis.run(plan, t0)`` follows the plan in a thread, sleeping on an event until each start or end;
``stop()`` ends the thread (faults in force stay); ``heal_all()`` heals what is in force and makes the cluster
whole again (every node running and not stopped, no cuts, 3 healthy etcd members, PostgreSQL answering, no
drains), raising ``NemesisError`` naming what it could not mend.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from shardcron.coordination.etcd import Etcd
from shardcron.coordination.keys import KeyLayout
from shardcron.dev.testing.cluster import GaveUp, NodeProcess, wait_until
from shardcron.dev.testing.etcd_server import port_open
from tests.faults import harness
from tests.faults.soak.history import Fault, History

KINDS = (
    "kill",
    "stop",
    "term",
    "cut-etcd",
    "cut-store",
    "etcd-member",
    "etcd-move-leader",
    "etcd-compact",
    "db-restart",
    "db-conn-kill",
    "clock",
    "drain",
)
NODE_KINDS = frozenset({"kill", "stop", "term", "cut-etcd", "cut-store", "clock", "drain"})
DB_KINDS = frozenset({"db-restart", "db-conn-kill", "cut-store"})
INSTANT_KINDS = frozenset({"etcd-move-leader", "etcd-compact", "db-restart", "db-conn-kill"})
# How often each kind is drawn once the opening round (one of each) is done: process faults and cuts most.
WEIGHTS = {
    "kill": 3.0,
    "stop": 3.0,
    "cut-etcd": 3.0,
    "cut-store": 3.0,
    "term": 2.0,
    "etcd-member": 1.5,
    "clock": 1.0,
    "drain": 1.0,
    "etcd-move-leader": 1.0,
    "etcd-compact": 1.0,
    "db-conn-kill": 1.0,
    "db-restart": 0.7,
}
# How long a fault's effect outlasts its heal (s): a node restarted by the heal boots, an etcd member
# rejoins, a new raft leader settles, PostgreSQL restarts (a db-restart's whole effect falls in here).
AFTERMATH_S = {
    "kill": 3.0,
    "term": 3.0,
    "clock": 3.0,
    "etcd-member": 3.0,
    "db-restart": 6.0,
    "stop": 1.0,
    "cut-etcd": 1.0,
    "cut-store": 1.0,
    "drain": 1.0,
    "etcd-move-leader": 2.0,
    "etcd-compact": 1.0,
    "db-conn-kill": 1.0,
}
MAX_BUSY = 2
FIRST_AT_S = (1.0, 3.0)  # the first fault starts this far into the run
GAP_S = (3.0, 10.0)  # between one fault's start and the next's
RETRY_S = 1.0  # a fault that does not fit now is tried this much later
CLOCK_OFFSET_MS = (300, 1500)  # magnitude; the sign is drawn too
CLOCK_ENV = "SHARDCRON_TEST_CLOCK_OFFSET_MS"
CLOCK_SLACK_MS = 500
POSTGRESQL, ETCD = "postgresql", "etcd"


@dataclass(frozen=True)
class PlannedFault:
    kind: str  # one of KINDS
    target: str  # a node id (NODE_KINDS), an etcd member name (etcd-member), "etcd" or "postgresql"
    at_s: float  # start, from the run's t0
    duration_s: float  # 0 for INSTANT_KINDS
    offset_ms: int = 0  # clock: the offset the node runs with meanwhile

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s

    @property
    def busy_until_s(self) -> float:
        """Its end plus the aftermath: what the plan's constraints are kept over."""
        return self.end_s + AFTERMATH_S[self.kind]


# -- the plan (pure) ---------------------------------------------------------------------------------------


def plan_faults(
    seed: int | str, seconds: float, nodes: list[str], members: list[str], *, ttl_s: int
) -> list[PlannedFault]:
    """A seeded, staggered, possibly overlapping fault plan over [0, ``seconds``], sorted by start."""
    rng = random.Random(f"nemesis:{seed}")
    opening = list(KINDS)
    rng.shuffle(opening)
    plan: list[PlannedFault] = []
    t = rng.uniform(*FIRST_AT_S)
    while t < seconds:
        kind = opening.pop(0) if opening else _draw_kind(rng)
        duration = _duration(kind, rng, ttl_s)
        offset = rng.choice((-1, 1)) * rng.randint(*CLOCK_OFFSET_MS) if kind == "clock" else 0
        targets = _targets(kind, nodes, members)
        rng.shuffle(targets)
        placed = next(
            (
                f
                for f in (PlannedFault(kind, x, round(t, 1), duration, offset) for x in targets)
                if fits(f, plan, seconds)
            ),
            None,
        )
        if placed is None:
            if kind in KINDS and not any(p.kind == kind for p in plan) and kind not in opening:
                opening.append(kind)  # still owed to the opening round: tried again after the others
            t += RETRY_S
            continue
        plan.append(placed)
        t += rng.uniform(*GAP_S)
    return sorted(plan, key=lambda f: (f.at_s, f.kind, f.target))


def fits(f: PlannedFault, plan: list[PlannedFault], seconds: float) -> bool:
    """Whether ``f`` can join ``plan`` keeping every constraint of the module docstring."""
    if f.busy_until_s > seconds:
        return False
    during = [p for p in plan if p.at_s <= f.busy_until_s and f.at_s <= p.busy_until_s]
    if any(p.target == f.target or p.kind == f.kind == "etcd-member" for p in during):
        return False  # one fault per target; one etcd member down at most (the quorum kept)
    if (
        "db-restart" in {f.kind, *(p.kind for p in during)}
        and sum(k in DB_KINDS for k in [f.kind, *(p.kind for p in during)]) > 1
    ):
        return False
    return max_busy([*during, f]) <= MAX_BUSY


def max_busy(faults: list[PlannedFault]) -> int:
    """The most of ``faults`` busy at one instant (closed intervals)."""
    edges = sorted([(f.at_s, 0) for f in faults] + [(f.busy_until_s, 1) for f in faults])
    most = now = 0
    for _, is_end in edges:  # a start sorts before an end at the same instant: touching counts as overlap
        now += -1 if is_end else 1
        most = max(most, now)
    return most


def clock_tolerance_ms(plan: list[PlannedFault]) -> int:
    """How far a node's clock may be off the test's in this plan, plus slack for the machine itself."""
    return max((abs(f.offset_ms) for f in plan), default=0) + CLOCK_SLACK_MS


def node_skew_ms(plan: list[PlannedFault]) -> int:
    """How far apart two nodes' clocks may be in this plan, plus slack: what comparing two stamps written by
    different nodes (a row's start against another node's fence raise) must allow. Two clock faults on two
    nodes that are busy at once can move the two clocks opposite ways, so their offsets add up."""
    clocks = [f for f in plan if f.kind == "clock"]
    most = max((abs(f.offset_ms) for f in clocks), default=0)
    for a, b in itertools.combinations(clocks, 2):
        if a.target != b.target and a.at_s <= b.busy_until_s and b.at_s <= a.busy_until_s:
            most = max(most, abs(a.offset_ms) + abs(b.offset_ms))
    return most + CLOCK_SLACK_MS


def _draw_kind(rng: random.Random) -> str:
    return rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]


def _duration(kind: str, rng: random.Random, ttl_s: int) -> float:
    lo, hi = {
        "stop": (ttl_s + 1, 2 * ttl_s + 2),
        "kill": (1, 8),
        "term": (1, 8),
        "cut-etcd": (2, 3 * ttl_s),
        "cut-store": (2, 3 * ttl_s),
        "etcd-member": (2, 10),
        "clock": (10, 30),
        "drain": (5, 20),
    }.get(kind, (0, 0))
    return round(rng.uniform(lo, hi), 1)


def _targets(kind: str, nodes: list[str], members: list[str]) -> list[str]:
    if kind in NODE_KINDS:
        return sorted(nodes)
    if kind == "etcd-member":
        return sorted(members)
    return [POSTGRESQL] if kind.startswith("db-") else [ETCD]


# -- the nemesis ------------------------------------------------------------------------------------------


class NemesisError(RuntimeError):
    """The cluster could not be made whole again; the message names what is still broken."""


class NotApplied(Exception):
    """A fault's precondition does not hold (its target is not in the state the fault needs)."""


class Nemesis:
    """Applies and heals ``PlannedFault``s on ``fc``, recording them in ``history.faults``."""

    def __init__(self, fc: harness.FaultCluster, history: History, *, log: Callable[[str], object] = print):
        self.fc = fc
        self.history = history
        self.log = log
        self.surprises: list[str] = []  # damage no fault of ours explains (a node that died by itself, ...)
        self._active: dict[PlannedFault, int] = {}  # fault in force -> its index in history.faults
        self._lock = threading.RLock()  # one action on the cluster at a time (the thread, heal_all)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._db = create_engine(
            fc.db_url, poolclass=NullPool, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
        )
        self._actions: dict[str, tuple[Callable[[PlannedFault], str], Callable[[PlannedFault], str]]] = {
            "kill": (self._kill, self._restart),
            "stop": (self._pause, self._resume),
            "term": (self._term, self._restart_after_exit),
            "cut-etcd": (self._cut_etcd, self._restore),
            "cut-store": (self._cut_store, self._restore),
            "clock": (self._skew, self._unskew),
            "drain": (self._drain, self._undrain),
            "etcd-member": (self._kill_member, self._start_member),
            "etcd-move-leader": (self._move_leader, self._nothing),
            "etcd-compact": (self._compact, self._nothing),
            "db-restart": (self._restart_db, self._db_answers),
            "db-conn-kill": (self._kill_db_conns, self._nothing),
        }

    @property
    def active(self) -> list[PlannedFault]:
        with self._lock:
            return list(self._active)

    # -- following a plan ----------------------------------------------------------------------------

    def run(self, plan: list[PlannedFault], t0: float) -> None:
        """Follow ``plan`` (times from wall time ``t0``) in a background thread; returns at once."""
        if self._thread is not None:
            raise RuntimeError("this Nemesis already ran a plan: make a new one")
        self._thread = threading.Thread(target=self._follow, args=(plan, t0), name="nemesis", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 180.0) -> None:
        """End the thread after its current action; faults in force stay (``heal_all`` ends them)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.log(f"nemesis: the plan's thread still runs an action after {timeout_s:.0f} s")

    def _follow(self, plan: list[PlannedFault], t0: float) -> None:
        for at_s, step, f in timeline(plan):
            if self._stopping.wait(max(0.0, t0 + at_s - time.time())):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                try:
                    if step == "heal":
                        if f in self._active:
                            self.heal(f)
                    elif self.apply(f) and step == "pulse":
                        self.heal(f)
                except Exception as e:  # noqa: BLE001 - one failed action must not end the plan
                    self.log(f"nemesis: {step} {f.kind} {f.target} failed: {e}")

    # -- one fault -----------------------------------------------------------------------------------

    def apply(self, f: PlannedFault) -> bool:
        """Apply ``f`` now and record it (in force: no end yet). False, and recorded "not applied: ...",
        if it could not be."""
        with self._lock:
            start = harness.now_ms()
            try:
                detail = self._actions[f.kind][0](f)
            except Exception as e:  # noqa: BLE001 - NotApplied, or the fault's own command failed
                why = f"not applied: {e}"
                self.log(f"nemesis: {f.kind} {f.target}: {why}")
                self.history.faults.append(Fault(f.kind, f.target, start, harness.now_ms(), why))
                return False
            self.log(f"nemesis: {f.kind} {f.target}: {detail}")
            self._active[f] = len(self.history.faults)
            self.history.faults.append(Fault(f.kind, f.target, start, None, detail))
            return True

    def heal(self, f: PlannedFault) -> bool:
        """End ``f`` (in force) now and record its end; False (still in force) if the heal failed."""
        with self._lock:
            try:
                detail = self._actions[f.kind][1](f)
            except Exception as e:  # noqa: BLE001 - left in force; heal_all tries again and mends
                self.log(f"nemesis: healing {f.kind} {f.target} failed: {e}")
                return False
            self._close(f, detail)
            return True

    def _close(self, f: PlannedFault, detail: str) -> None:
        i = self._active.pop(f)
        old = self.history.faults[i]
        self.history.faults[i] = dataclasses.replace(
            old, end_ms=harness.now_ms(), detail="; ".join(x for x in (old.detail, detail) if x)
        )
        self.log(f"nemesis: {f.kind} {f.target} healed" + (f": {detail}" if detail else ""))

    # -- the end of a run -----------------------------------------------------------------------------

    def heal_all(self, timeout_s: float = 120.0) -> None:
        """Heal every fault in force, then make the cluster whole; idempotent. ``NemesisError`` if it stays
        broken (every fault is recorded with an end either way)."""
        self.stop()
        with self._lock:
            for f in list(self._active):
                self.heal(f)
            broken = self._mend(timeout_s)
            for f in list(self._active):
                self._close(f, "ended by heal_all's repair of the cluster")
        if broken:
            raise NemesisError("the cluster is not whole after healing every fault: " + "; ".join(broken))

    def _mend(self, timeout_s: float) -> list[str]:
        """Whatever is still broken, mended; returns what could not be."""
        broken = []
        for what, step in (
            ("etcd", self._mend_etcd),
            ("PostgreSQL", self._mend_db),
            ("namespaces", self._mend_namespaces),
            ("nodes", self._mend_nodes),
            ("drains", self._mend_drains),
        ):
            try:
                step(timeout_s)
            except Exception as e:  # noqa: BLE001 - every step is tried; each failure is named
                broken.append(f"{what}: {e}")
        return broken

    def _mend_etcd(self, timeout_s: float) -> None:
        for m in self.fc.etcd.members:
            if m.proc is None or m.proc.poll() is not None:
                self._surprise(f"etcd member {m.name} was not running (no fault of ours in force): started")
                self.fc.etcd.start_member(m, state="existing")
        wait_until(
            lambda: self.fc.etcd_healthy() and self.fc.etcd_members_started() == len(self.fc.etcd.members),
            timeout_s,
            0.5,
            f"{len(self.fc.etcd.members)} healthy etcd members",
        )

    def _mend_db(self, timeout_s: float) -> None:
        try:
            self._db_answers(None, 5)
        except TimeoutError:
            harness.pg_ctl("start")
            self._db_answers(None, timeout_s)

    def _mend_namespaces(self, _timeout_s: float) -> None:
        for n in self.fc.nodes:
            self.fc.restore(n)
            if "DROP" in self.fc.lab.rules(n):
                raise NemesisError(f"{n}'s namespace still has a DROP rule after a flush")

    def _mend_nodes(self, timeout_s: float) -> None:
        for n, p in self.fc.nodes.items():
            if p.alive():
                p.resume()  # SIGCONT: harmless to a running node
                if CLOCK_ENV in p.env:
                    self._surprise(f"{n} still ran with a clock offset: restarted without")
                    p.terminate(30)
                    self._start(p)
            else:
                self._surprise(
                    f"{n} was not running (exit code {p.proc.returncode if p.proc else None}) "
                    "with no fault of ours on it: restarted"
                )
                self._start(p)
        for n, p in self.fc.nodes.items():
            wait_until(lambda p=p: _serving(p), timeout_s, 0.2, f"{n} to run and listen on {p.address}")

    def _mend_drains(self, _timeout_s: float) -> None:
        for n in self._drained():
            self._surprise(f"{n} was still draining: undone")
            self._shardcron("drain", n, "--undo")
        left = self._drained()
        if left:
            raise NemesisError(f"nodes still draining after `drain --undo`: {left}")

    def _surprise(self, what: str) -> None:
        self.surprises.append(what)
        self.log(f"nemesis: {what}")

    # -- node faults --------------------------------------------------------------------------------------

    def _running(self, f: PlannedFault) -> NodeProcess:
        p = self.fc.nodes.get(f.target)
        if p is None:
            raise NotApplied(f"no node {f.target!r} in the cluster ({sorted(self.fc.nodes)})")
        if not p.alive():
            raise NotApplied(f"{f.target} is not running (exit code {p.proc.returncode if p.proc else None})")
        if _stopped(p.pid):
            raise NotApplied(f"{f.target} (pid {p.pid}) is stopped (SIGSTOP)")
        return p

    def _start(self, p: NodeProcess, offset_ms: int = 0) -> str:
        """Start ``p`` again: same id, address and port, with a clock offset or none."""
        if offset_ms:
            p.env[CLOCK_ENV] = str(offset_ms)
        else:
            p.env.pop(CLOCK_ENV, None)
        p.start()
        return f"restarted (pid {p.pid})"

    def _kill(self, f: PlannedFault) -> str:
        p = self._running(f)
        pid = p.pid
        p.kill()
        return f"SIGKILL pid {pid}"

    def _restart(self, f: PlannedFault) -> str:
        p = self.fc.nodes[f.target]
        if p.alive():
            return f"already running again (pid {p.pid}): left alone"
        return self._start(p)

    def _term(self, f: PlannedFault) -> str:
        p = self._running(f)
        p.signal(signal.SIGTERM)  # not waited for here: its graceful exit is part of the fault
        return f"SIGTERM pid {p.pid}"

    def _restart_after_exit(self, f: PlannedFault) -> str:
        p = self.fc.nodes[f.target]
        try:
            code = p.proc.wait(30)  # the SIGTERM's graceful exit
        except subprocess.TimeoutExpired:
            p.kill()
            code = f"{p.proc.returncode} (SIGKILL: no exit 30 s after SIGTERM)"
        self._check_graceful(p, code)
        return f"exited {code}; {self._start(p)}"

    def _check_graceful(self, p: NodeProcess, code) -> None:
        if code != 0:
            self._surprise(
                f"{p.node_id} exited {code} on SIGTERM, not 0: "
                + " | ".join(p.log_text().strip().splitlines()[-3:])[-600:]
            )

    def _pause(self, f: PlannedFault) -> str:
        p = self._running(f)
        p.pause()
        return f"SIGSTOP pid {p.pid}"

    def _resume(self, f: PlannedFault) -> str:
        p = self.fc.nodes[f.target]
        p.resume()
        return f"SIGCONT pid {p.pid}" if p.alive() else f"SIGCONT, but it had exited ({p.proc.returncode})"

    def _skew(self, f: PlannedFault) -> str:
        p = self._running(f)
        code = p.terminate(30)
        self._check_graceful(p, code)
        return f"exited {code}; {self._start(p, f.offset_ms)} with clock offset {f.offset_ms:+d} ms"

    def _unskew(self, f: PlannedFault) -> str:
        p = self.fc.nodes[f.target]
        code = p.terminate(30)
        self._check_graceful(p, code)
        return f"exited {code}; {self._start(p)} without a clock offset"

    def _cut_etcd(self, f: PlannedFault) -> str:
        self._running(f)
        self.fc.cut_etcd(f.target)
        return f"DROP {f.target} <-> etcd ports {self.fc.etcd_ports}"

    def _cut_store(self, f: PlannedFault) -> str:
        self._running(f)
        self.fc.cut_store(f.target)
        return f"DROP {f.target} <-> the store forwarder :{self.fc.forwarder.port}"

    def _restore(self, f: PlannedFault) -> str:
        self.fc.restore(f.target)
        return "rules flushed"

    def _drain(self, f: PlannedFault) -> str:
        self._running(f)
        self._shardcron("drain", f.target)
        return "shardcron drain"

    def _undrain(self, f: PlannedFault) -> str:
        self._shardcron("drain", f.target, "--undo")
        return "shardcron drain --undo"

    def _shardcron(self, *args: str) -> str:
        cmd = [
            sys.executable,
            "-m",
            "shardcron",
            *args,
            "--etcd",
            self.fc.etcd.endpoints,
            "--prefix",
            self.fc.cluster.prefix,
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(
                f"`shardcron {' '.join(args)}` exited {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]}"
            )
        return out.stdout

    def _drained(self) -> list[str]:
        layout = KeyLayout(self.fc.cluster.prefix)
        etcd = Etcd(self.fc.etcd.endpoints, timeout_s=5.0)
        try:
            _, kvs = etcd.get_prefix(layout.drains)
            return sorted(n for kv in kvs if (n := layout.parse_drain(kv.key)))
        finally:
            etcd.close()

    # -- etcd faults ---------------------------------------------------------------------------------------

    def _kill_member(self, f: PlannedFault) -> str:
        m = next((m for m in self.fc.etcd.members if m.name == f.target), None)
        if m is None:
            raise NotApplied(f"no etcd member {f.target!r}")
        if not self.fc.etcd_healthy():
            raise NotApplied("etcd is not 3 healthy members (one still rejoining?): a kill could cost the quorum")
        self.fc.etcd.kill(m)
        return f"kill -9 etcd member {m.name}"

    def _start_member(self, f: PlannedFault) -> str:
        m = next(m for m in self.fc.etcd.members if m.name == f.target)
        if m.proc is not None and m.proc.poll() is None:
            return f"{m.name} already running again: left alone"
        self.fc.etcd.start_member(m, state="existing")
        return f"restarted {m.name} (existing state)"

    def _move_leader(self, _f: PlannedFault) -> str:
        statuses = self.fc.etcd_status()
        ids = {s["Endpoint"].split("://", 1)[-1]: s["Status"]["header"]["member_id"] for s in statuses}
        leader = self.fc.etcd_leader()
        names = sorted(m.name for m in self.fc.etcd.members)
        by_name = {m.name: m for m in self.fc.etcd.members}
        # The member after the leader (by name) that answers: repeated moves go round the cluster.
        after = names[names.index(leader.name) + 1 :] + names[: names.index(leader.name)]
        to = next((by_name[n] for n in after if by_name[n].endpoint in ids), None)
        if to is None:
            raise NotApplied(f"no live member to hand the leadership of {leader.name} to")
        _etcdctl(f"http://{leader.endpoint}", "move-leader", format(ids[to.endpoint], "x"))
        return f"etcd leader {leader.name} -> {to.name}"

    def _compact(self, _f: PlannedFault) -> str:
        revision = max(s["Status"]["header"]["revision"] for s in self.fc.etcd_status())
        _etcdctl(",".join(f"http://{m.endpoint}" for m in self.fc.etcd.members), "compact", str(revision))
        return f"compacted to revision {revision}"

    # -- PostgreSQL faults -----------------------------------------------------------------------------------

    def _restart_db(self, _f: PlannedFault) -> str:
        harness.pg_ctl("restart")
        return "pg_ctlcluster restart -m fast"

    def _db_answers(self, _f: PlannedFault | None, timeout_s: float = 60.0) -> str:
        t = time.time()

        def answers() -> bool:
            with self._db.connect() as c:
                c.execute(text("SELECT 1"))
            return True

        wait_until(answers, timeout_s, 0.2, f"PostgreSQL to answer at {self._db.url.render_as_string()}")
        return f"PostgreSQL answered after {time.time() - t:.1f} s"

    def _kill_db_conns(self, _f: PlannedFault) -> str:
        self.fc.forwarder.reset_all()
        with self._db.connect() as c:
            n = c.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
        return f"forwarded connections reset; {n} backends of the test database terminated"

    def _nothing(self, _f: PlannedFault) -> str:
        return ""


def timeline(plan: list[PlannedFault]) -> list[tuple[float, str, PlannedFault]]:
    """The plan as (time from t0, step, fault) in order: "apply" and "heal", or one "pulse" (apply then heal
    at once) for an instantaneous fault. A heal comes before an apply at the same instant."""
    steps = []
    for i, f in enumerate(plan):
        if f.duration_s <= 0:
            steps.append((f.at_s, 1, i, "pulse", f))
        else:
            steps += [(f.at_s, 1, i, "apply", f), (f.end_s, 0, i, "heal", f)]
    return [(t, step, f) for t, _, _, step, f in sorted(steps, key=lambda s: s[:3])]


def _etcdctl(endpoints: str, *args: str) -> str:
    cmd = ["etcdctl", f"--endpoints={endpoints}", "--command-timeout=5s", *args]
    out = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "ETCDCTL_API": "3"},
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"`etcdctl {' '.join(args)}` exited {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]}"
        )
    return out.stdout


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (state T in /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _serving(p: NodeProcess) -> bool:
    if not p.alive():
        raise GaveUp(
            f"{p.node_id} exited ({p.proc.returncode if p.proc else None}): "
            + " | ".join(p.log_text().strip().splitlines()[-3:])
        )
    return not _stopped(p.pid) and port_open(p.host, p.port)
