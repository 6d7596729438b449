"""The executor gate (leader/exec_gate.py): slots, who waits, in what order, quotas, hand-backs; and its flags."""

from __future__ import annotations

import argparse

import pytest

from shardcron.cli.flags import add_node_flags, node_config_from_args
from shardcron.errors import ConfigError
from shardcron.leader.exec_gate import ExecGate, FifoQueue
from shardcron.rules.namespace_settings import NamespaceSettings
from shardcron.rules.quotas import Quota


def drain(gate: ExecGate, now: float = 0.0) -> list[str]:
    """Serve every waiting start the way the scheduler does when executions keep ending: each served
    start takes the slot and gives it straight back (as a noop does), until nothing more may go."""
    out = []
    while (served := gate.next(now)) is not None:
        out.append(served.item)
        gate.leave(served.namespace)
    return out


def test_open_until_every_slot_is_held():
    gate = ExecGate(2)
    assert gate.open()
    assert gate.enter("a", "a1", 0, holds=True) and gate.enter("a", "a2", 0, holds=True)
    assert not gate.open() and gate.busy == 2
    assert not gate.enter("b", "b1", 0, holds=False), "a noop waits when no slot is free"
    assert gate.waiting == 1 and gate.waiting_by_namespace() == {"b": 1}
    gate.leave("a")
    served = gate.next(1.5)
    assert (served.namespace, served.item, served.waited_s) == ("b", "b1", 1.5)
    assert gate.busy == 2 and gate.running("b") == 1 and gate.running("a") == 1


def test_a_noop_that_goes_at_once_takes_no_slot():
    gate = ExecGate(1)
    assert gate.enter("a", "a1", 0, holds=False)
    assert gate.busy == 0 and gate.open()


def test_while_anything_waits_every_start_queues_even_with_a_slot_free():
    gate = ExecGate(1)
    gate.enter("a", "a1", 0, holds=True)
    gate.enter("a", "a2", 0, holds=True)  # waits
    gate.leave("a")  # a slot is free, a2 not served yet
    assert not gate.open()
    assert not gate.enter("b", "b1", 0, holds=False), "b1 must not overtake a2"
    assert drain(gate) == ["a2", "b1"]


# Order of service: A floods first (6 waiting), then B arrives with 3; one slot, each served start ends
# before the next. Fair: B's starts interleave by weight. First-come: B waits behind A's backlog.
@pytest.mark.parametrize(
    "fair, weights, order",
    [
        pytest.param(True, {}, ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4", "a5"], id="fair-equal-weights"),
        pytest.param(True, {"b": 3.0}, ["b0", "b1", "a0", "b2", "a1", "a2", "a3", "a4", "a5"], id="fair-b-weight-3"),
        pytest.param(False, {"b": 3.0}, ["a0", "a1", "a2", "a3", "a4", "a5", "b0", "b1", "b2"], id="first-come"),
    ],
)
def test_order_of_service(fair, weights, order):
    gate = ExecGate(1, fair=fair)
    gate.set_settings({ns: NamespaceSettings(weight=w) for ns, w in weights.items()})
    gate.enter("x", "running", 0, holds=True)
    for i in range(6):
        gate.enter("a", f"a{i}", 0, holds=True)
    for i in range(3):
        gate.enter("b", f"b{i}", 0, holds=False)
    gate.leave("x")
    assert drain(gate) == order


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "first-come"])
def test_max_running_keeps_a_start_waiting_in_its_place(fair):
    gate = ExecGate(4, fair=fair)
    gate.set_settings({"a": NamespaceSettings(quota=Quota(max_running=1))})
    assert gate.limited and not gate.open()
    assert gate.enter("a", "a1", 0, holds=True)
    assert not gate.enter("a", "a2", 0, holds=True), "over a's max_running with slots free"
    assert not gate.enter("b", "b1", 0, holds=True), "b queues behind what waits"
    assert gate.next(0).item == "b1"  # a2 may not run yet; b1 takes a free slot
    assert gate.next(0) is None
    gate.leave("a")  # a1 ends
    assert gate.next(0).item == "a2"
    assert gate.running("a") == 1 and gate.running("b") == 1 and gate.busy == 2


def test_raised_max_running_lets_waiting_starts_go():
    gate = ExecGate(4)
    gate.set_settings({"a": NamespaceSettings(quota=Quota(max_running=0))})
    assert not gate.enter("a", "a1", 0, holds=True)
    assert gate.next(0) is None
    gate.set_settings({})
    assert not gate.limited and gate.next(0).item == "a1"


def test_weights_return_to_the_default_when_a_namespace_loses_its_settings():
    gate = ExecGate(1)
    gate.set_settings({"b": NamespaceSettings(weight=3.0)})
    gate.set_settings({})
    gate.enter("x", "running", 0, holds=True)
    for i in range(2):
        gate.enter("a", f"a{i}", 0, holds=True)
        gate.enter("b", f"b{i}", 0, holds=True)
    gate.leave("x")
    assert drain(gate) == ["a0", "b0", "a1", "b1"]


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "first-come"])
def test_remove_where_hands_back_a_shards_starts(fair):
    gate = ExecGate(1, fair=fair)
    gate.enter("x", (9, "running"), 0, holds=True)
    for item in [(1, "a"), (2, "b"), (1, "c")]:
        gate.enter("ns" + item[1], item, 0, holds=True)
    removed = gate.remove_where(lambda ns, item: item[0] == 1)
    assert sorted(i for _, i in removed) == [(1, "a"), (1, "c")]
    assert gate.waiting == 1
    gate.leave("x")
    assert drain(gate) == [(2, "b")] and gate.waiting == 0 and gate.open()


