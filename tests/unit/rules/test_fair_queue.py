"""The fair queue: shares under a flood, weights, starvation freedom, FIFO per namespace, waits, nothing lost."""

import math
from collections import Counter, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.rules.fair_queue import FairQueue, Served


def drain(q: FairQueue, now_s: float = 0.0) -> list[Served]:
    out = []
    while (s := q.pop(now_s)) is not None:
        out.append(s)
    return out


def test_empty_queue_pops_nothing():
    q = FairQueue()
    assert q.pop(0.0) is None and len(q) == 0


@pytest.mark.parametrize("weights", [{}, {"a": 2.0}, {"a": 0.01, "b": 5.0}])
def test_fifo_within_a_namespace(weights):
    q = FairQueue(weights)
    for i in range(300):
        q.enqueue("abc"[i % 3], i, 0.0)
    served = drain(q)
    for ns in "abc":
        items = [s.item for s in served if s.namespace == ns]
        assert items == sorted(items) and len(items) == 100


def test_a_flood_does_not_delay_a_namespace_within_its_share():
    # A enqueues 10,000 first, then B 100, at equal weight: B gets every other start, not the 10,001st.
    q = FairQueue()
    for i in range(10_000):
        q.enqueue("A", i, 0.0)
    for i in range(100):
        q.enqueue("B", i, 0.0)
    served = drain(q)
    assert len(served) == 10_100 and len(q) == 0
    b_positions = [n for n, s in enumerate(served, start=1) if s.namespace == "B"]
    assert all(pos <= 2 * k for k, pos in enumerate(b_positions, start=1)), b_positions[:5]
    assert b_positions[-1] <= 200
    assert [s.item for s in served if s.namespace == "A"] == list(range(10_000))  # still owed, all served


@pytest.mark.parametrize(
    "weights",
    [
        {"A": 1, "B": 1},
        {"A": 2, "B": 1},
        {"A": 3, "B": 1},
        {"A": 1, "B": 4},
        {"A": 0.5, "B": 1.5},
        {"A": 1, "B": 2, "C": 3},
        {"A": 0.1, "B": 0.1, "C": 10},
    ],
    ids=lambda w: ":".join(f"{v:g}" for v in w.values()),
)
def test_shares_follow_the_weights_while_all_wait(weights):
    q = FairQueue(weights)
    for ns in weights:  # every namespace floods, one after the other
        for i in range(3_000):
            q.enqueue(ns, i, 0.0)
    total = sum(weights.values())
    counts: Counter = Counter()
    for n in range(1, 3_001):  # while every namespace still has items (3,000 pops < 3,000 of any)
        counts[q.pop(0.0).namespace] += 1
        for ns, w in weights.items():
            assert abs(counts[ns] - n * w / total) <= 2, (n, dict(counts))


def test_the_weight_of_a_namespace_not_named_is_the_default():
    q = FairQueue({"heavy": 3}, default_weight=1)
    assert q.weight("heavy") == 3 and q.weight("other") == 1


def pops_until(q: FairQueue, namespace: str) -> int:
    """How many pops it takes to serve ``namespace``'s next item (fails if the queue runs dry first)."""
    for n in range(1, len(q) + 1):
        if q.pop(0.0).namespace == namespace:
            return n
    raise AssertionError(f"{namespace} was never served")


@pytest.mark.parametrize("flooders, tiny_weight", [(1, 0.001), (10, 0.01), (3, 0.0005)])
def test_no_starvation_with_a_tiny_weight(flooders, tiny_weight):
    q = FairQueue({"tiny": tiny_weight})
    for f in range(flooders):
        for i in range(20_000):
            q.enqueue(f"flood-{f}", i, 0.0)
    q.enqueue("tiny", "first", 0.0)
    q.enqueue("tiny", "second", 0.0)
    bound = flooders * (1 / tiny_weight + 1)  # the docstring's bound: sum of (w_i / w + 1)
    assert bound < len(q) / 2  # the floods outlast the bound many times over: first-come would fail
    assert pops_until(q, "tiny") <= bound + 1
    assert pops_until(q, "tiny") <= bound + 1


def test_a_late_namespace_is_served_at_once_and_the_flooder_banks_nothing():
    q = FairQueue()
    for i in range(10_000):
        q.enqueue("A", i, 0.0)
    for _ in range(5_000):
        q.pop(0.0)
    for i in range(10):
        q.enqueue("B", i, 1.0)
    next_20 = [q.pop(1.0).namespace for _ in range(20)]
    assert next_20.count("B") == 10


def test_an_idle_namespace_banks_no_credit():
    # B ran once long ago, then was idle while A ran 5,000: on return it gets its share, not a monopoly.
    q = FairQueue()
    q.enqueue("B", "old", 0.0)
    for i in range(10_000):
        q.enqueue("A", i, 0.0)
    drained = [q.pop(0.0).namespace for _ in range(5_000)]
    assert drained.count("B") == 1
    for i in range(100):
        q.enqueue("B", i, 2.0)
    next_20 = Counter(q.pop(2.0).namespace for _ in range(20))
    assert next_20 == {"A": 10, "B": 10}


