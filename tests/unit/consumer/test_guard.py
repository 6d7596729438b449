"""TickInfo.from_mapping: every spelling shardcron sends a tick in, and every way a tick can be broken."""

from __future__ import annotations

import pytest

from shardcron.consumer import NotATick, TickInfo, Verdict, dedupe
from shardcron.errors import ShardcronError
from shardcron.executors.identity import tick_fields, tick_headers
from shardcron.model import TickContext

CTX = TickContext(job_id="job-1", scheduled_at_ms=1_767_225_605_000, attempt=2, fence=7, shard=3, node_id="node-a")
EXPECTED = TickInfo(job_id="job-1", scheduled_at_ms=1_767_225_605_000, attempt=2, fence=7, shard=3, node_id="node-a")


def _bytes(m: dict) -> dict:
    return {k.encode(): v.encode() for k, v in m.items()}


@pytest.mark.parametrize(
    "mapping",
    [
        pytest.param(tick_fields(CTX), id="fields"),
        pytest.param(tick_headers(CTX), id="headers"),
        pytest.param({k.lower(): v for k, v in tick_headers(CTX).items()}, id="headers-lowercase"),
        pytest.param({k.upper(): v for k, v in tick_headers(CTX).items()}, id="headers-uppercase"),
        pytest.param(_bytes(tick_fields(CTX)), id="fields-bytes"),
        pytest.param(_bytes(tick_headers(CTX)), id="headers-bytes"),
        pytest.param({"shardcron": tick_fields(CTX), "other": 1}, id="nested-rq-meta"),
        pytest.param(
            {
                "shardcron": {
                    "job_id": "job-1",
                    "scheduled_at_ms": 1_767_225_605_000,
                    "attempt": 2,
                    "fence": 7,
                    "shard": 3,
                    "node_id": "node-a",
                }
            },
            id="nested-bare-ints",
        ),
        pytest.param({**tick_fields(CTX), "shardcron_fence": 7, "shardcron_attempt": 2}, id="int-values"),
        pytest.param({**tick_headers(CTX), "content-type": "text/plain"}, id="headers-among-others"),
    ],
)
def test_reads_every_spelling(mapping):
    tick = TickInfo.from_mapping(mapping)
    assert tick == EXPECTED
    assert tick.idempotency_key == CTX.idempotency_key == "job-1:1767225605000"


def test_shard_and_node_are_optional():
    m = {k: v for k, v in tick_fields(CTX).items() if k not in ("shardcron_shard", "shardcron_node")}
    assert TickInfo.from_mapping(m) == TickInfo("job-1", 1_767_225_605_000, 2, 7, None, None)


def _without(key):
    m = dict(tick_fields(CTX))
    del m[key]
    return m


def _with(key, value, base=None):
    return {**(base or tick_fields(CTX)), key: value}


@pytest.mark.parametrize(
    ("mapping", "field"),
    [
        (_without("shardcron_job_id"), "shardcron_job_id"),
        (_without("shardcron_scheduled_at_ms"), "shardcron_scheduled_at_ms"),
        (_without("shardcron_attempt"), "shardcron_attempt"),
        (_without("shardcron_fence"), "shardcron_fence"),
        ({}, "shardcron_job_id"),
        (_with("shardcron_job_id", ""), "shardcron_job_id"),
        (_with("shardcron_job_id", 5), "shardcron_job_id"),
        (_with("shardcron_scheduled_at_ms", "soon"), "shardcron_scheduled_at_ms"),
        (_with("shardcron_scheduled_at_ms", "2026-01-01T00:00:05Z"), "shardcron_scheduled_at_ms"),
        (_with("shardcron_attempt", "1.5"), "shardcron_attempt"),
        (_with("shardcron_attempt", -1), "shardcron_attempt"),
        (_with("shardcron_fence", "-3"), "shardcron_fence"),
        (_with("shardcron_fence", True), "shardcron_fence"),
        (_with("shardcron_fence", b"\xff"), "shardcron_fence"),
        (_with("shardcron_fence", None), "shardcron_fence"),
        (_with("shardcron_shard", "three"), "shardcron_shard"),
        (_with("shardcron_node", ""), "shardcron_node"),
        (_with("X-Shardcron-Fence", "x", base=tick_headers(CTX)), "X-Shardcron-Fence".lower()),
        ({k: v for k, v in tick_headers(CTX).items() if k != "X-Shardcron-Attempt"}, "shardcron_attempt"),
        ({"shardcron": _without("shardcron_fence")}, "shardcron_fence"),
    ],
)
def test_missing_or_malformed_field_is_named(mapping, field):
    with pytest.raises(NotATick) as e:
        TickInfo.from_mapping(mapping)
    assert e.value.field == field
    assert field in str(e.value)
    assert isinstance(e.value, ShardcronError)


