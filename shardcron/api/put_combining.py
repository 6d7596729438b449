"""PutJob forwards to one leader, for one caller, combined: one node-to-node call for the ones that come together.

A node forwards a PutJob whose shard it does not lead (``routing.Router.call``);
most of such a call's cost is the gRPC call itself, so the forwards that meet
here share one. They are combined per *lane*: one leader address (its stub)
and one forward metadata, which holds the caller's bearer secret, so two
callers' credentials never travel in one call. A lone call goes at once, as
the plain PutJob it was; calls that arrive while one is in flight queue and go
together in the next one, a PutJobEach (``api/put_each.py``): no call ever
waits for company, as with ``job_puts.LINGER_S`` on the leader.

Each caller gets what its PutJob alone would have answered: the leader
answers each call's status (``retry`` set where PutJob's answer would carry
``x-shardcron-retry``), and ``put`` raises it as a ``grpc.RpcError`` with that
trailing metadata, so ``Router.call`` treats it as it treats PutJob's own:
retried with the shard's new leader when leadership moved, else the status as
it is. A failure of the combined call as a whole (no connection, a leader that
moved, a deadline) is each member's own, as it would have been for its own
call. A combined call the leader refuses as a whole (an older leader without
PutJobEach, one over its --max-request-bytes, a scope refused outright) is
sent again as each member's own PutJob, so each gets its own precise answer.

Deadlines: a combined call carries the LATEST of its members' deadlines, so
it never fails a member that alone would have had the time; each member stops
waiting at its own deadline (DEADLINE_EXCEEDED, as its own call would have
failed). A member that stops waiting (its caller cancelled, or its deadline
passed) leaves its lane; the others are not disturbed, and a call that no
member waits for any more is cancelled.

Lane states (one per lane; the ``_lanes`` entry exists only while SENDING)::

    IDLE      no call in flight to this leader for this caller
    SENDING   one call in flight; calls that arrive queue behind it

State transitions (all on the API server's loop, so none races another)::

    IDLE    -> SENDING   a call arrives: the lane's sender starts at once (the loop's next turn) and
                         sends what is queued then; a lone call goes alone, as a plain PutJob
    SENDING -> SENDING   a call arrives: it queues
    SENDING -> SENDING   the call in flight is answered and calls are queued: the next batch is sent
                         (``next_batch``: up to MAX_BATCH calls and MAX_BATCH_BYTES, at least one)
    SENDING -> IDLE      the call in flight is answered and none is queued
    (any)                a member stops waiting: it leaves the queue, or the batch in flight,
                         which is cancelled when it was the last member waiting for it

The decisions (``next_batch``, ``combined_timeout``, ``resend_alone``) are pure
functions, table-tested in tests/unit/api/test_put_combining.py.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from shardcron import metrics
from shardcron.client.channel import NODE_HEADER, RETRY_HEADER, trailing_metadata
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

MAX_BATCH = 64  # PutJob calls in one PutJobEach; well under put_each.MAX_CALLS
# Bytes of PutJob requests in one PutJobEach: well under a node's default --max-request-bytes (8 MiB), so
# a leader does not refuse a combined call its members' own calls would have passed (it would be resent
# as each member's own call if it did: ``resend_alone``).
MAX_BATCH_BYTES = 1024 * 1024

# A combined call refused as a whole with one of these says nothing about its members' own calls: the
# leader does not serve PutJobEach (an older version), the whole is over its --max-request-bytes, or its
# scope check refused the whole. Each member is then sent as its own PutJob, for its own answer.
RESEND_ALONE = frozenset(
    {
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


class LaneState(enum.Enum):
    IDLE = "idle"
    SENDING = "sending"


# -- the decisions (pure) -------------------------------------------------------------------------


def next_batch(sizes: Sequence[int], max_batch: int = MAX_BATCH, max_bytes: int = MAX_BATCH_BYTES) -> int:
    """How many of the queued calls (their request sizes, in arrival order) go in the next call: the longest
    prefix of at most ``max_batch`` calls and ``max_bytes`` bytes, and at least one (a big call goes alone)."""
    total = 0
    for n, size in enumerate(sizes[:max_batch]):
        total += size
        if n > 0 and total > max_bytes:
            return n
    return min(len(sizes), max_batch)


def combined_timeout(ends: Sequence[float], now: float) -> float:
    """The timeout of a call for members whose deadlines are ``ends`` (monotonic): the latest of them, so
    that no member runs out of time because another's ran out first (each stops waiting at its own)."""
    return max(0.001, max(ends) - now)


