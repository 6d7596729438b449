"""The soak's operation generator: random valid API calls while faults run, each recorded as a ``history.Op``.

Every 0.3-1.5 s it calls one node, picked at random, through
``shardcron.client.client.Client`` (one call, one target, ``CALL_TIMEOUT_S``; the
node forwards writes to the shard's leader): put a dynamic job (``dyn-<k>``:
created, or its schedule changed), pause, resume or delete one, trigger or
backfill one; static jobs (the nodes' jobs file) are only triggered and
backfilled. The choices come from the ``random.Random`` it is given, so a seed
gives one sequence of choices for one sequence of outcomes (outcomes depend on
timing and faults).

Outcomes (``classify``)
    ok    the call answered: it took effect once, within [call_ms, return_ms].
    fail  the server certainly refused it before writing anything (``FAIL_CODES``).
    info  anything else: it may take effect at any time from its call on.
    Not in ``FAIL_CODES`` although they are refusals: FAILED_PRECONDITION is any
    ShardcronError the status table does not name, which includes one raised
    after the store write, while telling the scheduler (api/job_puts.py's
    ``written``, service.py's ``job_written``); ABORTED is a version conflict,
    which a call without ``expected_version`` (all of ours) should never meet.
    A status we cannot vouch for is info: it costs an uncertainty window, while
    a wrong "fail" would be a false finding.

A dynamic job's state as the generator knows it (``JobPhase``)
    ABSENT -> ACTIVE | PAUSED   ok put (PAUSED when the stored job says paused)
    ACTIVE | PAUSED -> ACTIVE | PAUSED   ok put, ok pause (PAUSED), ok resume (ACTIVE)
    ACTIVE | PAUSED -> ABSENT   ok delete
    any -> UNKNOWN              info op of any kind on the job
    UNKNOWN -> ACTIVE | PAUSED  ok put, called no sooner than INDETERMINATE_TAIL_S
                                after the info op returned (so a late commit of the
                                indeterminate op cannot land after it); until then
                                no op touches the job, then puts until one is ok
    fail                        no change

``INDETERMINATE_TAIL_S`` (history.py) is shared with the checker, which holds
the generator to it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import grpc

from shardcron.client.client import Client
from shardcron.client.errors import ApiError
from shardcron.spec.job import job_from_dict
from tests.faults.harness import now_ms
from tests.faults.soak.history import INDETERMINATE_TAIL_S, History, JobPhase, Op, OpKind, Outcome

REPAIR_BACKOFF_S = 0.2  # between rounds of re-puts while one of them fails (a node still healing)
INDETERMINATE_TAIL_MS = int(INDETERMINATE_TAIL_S * 1000)
CALL_TIMEOUT_S = 5.0
PAUSE_S = (0.3, 1.5)  # between two calls
DYN_JOBS = 6
# A backfill's range ends this long before now (on whole seconds): the leader refuses a range reaching
# past its own clock, which a clock fault may set up to 1.5 s behind.
BACKFILL_LAG_MS = 3000
BACKFILL_BACK_S = (5, 20)  # how far back it reaches before that end
BACKFILL_RATES = (2.0, 5.0, 10.0)
PAUSED_PUT_CHANCE = 0.1  # a put that stores the job paused

FAIL_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,  # the request (or a value the store cannot hold): nothing written
        grpc.StatusCode.NOT_FOUND,  # no such job
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,  # refused before the call is served
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,  # a limit, a quota, the trigger budget: refused before any write
        grpc.StatusCode.OUT_OF_RANGE,
    }
)

# The dynamic jobs' schedules: every 1 s / 2 s, 6-field crons, jitter.
SCHEDULES: tuple[dict, ...] = (
    {"every": "1s"},
    {"every": "2s"},
    {"cron": "*/2 * * * * *"},
    {"cron": "*/3 * * * * *"},
    {"every": "1s", "jitter": "300ms"},
    {"every": "2s", "jitter": "800ms"},
)


@dataclass(frozen=True)
class DynJob:
    state: JobPhase = JobPhase.ABSENT
    spec: dict | None = None  # the last spec put ok
    repair_at_ms: int = 0  # UNKNOWN: the repairing put may be called from then on


@dataclass(frozen=True)
class Planned:
    kind: OpKind
    job: str
    spec: dict | None = None  # put
    back_s: int = 0  # backfill: the range reaches this far back from its end
    rate_per_s: float = 0.0  # backfill


# -- pure decisions ------------------------------------------------------------------------------


def classify(code: grpc.StatusCode | None) -> Outcome:
    """The outcome of a call that answered ``code`` (None: it returned)."""
    if code is None or code is grpc.StatusCode.OK:
        return "ok"
    return "fail" if code in FAIL_CODES else "info"


def outcome_of(exc: BaseException | None) -> tuple[Outcome, str | None]:
    """(outcome, error text) of a call that raised ``exc`` (None: it returned). Only an ``ApiError`` carries a
    status the server gave; any other exception (a transport error, a bug of ours) is indeterminate."""
    if exc is None:
        return "ok", None
    if isinstance(exc, ApiError):
        return classify(exc.code), f"{exc.code.name}: {exc.details or exc}"[:500]
    return "info", f"{type(exc).__name__}: {exc}"[:500]


def random_spec(job_id: str, rng: random.Random, current: Mapping | None = None) -> dict:
    """A dynamic job's spec (the jobspec dict form): one of ``SCHEDULES``, another than ``current``'s when given."""
    now = {k: v for k, v in (current or {}).items() if k in ("every", "cron", "jitter")}
    schedules = [s for s in SCHEDULES if s != now] or list(SCHEDULES)
    spec = {"id": job_id, **rng.choice(schedules), "catchup": "all", "overlap": "allow", "executor": {"kind": "noop"}}
    if rng.random() < PAUSED_PUT_CHANCE:
        spec["paused"] = True
    return spec


def next_op(jobs: Mapping[str, DynJob], static_ids: Sequence[str], rng: random.Random, at_ms: int) -> Planned | None:
    """The next operation, given what the generator knows of the dynamic jobs at ``at_ms``.

    A job whose indeterminate tail has passed is re-put first (the lowest id); a job still in its
    tail is left alone. Otherwise a weighted draw over the valid operations: creating absent jobs,
    changing, pausing, resuming, deleting, triggering and backfilling present ones, triggering and
    backfilling static ones. None when nothing is valid (every dynamic job in its tail, no static job).
    """
    for job_id in sorted(jobs):
        j = jobs[job_id]
        if j.state is JobPhase.UNKNOWN and at_ms >= j.repair_at_ms:
            return Planned("put", job_id, spec=random_spec(job_id, rng, j.spec))
    choices: list[tuple[float, OpKind, str]] = []
    for job_id in sorted(jobs):
        state = jobs[job_id].state
        if state is JobPhase.ABSENT:
            choices.append((4.0, "put", job_id))
        elif state in (JobPhase.ACTIVE, JobPhase.PAUSED):
            choices += [(2.0, "put", job_id), (1.0, "delete", job_id), (0.7, "backfill", job_id)]
            choices += (
                [(1.2, "pause", job_id), (1.0, "trigger", job_id)]
                if state is JobPhase.ACTIVE
                else [(2.0, "resume", job_id)]
            )
    for job_id in static_ids:
        choices += [(0.4, "trigger", job_id), (0.2, "backfill", job_id)]
    if not choices:
        return None
    kind, job_id = weighted_pick(choices, rng.random() * sum(w for w, _, _ in choices))
    if kind == "put":
        return Planned("put", job_id, spec=random_spec(job_id, rng, jobs[job_id].spec))
    if kind == "backfill":
        return Planned("backfill", job_id, back_s=rng.randint(*BACKFILL_BACK_S), rate_per_s=rng.choice(BACKFILL_RATES))
    return Planned(kind, job_id)


def weighted_pick(choices: list[tuple[float, OpKind, str]], x: float) -> tuple[OpKind, str]:
    """The (kind, job id) whose weight band ``x`` falls in (``x`` drawn in [0, total weight)); the last one when
    rounding carries ``x`` past every band."""
    for weight, kind, job_id in choices:
        x -= weight
        if x < 0:
            return kind, job_id
    return choices[-1][1], choices[-1][2]


def backfill_range(at_ms: int, back_s: int) -> tuple[int, int]:
    """(from_ms, to_ms) of a backfill asked at ``at_ms``: whole seconds, ending ``BACKFILL_LAG_MS`` before it."""
    to_ms = (at_ms - BACKFILL_LAG_MS) // 1000 * 1000
    return to_ms - back_s * 1000, to_ms


def after(job: DynJob, planned: Planned, outcome: Outcome, result: Mapping | None, return_ms: int) -> DynJob:
    """What the generator knows of a dynamic job after ``planned`` on it ended with ``outcome``."""
    if outcome == "info":
        return replace(job, state=JobPhase.UNKNOWN, repair_at_ms=return_ms + INDETERMINATE_TAIL_MS)
    if outcome != "ok":
        return job
    paused = bool(result and result.get("paused"))
    if planned.kind == "put":
        return DynJob(JobPhase.PAUSED if paused else JobPhase.ACTIVE, planned.spec)
    if planned.kind in ("pause", "resume"):
        return replace(job, state=JobPhase.PAUSED if paused else JobPhase.ACTIVE)
    if planned.kind == "delete":
        return DynJob()
    return job  # trigger, backfill: no change


# -- the thread ---------------------------------------------------------------------------------


class OperationGenerator:
    """Issues ``next_op``'s operations against random nodes and records them in ``history.ops``.

    ``start()``; ``stop()`` (ends after the call in flight, at most ``call_timeout_s``); then
    ``heal_ops(timeout_s)`` re-puts every dynamic job left UNKNOWN. Never raises out of a call:
    every exception is an ``info`` outcome, logged.
    """

    def __init__(
        self,
        addresses: Mapping[str, str],
        rng: random.Random,
        history: History,
        *,
        static_ids: Sequence[str],
        dyn_jobs: int = DYN_JOBS,
        call_timeout_s: float = CALL_TIMEOUT_S,
        log=print,
    ):
        if not addresses:
            raise ValueError("OperationGenerator needs at least one node address")
        self.addresses = dict(addresses)
        self.node_ids = sorted(self.addresses)
        self.rng = rng
        self.history = history
        self.static_ids = list(static_ids)
        self.call_timeout_s = call_timeout_s
        self.log = log
        self.jobs: dict[str, DynJob] = {f"dyn-{k}": DynJob() for k in range(dyn_jobs)}
        self._clients: dict[str, Client] = {}
        self._next_id = len(history.ops)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-generator", daemon=True)

    def start(self) -> OperationGenerator:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.call_timeout_s + 10)
        if self._thread.is_alive():
            self.log("generator: its thread did not end within the call timeout; it stops after its call")

    def heal_ops(self, timeout_s: float = 120.0) -> list[str]:
        """After ``stop()``: put every UNKNOWN dynamic job (after its tail) until the put is ok. Returns the
        jobs still UNKNOWN at ``timeout_s`` (empty: healed)."""
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                unknown = sorted(j for j, s in self.jobs.items() if s.state is JobPhase.UNKNOWN)
                if not unknown:
                    return []
                if time.monotonic() >= deadline:
                    self.log(f"generator: dynamic jobs still unknown after {timeout_s:.0f}s: {unknown}")
                    return unknown
                ready = [j for j in unknown if now_ms() >= self.jobs[j].repair_at_ms]
                for job_id in ready:
                    self._execute(Planned("put", job_id, spec=random_spec(job_id, self.rng, self.jobs[job_id].spec)))
                if not ready:
                    wait_ms = min(self.jobs[j].repair_at_ms for j in unknown) - now_ms()
                    time.sleep(min(0.5, max(0.01, wait_ms / 1000)))
                else:
                    time.sleep(REPAIR_BACKOFF_S)
        finally:
            self.close()

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()

    # -- one operation ----------------------------------------------------------------------

    def step(self) -> Op | None:
        planned = next_op(self.jobs, self.static_ids, self.rng, now_ms())
        return self._execute(planned) if planned else None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.step()
                except Exception as e:  # noqa: BLE001 - _execute catches a call's errors; this is a bug of ours
                    self.log(f"generator: step failed: {type(e).__name__}: {e}")
                self._stop.wait(self.rng.uniform(*PAUSE_S))
        finally:
            self.close()

    def _execute(self, planned: Planned) -> Op:
        node = self.rng.choice(self.node_ids)
        args = None
        call_ms = now_ms()
        if planned.kind == "backfill":
            from_ms, to_ms = backfill_range(call_ms, planned.back_s)
            args = {"from_ms": from_ms, "to_ms": to_ms, "rate_per_s": planned.rate_per_s, "overlap": "skip"}
        try:
            result, exc = self._call(node, planned, args), None
        except Exception as e:  # noqa: BLE001 - any failure is an outcome, never the generator's end
            result, exc = None, e
        return_ms = now_ms()
        outcome, error = outcome_of(exc)
        op = Op(
            id=self._next_id,
            kind=planned.kind,
            job=planned.job,
            node=node,
            call_ms=call_ms,
            return_ms=return_ms,
            outcome=outcome,
            spec=planned.spec,
            result=result if outcome == "ok" else None,
            args=args,
            error=error,
        )
        self._next_id += 1
        self.history.ops.append(op)
        if planned.job in self.jobs:
            self.jobs[planned.job] = after(self.jobs[planned.job], planned, outcome, op.result, return_ms)
        if outcome != "ok":
            self.log(f"generator: op {op.id} {op.kind} {op.job} on {node}: {outcome} ({error})")
        if outcome == "info":
            self._drop_client(node)  # a fresh channel next time, not one backing off from a dead node
        return op

    def _client(self, node: str) -> Client:
        c = self._clients.get(node)
        if c is None:
            c = self._clients[node] = Client([self.addresses[node]], timeout_s=self.call_timeout_s)
        return c

    def _drop_client(self, node: str) -> None:
        c = self._clients.pop(node, None)
        if c is not None:
            c.close()

    def _call(self, node: str, planned: Planned, args: dict | None) -> dict | None:
        c = self._client(node)
        if planned.kind == "put":
            return _job_result(c.put_job(job_from_dict(planned.spec, require_executor=True)))
        if planned.kind == "pause":
            return _job_result(c.pause_job(planned.job))
        if planned.kind == "resume":
            return _job_result(c.resume_job(planned.job))
        if planned.kind == "delete":
            c.delete_job(planned.job)
            return None
        if planned.kind == "trigger":
            return {"slot_ms": c.trigger_job(planned.job).scheduled_at_ms}
        if planned.kind == "backfill":
            bf = c.backfill_job(
                planned.job, args["from_ms"], args["to_ms"], rate_per_s=args["rate_per_s"], overlap=args["overlap"]
            )
            return {"id": bf.id, "from_ms": bf.from_ms, "to_ms": bf.to_ms}
        raise ValueError(f"unknown operation kind {planned.kind!r}")


def _job_result(job) -> dict:
    return {"version": job.version, "paused": job.paused, "active_since_ms": job.active_since_ms}