@pytest.mark.parametrize("value", [None, "job-1:1", ["shardcron_job_id"], 7])
def test_not_a_mapping(value):
    with pytest.raises(NotATick, match="expected a mapping"):
        TickInfo.from_mapping(value)


class _Recording:
    """A deduper that answers from a script and records what it was asked."""

    def __init__(self, *verdicts):
        self.verdicts = list(verdicts)
        self.admitted, self.released = [], []

    def admit(self, tick):
        self.admitted.append(tick)
        return self.verdicts.pop(0)

    def release(self, tick):
        self.released.append(tick)


def test_decorator_pops_the_tick_kwarg_and_refuses_without_calling():
    d = _Recording(Verdict.FIRST, Verdict.DUPLICATE, Verdict.STALE_FENCE)
    calls = []

    @dedupe(d)
    def task(x):
        calls.append(x)
        return x * 2

    assert task(1, tick=tick_fields(CTX)) == 2
    assert task(2, tick=tick_fields(CTX)) is None
    assert task(3, tick=tick_fields(CTX)) is None
    assert calls == [1]
    assert d.admitted == [EXPECTED] * 3


def test_decorator_releases_the_slot_when_the_function_raises():
    d = _Recording(Verdict.FIRST)

    @dedupe(d, tick_kwarg="shardcron")
    def task():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        task(shardcron=tick_headers(CTX))
    assert d.released == [EXPECTED]


def test_decorator_without_a_tick():
    @dedupe(_Recording())
    def guarded():
        return "ran"

    @dedupe(_Recording(), missing="run")
    def lenient():
        return "ran"

    with pytest.raises(NotATick, match="missing='run'"):
        guarded()
    assert lenient() == "ran"
    with pytest.raises(NotATick, match="shardcron_fence"):  # a malformed tick is never run unguarded
        lenient(tick=_without("shardcron_fence"))


async def _async_body(calls, x):
    calls.append(x)
    return x


def test_decorator_on_async_functions():
    import asyncio

    d = _Recording(Verdict.FIRST, Verdict.DUPLICATE)
    calls = []

    @dedupe(d)
    async def task(ctx, x):
        return await _async_body(calls, x)

    assert asyncio.run(task({}, 1, tick=tick_fields(CTX))) == 1
    assert asyncio.run(task({}, 2, tick=tick_fields(CTX))) is None
    assert calls == [1]


def test_decorator_reads_celery_request_headers_of_an_eager_call():
    celery = pytest.importorskip("celery")
    app = celery.Celery("eager-test", set_as_current=False)
    d = _Recording(Verdict.FIRST, Verdict.DUPLICATE)

    @app.task
    @dedupe(d)
    def task(x):
        return x

    # Eager apply puts the headers only in task.request.headers (a worker also sets attributes).
    assert task.apply(args=[1], headers=tick_fields(CTX)).get() == 1
    assert task.apply(args=[2], headers=tick_fields(CTX)).get() is None
    assert d.admitted == [EXPECTED] * 2
    with pytest.raises(NotATick):
        task.apply(args=[3], throw=True)
