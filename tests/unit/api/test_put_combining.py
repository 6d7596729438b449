"""Combining PutJob forwards (api/put_combining.py): the pure decisions, table-driven, and the lane's state
machine against a stand-in leader whose calls the test answers by hand (no clock is asserted)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from shardcron.api.put_combining import (
    Answered,
    LaneState,
    PutJobCombiner,
    combined_timeout,
    next_batch,
    outcome_answer,
    resend_alone,
)
from shardcron.api.routing import leader_moved
from shardcron.client.channel import NODE_HEADER, RETRY_HEADER
from shardcron.v1 import scheduler_pb2 as pb
from tests.support.aio import until

MD = (("authorization", "Bearer a"),)
OTHER_MD = (("authorization", "Bearer b"),)


@pytest.mark.parametrize(
    "sizes, max_batch, max_bytes, expected",
    [
        ([], 4, 100, 0),
        ([10], 4, 100, 1),
        ([10, 10, 10], 4, 100, 3),
        ([10] * 9, 4, 100, 4),  # at most max_batch
        ([60, 30, 20], 4, 100, 2),  # the prefix that fits the bytes
        ([500, 10], 4, 100, 1),  # a big call goes alone
        ([10, 500], 4, 100, 1),  # and is not dragged into a small one's call
        ([50, 50], 4, 100, 2),  # exactly max_bytes fits
    ],
)
def test_next_batch(sizes, max_batch, max_bytes, expected):
    assert next_batch(sizes, max_batch, max_bytes) == expected


@pytest.mark.parametrize(
    "ends, now, expected",
    [
        ([5.0], 1.0, 4.0),
        ([2.0, 9.0, 5.0], 1.0, 8.0),  # the latest: no member runs out because another's time did
        ([1.0], 3.0, 0.001),  # past: still a positive timeout (the call fails at once)
    ],
)
def test_combined_timeout_is_the_latest_members(ends, now, expected):
    assert combined_timeout(ends, now) == pytest.approx(expected)


@pytest.mark.parametrize(
    "code, alone",
    [
        (grpc.StatusCode.UNIMPLEMENTED, True),  # an older leader
        (grpc.StatusCode.RESOURCE_EXHAUSTED, True),  # the whole is over its --max-request-bytes
        (grpc.StatusCode.PERMISSION_DENIED, True),
        (grpc.StatusCode.UNAUTHENTICATED, True),
        (grpc.StatusCode.UNAVAILABLE, False),  # leadership moved, or no answer: each member's own, to retry
        (grpc.StatusCode.DEADLINE_EXCEEDED, False),
        (grpc.StatusCode.CANCELLED, False),
        (grpc.StatusCode.INTERNAL, False),
    ],
)
def test_which_whole_call_refusals_send_each_member_alone(code, alone):
    assert resend_alone(code) is alone


@pytest.mark.parametrize(
    "outcome, code, moved",
    [
        (pb.PutJobOutcome(code=0, job=pb.Job(id="j", version=3)), grpc.StatusCode.OK, False),
        (pb.PutJobOutcome(code=10, message="version"), grpc.StatusCode.ABORTED, False),
        (pb.PutJobOutcome(code=14, message="does not lead", retry=True), grpc.StatusCode.UNAVAILABLE, True),
        (pb.PutJobOutcome(code=14, message="store down"), grpc.StatusCode.UNAVAILABLE, False),
    ],
)
def test_an_outcome_is_the_answer_putjob_alone_gives(outcome, code, moved):
    answer = outcome_answer(outcome, "n0")
    if code is grpc.StatusCode.OK:
        assert isinstance(answer, pb.PutJobResponse) and answer.job.version == 3
        return
    assert isinstance(answer, Answered) and answer.code() is code and answer.details() == outcome.message
    assert (NODE_HEADER, "n0") in answer.trailing_metadata()
    assert ((RETRY_HEADER, "1") in answer.trailing_metadata()) is moved
    assert leader_moved(answer) is moved  # what Router.call reads to retry with the new leader


# -- the lane, against a stand-in leader ----------------------------------------------------------


class _Call:
    """A unary call the test answers: ``answer(x)`` / ``fail(code)``; awaiting it after ``cancel()`` raises
    CancelledError, as a grpc.aio call does."""

    def __init__(self, method: str, request, timeout: float, metadata):
        self.method, self.request, self.timeout, self.metadata = method, request, timeout, metadata
        self._fut = asyncio.get_running_loop().create_future()

    def answer(self, response) -> None:
        self._fut.set_result(response)

    def fail(self, code: grpc.StatusCode, details: str = "", metadata=()) -> None:
        self._fut.set_exception(Answered(code, details, metadata))

    def cancel(self) -> bool:
        return self._fut.cancel()

    def cancelled(self) -> bool:
        return self._fut.cancelled()

    def done(self) -> bool:
        return self._fut.done()

    def __await__(self):
        return self._fut.__await__()


class _Leader:
    def __init__(self):
        self.calls: list[_Call] = []

    def PutJob(self, request, timeout, metadata):
        self.calls.append(_Call("PutJob", request, timeout, metadata))
        return self.calls[-1]

    def PutJobEach(self, request, timeout, metadata):
        self.calls.append(_Call("PutJobEach", request, timeout, metadata))
        return self.calls[-1]


def _put(i: int, expected: int | None = None) -> pb.PutJobRequest:
    return pb.PutJobRequest(job=pb.Job(id=f"j{i}"), expected_version=expected)


def _ok(request: pb.PutJobRequest, version: int = 1) -> pb.PutJobOutcome:
    return pb.PutJobOutcome(code=0, job=pb.Job(id=request.job.id, version=version))


async def _started(combiner, leader, *puts, timeout=30.0, md=MD) -> list[asyncio.Task]:
    return [asyncio.ensure_future(combiner.put(leader, p, timeout, md)) for p in puts]


def test_a_lone_call_goes_at_once_as_plain_putjob_and_later_ones_go_together():
    async def scenario():
        combiner, leader = PutJobCombiner(), _Leader()
        assert combiner.lane_state(leader, MD) is LaneState.IDLE
        [first] = await _started(combiner, leader, _put(0))
        await until(lambda: len(leader.calls) == 1, "the lone call to be sent")
        assert leader.calls[0].method == "PutJob" and combiner.lane_state(leader, MD) is LaneState.SENDING
        rest = await _started(combiner, leader, _put(1), _put(2, expected=7), _put(3))
        await until(lambda: combiner.queued(leader, MD) == 3, "the others to queue behind the call in flight")
        assert len(leader.calls) == 1, "the others wait for the call in flight"
        leader.calls[0].answer(pb.PutJobResponse(job=pb.Job(id="j0", version=1)))
        assert (await first).job.version == 1
        await until(lambda: len(leader.calls) == 2, "the queued calls to go together")
        combined = leader.calls[1]
        assert combined.method == "PutJobEach" and combined.metadata == MD
        assert [c.job.id for c in combined.request.calls] == ["j1", "j2", "j3"]
        assert combined.request.calls[1].expected_version == 7
        combined.answer(
            pb.PutJobEachResponse(
                outcomes=[
                    _ok(combined.request.calls[0]),
                    pb.PutJobOutcome(code=10, message="job j2 is at version 1, not 7"),
                    pb.PutJobOutcome(code=14, message="n0 does not lead shard 1", retry=True),
                ],
                node="n0",
            )
        )
        assert (await rest[0]).job.version == 1
        with pytest.raises(grpc.RpcError) as conflict:
            await rest[1]
        assert conflict.value.code() is grpc.StatusCode.ABORTED and "not 7" in conflict.value.details()
        with pytest.raises(grpc.RpcError) as moved:
            await rest[2]
        assert leader_moved(moved.value), "only this call goes through Router.call's retry"
        await until(lambda: combiner.lane_state(leader, MD) is LaneState.IDLE, "the lane to be idle")
        assert combiner.combined_calls == 1

    asyncio.run(scenario())


def _answer_ok(call: _Call) -> None:
    if call.method == "PutJob":
        call.answer(pb.PutJobResponse(job=call.request.job))
    else:
        call.answer(pb.PutJobEachResponse(outcomes=[_ok(c) for c in call.request.calls], node="n0"))


def _ids(call: _Call) -> list[str]:
    return [call.request.job.id] if call.method == "PutJob" else [c.job.id for c in call.request.calls]


def test_two_callers_never_share_a_call():
    async def scenario():
        combiner, leader = PutJobCombiner(), _Leader()
        a = await _started(combiner, leader, *(_put(i) for i in range(0, 5)), md=MD)
        b = await _started(combiner, leader, *(_put(i) for i in range(5, 10)), md=OTHER_MD)
        answered = 0
        while True:
            await until(
                lambda: answered < len(leader.calls) or all(t.done() for t in a + b),  # noqa: B023 - read at once
                "the next call, or every caller answered",
            )
            if answered == len(leader.calls):
                break
            _answer_ok(leader.calls[answered])
            answered += 1
        answers = await asyncio.gather(*a, *b)
        assert [r.job.id for r in answers] == [f"j{i}" for i in range(10)]
        for c in leader.calls:
            mine = {"j0", "j1", "j2", "j3", "j4"} if c.metadata == MD else {"j5", "j6", "j7", "j8", "j9"}
            assert set(_ids(c)) <= mine, (c.metadata, _ids(c))
        assert {c.metadata for c in leader.calls} == {MD, OTHER_MD}
        assert combiner.combined_calls >= 1

    asyncio.run(scenario())


def test_a_combined_call_carries_the_latest_deadline_and_each_member_stops_at_its_own():
    async def scenario():
        combiner, leader = PutJobCombiner(), _Leader()
        [first] = await _started(combiner, leader, _put(0))
        await until(lambda: len(leader.calls) == 1, "the first call")
        short = asyncio.ensure_future(combiner.put(leader, _put(1), 0.3, MD))
        long_ = asyncio.ensure_future(combiner.put(leader, _put(2), 60.0, MD))
        await asyncio.sleep(0)
        leader.calls[0].answer(pb.PutJobResponse(job=pb.Job(id="j0")))
        await first
        await until(lambda: len(leader.calls) == 2, "the combined call")
        combined = leader.calls[1]
        assert combined.timeout > 30.0, "the long member's deadline, not the short one's"
        with pytest.raises(grpc.RpcError) as late:
            await short  # the leader has not answered: the short member gives up at its own deadline
        assert late.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert not combined.done(), "the other member still waits for it"
        combined.answer(pb.PutJobEachResponse(outcomes=[_ok(c) for c in combined.request.calls], node="n0"))
        assert (await long_).job.id == "j2"

    asyncio.run(scenario())


def test_a_caller_that_cancels_leaves_and_the_others_are_answered():
    async def scenario():
        combiner, leader = PutJobCombiner(), _Leader()
        [first] = await _started(combiner, leader, _put(0))
        await until(lambda: len(leader.calls) == 1, "the first call")
        queued = await _started(combiner, leader, _put(1), _put(2), _put(3))
        await asyncio.sleep(0)
        queued[0].cancel()  # while queued: it is never sent
        first.cancel()  # the lone call in flight: nobody else waits for it, so it is cancelled
        await until(lambda: leader.calls[0].cancelled(), "the abandoned call to be cancelled")
        await until(lambda: len(leader.calls) == 2, "the next call")
        combined = leader.calls[1]
        assert [c.job.id for c in combined.request.calls] == ["j2", "j3"]
        queued[1].cancel()  # in flight with another member: the call goes on for it
        await until(queued[1].done, "the cancelled member to have left its call")
        assert not combined.done()
        combined.answer(pb.PutJobEachResponse(outcomes=[_ok(c) for c in combined.request.calls], node="n0"))
        assert (await queued[2]).job.id == "j3"
        for t in (first, queued[0], queued[1]):
            assert t.cancelled()
        await until(lambda: combiner.lane_state(leader, MD) is LaneState.IDLE, "the lane to be idle")

    asyncio.run(scenario())


async def _two_behind_a_lone_call(combiner: PutJobCombiner, leader: _Leader) -> list[asyncio.Future]:
    """A lone call sent and answered, and two calls that queued behind it sent together: their tasks."""
    [first] = await _started(combiner, leader, _put(0))
    await until(lambda: len(leader.calls) == 1, "the first call")
    rest = await _started(combiner, leader, _put(1), _put(2))
    await asyncio.sleep(0)
    leader.calls[0].answer(pb.PutJobResponse(job=pb.Job(id="j0")))
    await first
    await until(lambda: len(leader.calls) == 2, "the combined call")
    return rest


@pytest.mark.parametrize(
    "code, moved",
    [(grpc.StatusCode.UNAVAILABLE, True), (grpc.StatusCode.DEADLINE_EXCEEDED, False)],
)
def test_a_combined_call_that_fails_fails_each_member_as_its_own_call_would(code, moved):
    async def scenario():
        combiner, leader = PutJobCombiner(), _Leader()
        rest = await _two_behind_a_lone_call(combiner, leader)
        retry = ((NODE_HEADER, "n0"), (RETRY_HEADER, "1")) if moved else ()
        leader.calls[1].fail(code, "gone", retry)
        errors = []
        for t in rest:
            with pytest.raises(grpc.RpcError) as e:
                await t
            errors.append(e.value)
        assert all(e.code() is code and leader_moved(e) is moved for e in errors)
        assert errors[0] is not errors[1], "each member raises its own error"

    asyncio.run(scenario())


def test_a_combined_call_refused_as_a_whole_is_sent_again_as_each_members_own():
    async def scenario():
        combiner, leader = PutJobCombiner(), _Leader()
        rest = await _two_behind_a_lone_call(combiner, leader)
        leader.calls[1].fail(grpc.StatusCode.UNIMPLEMENTED, "an older leader")
        await until(lambda: len(leader.calls) == 4, "each member's own PutJob")
        assert {c.method for c in leader.calls[2:]} == {"PutJob"}
        leader.calls[2].answer(pb.PutJobResponse(job=leader.calls[2].request.job))
        leader.calls[3].fail(grpc.StatusCode.PERMISSION_DENIED, "needs role write")
        answers = await asyncio.gather(*rest, return_exceptions=True)
        assert {c.request.job.id for c in leader.calls[2:]} == {"j1", "j2"}
        ok = [a for a in answers if isinstance(a, pb.PutJobResponse)]
        denied = [a for a in answers if isinstance(a, grpc.RpcError)]
        assert len(ok) == 1 and len(denied) == 1 and denied[0].code() is grpc.StatusCode.PERMISSION_DENIED

    asyncio.run(scenario())


def test_closing_fails_the_calls_in_flight_and_queued_with_cancelled():
    async def scenario():
        combiner, leader = PutJobCombiner(), _Leader()
        tasks = await _started(combiner, leader, _put(0), _put(1))
        await until(lambda: len(leader.calls) == 1, "the first call")
        combiner.close()
        for t in tasks:
            with pytest.raises(grpc.RpcError) as e:
                await t
            assert e.value.code() is grpc.StatusCode.CANCELLED
        assert combiner.lane_state(leader, MD) is LaneState.IDLE

    asyncio.run(scenario())
