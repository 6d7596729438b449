"""The API's limits as pure bookkeeping: rates, peers, stream slots, trigger budgets, byte-bounded pages."""

from __future__ import annotations

import grpc
import pytest

from shardcron.api.limits import Rate, StreamSlots, TriggerBudget, parse_rate, peer_host
from shardcron.api.service import bounded_page
from shardcron.api.status import CallFailed
from shardcron.cli.flag_values import parse_bytes
from shardcron.errors import ConfigError
from shardcron.v1 import scheduler_pb2 as pb


@pytest.mark.parametrize(
    "raw, rate",
    [
        ("6/1m", Rate(6, 60_000)),
        ("6/m", Rate(6, 60_000)),
        ("10/s", Rate(10, 1000)),
        (" 100 / 30s ", Rate(100, 30_000)),
        ("1/250ms", Rate(1, 250)),
        ("2/1h", Rate(2, 3_600_000)),
        ("off", None),
        ("0", None),
    ],
)
def test_trigger_rates_parse(raw, rate):
    assert parse_rate(raw, "--trigger-rate") == rate


@pytest.mark.parametrize("raw", ["6", "6/", "/1m", "six/1m", "6/1d", "0/1m", "6/0s", "-1/1m", ""])
def test_a_bad_trigger_rate_names_the_flag(raw):
    with pytest.raises(ValueError) as e:
        parse_rate(raw, "--trigger-rate")
    assert "--trigger-rate" in str(e.value)


@pytest.mark.parametrize(
    "rate, text",
    [(Rate(6, 60_000), "6/m"), (Rate(100, 30_000), "100/30s"), (Rate(1, 250), "1/250ms"), (Rate(2, 7_200_000), "2/2h")],
)
def test_a_rate_reads_back_as_written(rate, text):
    assert str(rate) == text


@pytest.mark.parametrize(
    "peer, host",
    [
        ("ipv4:127.0.0.1:53124", "127.0.0.1"),
        ("ipv6:[::1]:53124", "::1"),
        ("ipv6:[2001:db8::7]:443", "2001:db8::7"),
        ("unix:/tmp/s.sock", "unix:/tmp/s.sock"),
        ("", "unknown"),
        (None, "unknown"),
    ],
)
def test_a_peer_is_its_address_without_the_port(peer, host):
    assert peer_host(peer) == host


def _refused(fn, *args, **kw) -> str:
    with pytest.raises(CallFailed) as e:
        fn(*args, **kw)
    assert e.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    return e.value.details


def test_stream_slots_per_peer_then_per_node():
    slots = StreamSlots(max_streams=3, max_per_peer=2)
    slots.acquire("a", forwarded=False)
    slots.acquire("a", forwarded=False)
    assert "--max-streams-per-peer" in _refused(slots.acquire, "a", forwarded=False)
    slots.acquire("b", forwarded=False)
    assert "--max-streams" in _refused(slots.acquire, "c", forwarded=False)
    slots.release("a")
    slots.acquire("c", forwarded=False)
    assert slots.open == 3


def test_forwarded_streams_count_against_the_node_only():
    slots = StreamSlots(max_streams=3, max_per_peer=1)
    slots.acquire("node", forwarded=True)
    slots.acquire("node", forwarded=True)
    assert "--max-streams-per-peer" in _refused(slots.acquire, "node", forwarded=False)
    slots.acquire("node", forwarded=True)
    assert "its --max-streams;" in _refused(slots.acquire, "node", forwarded=True)
    for _ in range(3):
        slots.release("node")
    assert slots.open == 0
    slots.acquire("node", forwarded=False)  # all given back: the peer starts again from zero


# (ms since the start, job) -> allowed?  Rate 3 per 3 s: a burst of 3, then one a second.
@pytest.mark.parametrize(
    "calls, allowed",
    [
        ([(0, "a")] * 3, [True] * 3),
        ([(0, "a")] * 4, [True, True, True, False]),
        ([(0, "a"), (0, "a"), (0, "a"), (999, "a"), (1000, "a")], [True, True, True, False, True]),
        ([(0, "a"), (0, "a"), (0, "a"), (0, "b")], [True, True, True, True]),  # per job
        ([(0, "a")] * 3 + [(60_000, "a")] * 4, [True] * 3 + [True] * 3 + [False]),  # refills to the burst, no more
    ],
)
def test_trigger_budget_is_a_token_bucket_per_job(calls, allowed):
    budget = TriggerBudget(Rate(3, 3000))
    got = []
    for at, job in calls:
        try:
            budget.take(job, at)
            got.append(True)
        except CallFailed as e:
            assert e.code is grpc.StatusCode.RESOURCE_EXHAUSTED and "--trigger-rate is 3/3s" in e.details
            assert repr(job) in e.details
            got.append(False)
    assert got == allowed


def test_a_refused_trigger_spends_nothing_and_says_when_to_retry():
    budget = TriggerBudget(Rate(1, 10_000))
    budget.take("a", 0)
    assert "allowed in 6.0s" in _refused(budget.take, "a", 4000)
    budget.take("a", 10_000)  # the refusal at 4 s did not push the next one back


def test_no_rate_means_no_limit_and_forgotten_jobs_start_full():
    unlimited = TriggerBudget(None)
    for _ in range(1000):
        unlimited.take("a", 0)
    small = TriggerBudget(Rate(1, 60_000), kept=2)
    small.take("a", 0)
    small.take("b", 0)
    small.take("c", 0)  # "a" is forgotten: the oldest of three
    small.take("a", 0)
    assert "--trigger-rate" in _refused(small.take, "c", 0)


def _job(job_id: str, body_bytes: int) -> pb.Job:
    return pb.Job(id=job_id, http=pb.HttpExecutor(url="http://x", body="x" * body_bytes))


@pytest.mark.parametrize(
    "sizes, size, max_bytes, taken, more",
    [
        ([10, 10, 10], 5, 10_000, 3, False),  # everything fits
        ([10, 10, 10, 10], 3, 10_000, 3, True),  # the count ends the page; one more tells there is a next
        ([400, 400, 400], 5, 1000, 2, True),  # the bytes end it
        ([5000, 10], 5, 1000, 1, True),  # one too big for the budget is still a page of one
        ([5000], 5, 1000, 1, False),
        ([], 5, 1000, 0, False),
    ],
)
def test_pages_are_bounded_by_count_and_by_bytes(sizes, size, max_bytes, taken, more):
    jobs = [_job(f"j{i}", n) for i, n in enumerate(sizes)]
    page, has_more = bounded_page(jobs, size, lambda j: j, max_bytes)
    assert [j.id for j in page] == [f"j{i}" for i in range(taken)]
    assert has_more is more


@pytest.mark.parametrize(
    "raw, value",
    [
        ("8388608", 8 * 1024**2),
        ("8MiB", 8 * 1024**2),
        ("512KiB", 512 * 1024),
        ("1 GiB", 1024**3),
        ("2MB", 2_000_000),
        (65536, 65536),
    ],
)
def test_sizes_parse(raw, value):
    assert parse_bytes("max-request-bytes", raw) == value


@pytest.mark.parametrize("raw", ["8 MiBs", "-1", "1.5MiB", "lots", ""])
def test_a_bad_size_names_the_flag(raw):
    with pytest.raises(ConfigError) as e:
        parse_bytes("max-request-bytes", raw)
    assert "--max-request-bytes" in str(e.value)