def resend_alone(code: grpc.StatusCode) -> bool:
    """Whether the members of a combined call refused as a whole with ``code`` are sent again, each alone."""
    return code in RESEND_ALONE


# -- the answers ----------------------------------------------------------------------------------


class Answered(grpc.RpcError):
    """A status for one member, as its own PutJob's failure would carry it (``code()``, ``details()`` and
    ``trailing_metadata()``, which ``routing.leader_moved`` reads)."""

    def __init__(self, code: grpc.StatusCode, details: str, metadata: tuple[tuple[str, str], ...] = ()):
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details
        self._metadata = metadata

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):  # (key, value) pairs, as a call's are
        return self._metadata

    @classmethod
    def copy_of(cls, e: grpc.RpcError) -> Answered:
        """The combined call's failure, for one member (each raises its own exception object)."""
        return cls(e.code(), e.details() or "", trailing_metadata(e))


_CODES = {c.value[0]: c for c in grpc.StatusCode}
_ALONE = object()  # a member's answer: send your own PutJob (``resend_alone``)


def outcome_answer(outcome: pb.PutJobOutcome, node: str) -> pb.PutJobResponse | Answered:
    """One member's answer from the leader's outcome for it."""
    code = _CODES.get(outcome.code, grpc.StatusCode.UNKNOWN)
    if code is grpc.StatusCode.OK:
        return pb.PutJobResponse(job=outcome.job)
    metadata = ((NODE_HEADER, node),) + (((RETRY_HEADER, "1"),) if outcome.retry else ())
    return Answered(code, outcome.message, metadata)


# -- the lanes --------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Member:
    request: pb.PutJobRequest
    ends: float  # monotonic: when its caller stops waiting
    size: int
    answer: asyncio.Future
    batch: _Batch | None = None  # the call it is in, once sent


@dataclass(eq=False)
class _Batch:
    members: list[_Member]
    waiting: int = 0
    call: grpc.aio.Call | None = None
    abandoned: bool = False  # no member waits for it any more: it was cancelled


@dataclass(eq=False)
class _Lane:
    stub: pb_grpc.SchedulerStub
    metadata: tuple[tuple[str, str], ...]
    queue: list[_Member] = field(default_factory=list)
    in_flight: _Batch | None = None
    state: LaneState = LaneState.IDLE
    task: asyncio.Task | None = None


LaneKey = tuple[pb_grpc.SchedulerStub, tuple[tuple[str, str], ...]]


