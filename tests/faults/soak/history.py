"""The soak's history: everything the checker judges, as plain data that round-trips through JSON.

Times are epoch milliseconds on this machine's clock (the test's), except the
columns copied from the store (``claimed_at_ms`` and the like, each the writing
node's own clock, which a clock fault moves by up to ``clock_tolerance_ms``).

- ``Op``: one call of the API, with its call and return times and outcome.
  ``ok``: it took effect, once, somewhere inside [call_ms, return_ms].
  ``fail``: it certainly did not take effect (the server refused it).
  ``info``: indeterminate (a timeout, an unreachable node): it may take effect
  at any time from ``call_ms`` on, as Jepsen treats indeterminate operations.
- ``Fault``: one fault the nemesis applied, from ``start_ms`` to ``end_ms``
  (its heal; ``None`` while never healed, which the driver does not allow).
- ``TickRow``, ``FenceRaise``: the store's ``ticks`` and ``fence_log`` rows.
- ``Effect``: a row the session job wrote in its fenced transaction.
- ``Delivery``: a message the stream consumer read, with the guard's verdict.
- ``LeaderSample``: the shard map read from etcd (``None``: etcd did not answer).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Literal

OpKind = Literal["put", "pause", "resume", "delete", "trigger", "backfill"]
Outcome = Literal["ok", "fail", "info"]

FINAL_STATUSES = frozenset({"succeeded", "failed", "skipped", "abandoned"})

# How long after an indeterminate operation returned its late effect may still land (a server-side commit
# outliving the client's deadline). The generator re-puts the job no sooner; the checker holds it to that.
INDETERMINATE_TAIL_S = 30


class JobPhase(StrEnum):
    """What a job is, as the generator believes and the checker models it."""

    ABSENT = "absent"  # never put, or deleted
    ACTIVE = "active"
    PAUSED = "paused"
    UNKNOWN = "unknown"  # after an indeterminate operation, until a put or delete settles it


@dataclass(frozen=True)
class Op:
    id: int
    kind: OpKind
    job: str
    node: str  # the node the client called
    call_ms: int
    return_ms: int
    outcome: Outcome
    # put: the job's spec as sent (the jobspec/TOML dict form: "every" or "cron", "jitter", "calendars", ...)
    spec: dict | None = None
    # ok results: put/pause/resume -> {"version", "paused", "active_since_ms"}; trigger -> {"slot_ms"};
    # backfill -> {"id", "from_ms", "to_ms"} (the range asked for is in ``args`` for every outcome)
    result: dict | None = None
    args: dict | None = None  # backfill: {"from_ms", "to_ms"}
    error: str | None = None


@dataclass(frozen=True)
class Fault:
    kind: str  # "kill", "stop", "term", "cut-etcd", "cut-store", "etcd-member", "etcd-move-leader",
    #            "etcd-compact", "db-restart", "db-conn-kill", "clock", "drain"
    target: str  # a node id, an etcd member name, "postgresql", ...
    start_ms: int
    end_ms: int | None
    detail: str = ""


@dataclass(frozen=True)
class TickRow:
    job: str
    slot_ms: int
    status: str
    manual: bool
    shard: int
    fence: int
    node: str
    attempt: int
    claimed_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    error: str | None = None


@dataclass(frozen=True)
class FenceRaise:
    shard: int
    fence: int
    node: str
    raised_at_ms: int


@dataclass(frozen=True)
class Effect:
    job: str
    slot_ms: int
    node: str
    fence: int


@dataclass(frozen=True)
class Delivery:
    job: str
    slot_ms: int
    attempt: int
    fence: int
    verdict: str  # dedupe.Verdict value: "first", "duplicate", "stale_fence"
    at_ms: int


@dataclass(frozen=True)
class LeaderSample:
    t_ms: int
    leaders: dict[int, str | None] | None


@dataclass(frozen=True)
class StaticJob:
    """A job of the nodes' jobs file: never changed by the generator (a node's restart re-imports it)."""

    id: str
    spec: dict
    active_since_ms: int  # from the store


@dataclass
class History:
    seed: int
    seconds: float
    ttl_s: int
    shards: int
    clock_tolerance_ms: int  # the largest clock offset the nemesis may apply, plus slack
    settle_s: float  # what the liveness rule allows beyond the TTL after the final heal
    # How far apart two nodes' clocks may be, plus slack, for a stamp of one node against another's (0: as
    # far as one node's from the test's, clock_tolerance_ms).
    node_skew_ms: int = 0
    started_ms: int = 0  # faults and operations begin
    heal_ms: int = 0  # every fault healed
    end_ms: int = 0  # the schedule is checked through this slot
    calendars: dict[str, dict] = field(default_factory=dict)  # name -> definition, as put
    static_jobs: list[StaticJob] = field(default_factory=list)
    session_job: str = ""  # the static job whose effects are ``effects``
    stream_job: str = ""  # the static job whose messages are ``deliveries``
    ops: list[Op] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    ticks: list[TickRow] = field(default_factory=list)
    fences: list[FenceRaise] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    leaders: list[LeaderSample] = field(default_factory=list)
    audit: dict | None = None  # `shardcron audit --json` over (started_ms, end_ms]

    @property
    def between_nodes_ms(self) -> int:
        """How far apart two stamps written by two nodes may be: ``node_skew_ms``, at least ``clock_tolerance_ms``."""
        return max(self.node_skew_ms, self.clock_tolerance_ms)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    def save(self, path: Path) -> Path:
        path.write_text(self.to_json())
        return path

    @classmethod
    def from_json(cls, text: str) -> History:
        raw = json.loads(text)
        kinds = {
            "static_jobs": StaticJob,
            "ops": Op,
            "faults": Fault,
            "ticks": TickRow,
            "fences": FenceRaise,
            "effects": Effect,
            "deliveries": Delivery,
        }
        for name, kind in kinds.items():
            raw[name] = [kind(**x) for x in raw.get(name, [])]
        raw["leaders"] = [
            LeaderSample(s["t_ms"], None if s["leaders"] is None else {int(k): v for k, v in s["leaders"].items()})
            for s in raw.get("leaders", [])
        ]
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    @classmethod
    def load(cls, path: Path) -> History:
        return cls.from_json(path.read_text())
