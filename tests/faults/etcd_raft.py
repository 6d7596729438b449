"""What etcd's raft did during a fault: how long the cluster had no leader, and the elections that took.

Two witnesses, because each sees what the other cannot:

* ``StatusPoller`` asks every member for its Status (the RPC behind ``etcdctl endpoint
  status``), each member on its own thread every ``POLL_S``, with a short deadline: the
  first answer naming a leader other than the killed one is the moment etcd can serve a
  lease renewal again, seen from outside, to within one poll. (A gRPC call, not etcdctl:
  three Go processes started ten times a second would load the 2-core machine the
  scenario is timing.)
* ``raft_events`` reads a member's own log: campaigns, votes ignored or rejected, leaders
  elected. Only its lines say why a window was long (a split vote costs one more election
  timeout). Run etcd with ``ETCD_LOGGER=zap`` (``ZAP_LOGGER_ENV``) for millisecond times;
  etcd 3.4's default logger stamps raft lines to the whole second.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import grpc
from pyetcd import etcdrpc

from shardcron.dev.testing.etcd_server import EtcdMember

POLL_S = 0.1
CALL_TIMEOUT_S = 0.3  # a member busy electing answers Status at once; a dead one is refused at once

# etcd reads a variable for any flag its command line does not set; the members' command line sets no logger.
ZAP_LOGGER_ENV = {"ETCD_LOGGER": "zap"}


# -- the status poller -----------------------------------------------------------------


@dataclass(frozen=True)
class StatusSample:
    t: float  # wall seconds, when the answer came back
    member: str  # its name (m0, m1, ...)
    member_id: int | None  # None: the member did not answer
    leader: int | None  # the leader it knows of; 0: none (electing); None: no answer
    term: int | None


class StatusPoller:
    """Every member's Status, every ``POLL_S``, one thread per member (a dead member's refusal delays no other)."""

    def __init__(self, members: list[EtcdMember]):
        self.members = list(members)
        self.samples: list[StatusSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(m,), name=f"status-{m.name}", daemon=True) for m in self.members
        ]

    def start(self) -> StatusPoller:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def _run(self, m: EtcdMember) -> None:
        channel = grpc.insecure_channel(m.endpoint)
        stub = etcdrpc.MaintenanceStub(channel)
        try:
            while not self._stop.is_set():
                started = time.time()
                try:
                    r = stub.Status(etcdrpc.StatusRequest(), timeout=CALL_TIMEOUT_S)
                    s = StatusSample(time.time(), m.name, r.header.member_id, r.leader, r.raftTerm)
                except grpc.RpcError:  # killed, or not started yet: no answer is a sample too
                    s = StatusSample(time.time(), m.name, None, None, None)
                with self._lock:
                    self.samples.append(s)
                self._stop.wait(max(0.0, POLL_S - (time.time() - started)))
        finally:
            channel.close()

    def since(self, t: float) -> list[StatusSample]:
        with self._lock:
            return [s for s in self.samples if s.t >= t]

    def member_ids(self) -> dict[str, int]:
        """name -> raft member id, from the answers so far."""
        with self._lock:
            return {s.member: s.member_id for s in self.samples if s.member_id is not None}

    def leader(self) -> tuple[int, int] | None:
        """(leader id, term) that every member answering lately agrees on, or None."""
        latest: dict[str, StatusSample] = {}
        with self._lock:
            for s in self.samples:
                latest[s.member] = s
        named = {(s.leader, s.term) for s in latest.values() if s.leader}
        return named.pop() if len(named) == 1 else None


def leader_again(samples: list[StatusSample], *, after: float, deposed: int) -> StatusSample | None:
    """The first answer after ``after`` naming a leader other than ``deposed`` (the killed member).

    Until their election timeout fires, the survivors still name the dead leader; while
    they elect, they name none (0)."""
    return next(
        (s for s in sorted(samples, key=lambda s: s.t) if s.t > after and s.leader and s.leader != deposed), None
    )


# -- the members' raft lines ----------------------------------------------------------------


@dataclass(frozen=True)
class RaftEvent:
    t: float  # wall seconds
    member: str  # the raft id (hex) of the member that logged it
    kind: str  # one of EVENT_PATTERNS
    term: int
    text: str
    precise: bool  # to the millisecond (zap); a capnslog line is stamped to the whole second


# What each raft line means for the window (etcd raft 3.4/3.5 wording).
EVENT_PATTERNS = {
    "campaign": re.compile(r"^(\w+) became (?:pre-)?candidate at term (\d+)"),
    "elected": re.compile(r"^raft\.node: (\w+) elected leader \w+ at term (\d+)"),
    "vote ignored (in lease)": re.compile(r"^(\w+) \[.*\] ignored Msg(?:Pre)?Vote from \w+ .* at term (\d+): lease"),
    "vote rejected": re.compile(r"^(\w+) received Msg(?:Pre)?VoteResp rejection from \w+ at term (\d+)"),
}
_CAPNSLOG_RAFT = re.compile(r"^raft(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \w+: (.*)$")


def _zap_time(ts) -> float:
    if isinstance(ts, (int, float)):
        return float(ts)
    return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()


def _split_line(line: str) -> tuple[float, str, bool] | None:
    """(time, raft message, precise) of one log line, zap JSON or capnslog; None for anything else."""
    if line.startswith("{"):
        try:
            d = json.loads(line)
            return _zap_time(d["ts"]), str(d["msg"]), True
        except (ValueError, KeyError):
            return None
    if m := _CAPNSLOG_RAFT.match(line):
        # Go's log package writes local time, which naive parsing assumes too.
        return datetime.strptime(m.group(1), "%Y/%m/%d %H:%M:%S").timestamp(), m.group(2), False
    return None


def raft_events(log_text: str) -> list[RaftEvent]:
    out = []
    for line in log_text.splitlines():
        split = _split_line(line)
        if split is None:
            continue
        t, msg, precise = split
        for kind, rx in EVENT_PATTERNS.items():
            if m := rx.match(msg):
                out.append(RaftEvent(t, m.group(1), kind, int(m.group(2)), msg, precise))
                break
    return out


@dataclass(frozen=True)
class Elections:
    """The elections between a kill and a time, from the members' own lines."""

    campaigned: list[int]  # terms someone became candidate in
    elected: dict[int, float]  # term -> first time a member logged its leader
    split: list[int]  # terms campaigned in that elected no one: each cost one more election timeout
    ignored_votes: int  # votes a member ignored because it had heard the old leader within the timeout
    precise: bool  # every time to the millisecond (zap), not to the second

    def first_elected(self) -> float | None:
        return min(self.elected.values()) if self.elected else None

    def describe(self) -> str:
        if not self.campaigned:
            return "no campaign logged"
        won = ", ".join(f"{t}" for t in sorted(self.elected)) or "none"
        text = f"terms campaigned {self.campaigned}, leader elected in term {won}"
        if self.split:
            text += f"; split/failed votes in terms {self.split}"
        if self.ignored_votes:
            text += f"; {self.ignored_votes} votes ignored by a member still in the old leader's lease"
        return text


def elections(events: list[RaftEvent], t_from: float, t_to: float) -> Elections:
    """What ``events`` (every member's) say about the elections in [t_from, t_to] (a second wider for
    capnslog's whole-second stamps)."""
    window = [e for e in events if t_from - (0 if e.precise else 1) <= e.t <= t_to + (0 if e.precise else 1)]
    campaigned = sorted({e.term for e in window if e.kind == "campaign"})
    elected: dict[int, float] = {}
    for e in window:
        if e.kind == "elected" and e.term in campaigned:
            elected[e.term] = min(e.t, elected.get(e.term, e.t))
    split = [t for t in campaigned if t not in elected]
    ignored = sum(e.kind == "vote ignored (in lease)" for e in window)
    return Elections(campaigned, elected, split, ignored, all(e.precise for e in window))