class PutJobCombiner:
    """``put(stub, request, timeout, metadata)``: PutJob's answer from the leader behind ``stub``, combined
    with the other calls in flight there for the same ``metadata``. Lives on the API server's loop."""

    def __init__(self, max_batch: int = MAX_BATCH, max_bytes: int = MAX_BATCH_BYTES):
        self.max_batch = max_batch
        self.max_bytes = max_bytes
        self._lanes: dict[LaneKey, _Lane] = {}
        self.combined_calls = 0  # PutJobEach calls sent (tests read it: the combining did happen)

    def lane_state(self, stub: pb_grpc.SchedulerStub, metadata: tuple[tuple[str, str], ...]) -> LaneState:
        lane = self._lanes.get((stub, metadata))
        return LaneState.IDLE if lane is None else lane.state

    def queued(self, stub: pb_grpc.SchedulerStub, metadata: tuple[tuple[str, str], ...]) -> int:
        """Calls waiting in the lane for the call in flight to be answered."""
        lane = self._lanes.get((stub, metadata))
        return 0 if lane is None else len(lane.queue)

    async def put(
        self, stub: pb_grpc.SchedulerStub, request: pb.PutJobRequest, timeout: float, metadata: tuple
    ) -> pb.PutJobResponse:
        """PutJob's answer, or the ``grpc.RpcError`` its own call would have failed with."""
        loop = asyncio.get_running_loop()
        member = _Member(request, time.monotonic() + timeout, request.ByteSize(), loop.create_future())
        key = (stub, metadata)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(stub, metadata)
        lane.queue.append(member)
        if lane.state is LaneState.IDLE:
            self._set_state(lane, LaneState.SENDING)
            lane.task = loop.create_task(self._send_all(key, lane), name="putjob-combine")
        try:
            answer = await asyncio.wait_for(asyncio.shield(member.answer), timeout)
        except TimeoutError:
            self._leave(lane, member)
            raise Answered(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except asyncio.CancelledError:
            self._leave(lane, member)
            raise
        if answer is _ALONE:  # refused as a whole: this call as its own PutJob, as it was before combining
            remaining = member.ends - time.monotonic()
            if remaining <= 0:
                raise Answered(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            metrics.forwarded_putjobs.labels("alone").inc()
            return await stub.PutJob(request, timeout=remaining, metadata=metadata)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def close(self) -> None:
        """Stops every lane (the node is stopping): their members get CANCELLED."""
        for lane in list(self._lanes.values()):
            if lane.task is not None:
                lane.task.cancel()

    # -- the lane's task --------------------------------------------------------------------------

    def _set_state(self, lane: _Lane, state: LaneState) -> None:
        """Every change of a lane's state goes through here."""
        if log.isEnabledFor(logging.DEBUG):
            log.debug("PutJob lane to %s: %s -> %s", lane.stub, lane.state.value, state.value)
        lane.state = state

    def _leave(self, lane: _Lane, member: _Member) -> None:
        """``member`` no longer waits: out of the queue, or out of its batch (cancelled if it was the last)."""
        member.answer.cancel()
        if member in lane.queue:
            lane.queue.remove(member)
            return
        batch = member.batch
        if batch is not None:
            batch.waiting -= 1
            if batch.waiting <= 0 and batch.call is not None and not batch.call.done():
                batch.abandoned = True
                batch.call.cancel()

    async def _send_all(self, key: LaneKey, lane: _Lane) -> None:
        try:
            while lane.queue:
                n = next_batch([m.size for m in lane.queue], self.max_batch, self.max_bytes)
                lane.in_flight = _Batch(lane.queue[:n])
                del lane.queue[:n]
                await self._send(lane, lane.in_flight)
                lane.in_flight = None
        except asyncio.CancelledError:  # the node is stopping
            self._fail_all(lane, Answered(grpc.StatusCode.CANCELLED, "the node is stopping"))
            raise
        except Exception as e:  # noqa: BLE001 - a bug: logged, and no member is left waiting for ever
            log.error("combining PutJob calls failed", exc_info=e)
            self._fail_all(lane, e)
        finally:
            self._set_state(lane, LaneState.IDLE)
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    def _fail_all(self, lane: _Lane, failure: BaseException) -> None:
        for m in (lane.in_flight.members if lane.in_flight else []) + lane.queue:
            _answer(m, failure)
        lane.queue.clear()
        lane.in_flight = None

    async def _send(self, lane: _Lane, batch: _Batch) -> None:
        members = [m for m in batch.members if not m.answer.done()]
        if not members:
            return
        for m in members:
            m.batch = batch
        batch.waiting = len(members)
        now = time.monotonic()
        timeout = combined_timeout([m.ends for m in members], now)
        try:
            try:
                if len(members) == 1:
                    metrics.forwarded_putjobs.labels("alone").inc()
                    batch.call = call = lane.stub.PutJob(members[0].request, timeout=timeout, metadata=lane.metadata)
                    answers: list = [await call]
                else:
                    request = pb.PutJobEachRequest(calls=[m.request for m in members])
                    batch.call = call = lane.stub.PutJobEach(request, timeout=timeout, metadata=lane.metadata)
                    self.combined_calls += 1
                    metrics.forwarded_putjobs.labels("combined").inc(len(members))
                    response = await call
                    answers = [outcome_answer(o, response.node) for o in response.outcomes]
                    short = f"the leader answered {len(answers)} of {len(members)} calls"
                    answers += [Answered(grpc.StatusCode.INTERNAL, short) for _ in members[len(answers) :]]
            except grpc.RpcError as e:
                if len(members) > 1 and resend_alone(e.code()):
                    answers = [_ALONE] * len(members)
                else:
                    answers = [Answered.copy_of(e) for _ in members]
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not batch.abandoned or (current is not None and current.cancelling()):
                raise
            return  # every member left: nobody to answer
        for m, a in zip(members, answers, strict=False):
            _answer(m, a)


def _answer(member: _Member, answer: object) -> None:
    if not member.answer.done():
        if isinstance(answer, BaseException):
            member.answer.set_exception(answer)
        else:
            member.answer.set_result(answer)


__all__ = [
    "MAX_BATCH",
    "MAX_BATCH_BYTES",
    "Answered",
    "LaneState",
    "PutJobCombiner",
    "combined_timeout",
    "next_batch",
    "outcome_answer",
    "resend_alone",
]