def test_fifo_queue_serves_the_oldest_eligible_head():
    q = FifoQueue()
    for ns, item in [("a", 1), ("b", 2), ("a", 3), ("c", 4)]:
        q.enqueue(ns, item, 0)
    assert q.pop(0, lambda ns: ns != "a").item == 2
    assert [q.pop(0).item for _ in range(3)] == [1, 3, 4]
    assert q.pop(0) is None and len(q) == 0


@pytest.mark.parametrize("slots", [0, -1, 1.5, True, "8"])
def test_bad_slot_counts_are_refused(slots):
    with pytest.raises(ValueError, match="executor slots"):
        ExecGate(slots)


# -- the flags ------------------------------------------------------------------------------------


def settings(*argv: str):
    p = argparse.ArgumentParser()
    add_node_flags(p)
    return node_config_from_args(p.parse_args(list(argv)))


def test_flag_defaults():
    cfg = settings()
    assert (cfg.executor_slots, cfg.fair_queuing) == (1000, True)


def test_flags_and_environment(monkeypatch):
    assert settings("--executor-slots", "16", "--fair-queuing", "off").executor_slots == 16
    assert settings("--fair-queuing", "off").fair_queuing is False
    monkeypatch.setenv("SHARDCRON_FAIR_QUEUING", "OFF")
    monkeypatch.setenv("SHARDCRON_EXECUTOR_SLOTS", "3")
    cfg = settings()
    assert (cfg.executor_slots, cfg.fair_queuing) == (3, False)


@pytest.mark.parametrize(
    "argv, env, says",
    [
        (["--executor-slots", "0"], {}, "--executor-slots: must be at least 1, got 0"),
        (["--executor-slots", "many"], {}, "--executor-slots: expected a number, got 'many'"),
        ([], {"SHARDCRON_FAIR_QUEUING": "maybe"}, "--fair-queuing: expected 'on' or 'off', got 'maybe'"),
    ],
)
def test_bad_flags_are_named(argv, env, says, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError) as err:
        settings(*argv)
    assert str(err.value) == says


# -- headroom: a few slots kept for namespaces below their share -----------------------------------


def flood(gate: ExecGate, namespace: str, n: int, now: float = 0.0) -> int:
    """``n`` starts of ``namespace`` that hold a slot each; how many went at once."""
    return sum(gate.enter(namespace, f"{namespace}{i}", now, holds=True) for i in range(n))


@pytest.mark.parametrize(
    "slots, headroom",
    [(1, 1), (19, 1), (20, 1), (40, 2), (100, 5), (1000, 50)],
)
def test_headroom_is_five_percent_of_the_slots_and_at_least_one(slots, headroom):
    assert ExecGate(slots).headroom == headroom
    assert ExecGate(slots, fair=False).headroom == 0


def test_alone_a_namespace_takes_every_slot():
    gate = ExecGate(100)
    assert flood(gate, "a", 120) == 100 and gate.waiting == 20


@pytest.mark.parametrize("fair, flood_took, calm_at_once", [(True, 95, True), (False, 100, False)])
def test_a_flood_leaves_the_headroom_to_an_active_namespace_below_its_share(fair, flood_took, calm_at_once):
    gate = ExecGate(100, fair=fair)
    gate.enter("calm", "c0", 0.0, holds=False)  # calm is active: it started a noop a moment ago
    assert flood(gate, "flood", 200, now=0.5) == flood_took
    # With a backlog waiting, a new start queues (nothing overtakes the queue), then the scheduler serves:
    assert not gate.enter("calm", "c1", 0.6, holds=True)
    served = gate.next(0.6)
    assert (served is not None and served.item == "c1") is calm_at_once
    if fair:  # the flood's head is passed over, keeping its place and its tag
        assert (
            gate.running("calm") == 1 and gate.running("flood") == 95 and gate.waiting_by_namespace() == {"flood": 105}
        )


def test_the_headroom_goes_back_to_the_flood_once_the_calm_namespace_is_idle():
    gate = ExecGate(100)
    gate.enter("calm", "c0", 0.0, holds=False)
    assert flood(gate, "flood", 200, now=0.5) == 95
    assert gate.next(1.0) is None, "calm was active a second ago: the headroom stays free"
    served = gate.next(0.5 + 2.0 + 0.1)  # ACTIVE_S after calm's last start, with nothing of calm running
    assert served is not None and served.namespace == "flood" and gate.busy == 96


def test_each_active_namespace_may_grow_to_its_weighted_share_into_the_headroom():
    gate = ExecGate(100)
    gate.set_settings({"heavy": NamespaceSettings(weight=3.0)})
    gate.enter("light", "l0", 0.0, holds=False)
    assert flood(gate, "heavy", 95) == 95  # each taken while at least the headroom (5) stays free
    assert not gate.enter("heavy", "h96", 0.1, holds=True), "heavy holds more than its share (75): not the last 5"
    assert gate.enter("light", "l1", 0.1, holds=True) is False  # a backlog waits: it queues, then is served
    assert gate.next(0.1).item == "l1"