def test_each_item_reports_its_wait():
    q = FairQueue()
    q.enqueue("a", "x", 10.0)
    q.enqueue("b", "y", 10.5)
    assert q.pop(12.0) == Served("a", "x", 10.0, 2.0)
    assert q.pop(13.0) == Served("b", "y", 10.5, 2.5)
    q.enqueue("a", "z", 20.0)
    assert q.pop(19.0).waited_s == 0.0  # a clock read on another thread may lag: never a negative wait


def test_an_ineligible_namespace_keeps_its_place():
    # A is at its max_running quota: B runs meanwhile; A's items are not lost and go first once A may run.
    q = FairQueue()
    for i in range(3):
        q.enqueue("A", f"a{i}", 0.0)
        q.enqueue("B", f"b{i}", 0.0)
    only_b = lambda ns: ns == "B"  # noqa: E731
    assert [q.pop(1.0, only_b).item for _ in range(3)] == ["b0", "b1", "b2"]
    assert q.pop(1.0, only_b) is None and len(q) == 3
    assert [s.item for s in drain(q, 2.0)] == ["a0", "a1", "a2"]


def test_remove_where_hands_items_back_and_the_rest_keep_order():
    q = FairQueue()
    for i in range(6):
        q.enqueue("A", (i % 2, i), 0.0)  # (shard, n)
        q.enqueue("B", (1, i), 0.0)
    removed = q.remove_where(lambda ns, item: item[0] == 1)  # shard 1 was lost
    assert removed == [("A", (1, 1)), ("A", (1, 3)), ("A", (1, 5))] + [("B", (1, i)) for i in range(6)]
    assert len(q) == 3 and q.waiting("B") == 0 and list(q.namespaces()) == ["A"]
    assert [s.item for s in drain(q)] == [(0, 0), (0, 2), (0, 4)]


def test_an_emptied_queue_starts_its_virtual_time_again():
    q = FairQueue()
    for i in range(1_000):
        q.enqueue("A", i, 0.0)
    drain(q)
    q.enqueue("A", "x", 0.0)
    q.enqueue("B", "y", 0.0)
    assert [s.namespace for s in drain(q)] == ["A", "B"]
    assert q._virtual == 0.0  # tags stay small numbers however long the node runs


def test_a_new_weight_applies_from_the_next_start():
    q = FairQueue()
    for i in range(1_000):
        q.enqueue("A", i, 0.0)
        q.enqueue("B", i, 0.0)
    assert Counter(q.pop(0.0).namespace for _ in range(100)) == {"A": 50, "B": 50}
    q.set_weight("A", 4)
    assert Counter(q.pop(0.0).namespace for _ in range(500)) == pytest.approx({"A": 400, "B": 100}, abs=2)


@pytest.mark.parametrize("weight", [0, -1, math.nan, math.inf, True, "2"])
def test_bad_weights_are_refused_naming_the_namespace(weight):
    with pytest.raises(ValueError, match="the weight of namespace 'team-a' must be a number above 0"):
        FairQueue({"team-a": weight})


def _simulate(pop, enqueue, flood_per_tick: int, ticks: int = 200) -> float:
    """Each tick: A offers ``flood_per_tick`` starts, B 3, and 10 executors take 10 starts.
    Returns B's longest wait in ticks."""
    worst_b = 0.0
    for t in range(ticks):
        for i in range(flood_per_tick):
            enqueue("A", i, float(t))
        for i in range(3):
            enqueue("B", i, float(t))
        for _ in range(10):
            s = pop(float(t))
            if s is None:
                break
            if s.namespace == "B":
                worst_b = max(worst_b, s.waited_s)
    return worst_b


class FirstCome:
    """The baseline: one FIFO line for every namespace."""

    def __init__(self):
        self.line: deque = deque()

    def enqueue(self, namespace, item, now_s):
        self.line.append((namespace, item, now_s))

    def pop(self, now_s):
        if not self.line:
            return None
        namespace, item, at = self.line.popleft()
        return Served(namespace, item, at, now_s - at)


@pytest.mark.parametrize(
    "make, flood, worst_b_wait",
    [
        (FairQueue, 0, 0.0),
        (FirstCome, 0, 0.0),  # A idle: B never waits
        (FairQueue, 50, 0.0),  # A offers 5x the capacity: B, within its share, still never waits
    ],
)
def test_a_namespace_within_its_share_keeps_its_lateness_while_another_floods(make, flood, worst_b_wait):
    q = make()
    assert _simulate(q.pop, q.enqueue, flood) == worst_b_wait


def test_first_come_shows_the_damage_the_fair_queue_prevents():
    q = FirstCome()
    assert _simulate(q.pop, q.enqueue, 50) > 100  # B waits behind A's growing backlog


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.tuples(st.just("put"), st.sampled_from("abcd")), st.just(("pop", ""))), max_size=300),
    st.dictionaries(st.sampled_from("abcd"), st.floats(0.01, 100)),
)
def test_every_item_leaves_exactly_once_in_namespace_order(ops, weights):
    q = FairQueue(weights)
    seq = 0
    put: dict[str, list[int]] = {ns: [] for ns in "abcd"}
    got: dict[str, list[int]] = {ns: [] for ns in "abcd"}
    for op, ns in ops:
        if op == "put":
            q.enqueue(ns, seq, 0.0)
            put[ns].append(seq)
            seq += 1
        elif (s := q.pop(0.0)) is not None:
            got[s.namespace].append(s.item)
    for s in drain(q):
        got[s.namespace].append(s.item)
    assert got == put and len(q) == 0
