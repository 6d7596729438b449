"""Failover between targets: silence moves a call on, a node's own answer is final."""

from __future__ import annotations

import grpc
import pytest

from shardcron.client.channel import NODE_HEADER
from shardcron.client.errors import NotFound, Unavailable
from shardcron.client.targets import Targets, parse_targets
from shardcron.errors import ShardcronError


class Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, *, by_a_node: bool):
        self._code, self._details, self._by_a_node = code, details, by_a_node

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return ((NODE_HEADER, "n1"),) if self._by_a_node else ()


class Stub:
    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = 0

    def GetJob(self, request, timeout):  # noqa: N802 - the generated stub's name
        self.calls += 1
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def targets_with(*outcomes) -> tuple[Targets, list[Stub]]:
    nodes = Targets([f"127.0.0.1:{i + 1}" for i in range(len(outcomes))], timeout_s=5)
    stubs = [Stub(o) for o in outcomes]
    nodes.stub = lambda i: stubs[i]
    return nodes, stubs


def test_a_call_moves_on_when_nothing_answers_and_prefers_the_node_that_did():
    nodes, stubs = targets_with(Failed(grpc.StatusCode.UNAVAILABLE, "refused", by_a_node=False), "answer")
    assert nodes.call("GetJob", None) == "answer"
    assert nodes.preferred == 1
    assert nodes.order() == [1, 0]


def test_a_nodes_own_answer_is_final():
    nodes, stubs = targets_with(Failed(grpc.StatusCode.NOT_FOUND, "no such job", by_a_node=True), "answer")
    with pytest.raises(NotFound, match="no such job"):
        nodes.call("GetJob", None)
    assert stubs[1].calls == 0


def test_a_node_that_answers_unavailable_is_not_silence():
    nodes, stubs = targets_with(Failed(grpc.StatusCode.UNAVAILABLE, "shard 3 has no leader", by_a_node=True), "x")
    with pytest.raises(Unavailable, match="shard 3 has no leader"):
        nodes.call("GetJob", None)
    assert stubs[1].calls == 0


def test_when_no_node_answers_the_error_names_each():
    nodes, _ = targets_with(*(Failed(grpc.StatusCode.UNAVAILABLE, "refused", by_a_node=False),) * 2)
    with pytest.raises(Unavailable) as e:
        nodes.call("GetJob", None)
    assert "127.0.0.1:1 (refused)" in str(e.value) and "127.0.0.1:2 (refused)" in str(e.value)


@pytest.mark.parametrize("timeout_s", [0, -1, True, "5"])
def test_a_time_budget_must_be_seconds_above_zero(timeout_s):
    with pytest.raises(ValueError, match="timeout_s"):
        Targets("127.0.0.1:1", timeout_s=timeout_s)


def test_targets_are_a_list_or_a_comma_separated_string():
    assert parse_targets(" a:1, b:2 ,") == ["a:1", "b:2"]
    assert parse_targets(["a:1", "b:2,c:3"]) == ["a:1", "b:2", "c:3"]
    with pytest.raises(ShardcronError, match="no server address"):
        parse_targets(" , ")
