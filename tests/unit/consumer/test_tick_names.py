"""The one table of a tick's identity names: each spelling unique, reserved to shardcron, and the one every carrier uses."""

from __future__ import annotations

from shardcron.consumer import TickInfo
from shardcron.consumer.tick_names import FIELD_PREFIX, HEADER_PREFIX, IDEMPOTENCY_KEY_HEADER, TICK_NAMES
from shardcron.executors.identity import tick_environment, tick_fields, tick_headers, tick_values
from shardcron.jobkey import join_key
from shardcron.model import TickContext

CTX = TickContext(
    job_id=join_key("team-a", "job-1"), scheduled_at_ms=1_767_225_605_000, attempt=2, fence=7, shard=3, node_id="node-a"
)


def test_each_spelling_is_unique():
    for spelling in ("plain", "header", "env", "field"):
        names = [getattr(n, spelling).lower() for n in TICK_NAMES.values()]
        assert len(set(names)) == len(names), spelling


def test_each_header_and_field_is_reserved_to_shardcron():
    for n in TICK_NAMES.values():
        assert n.header.startswith(HEADER_PREFIX) or n.header == IDEMPOTENCY_KEY_HEADER
        assert n.field.startswith(FIELD_PREFIX)
        assert n.env.startswith("SHARDCRON_")


def test_every_carrier_spells_each_value_from_the_table():
    values = tick_values(CTX)
    assert "namespace" in values
    assert tick_headers(CTX) == {TICK_NAMES[k].header: v for k, v in values.items()}
    assert tick_fields(CTX) == {TICK_NAMES[k].field: v for k, v in values.items()}
    assert tick_environment(CTX) == {TICK_NAMES[k].env: v for k, v in values.items()}


def test_the_guard_reads_back_what_the_executors_write():
    expected = TickInfo(
        job_id="job-1",
        scheduled_at_ms=1_767_225_605_000,
        attempt=2,
        fence=7,
        shard=3,
        node_id="node-a",
        namespace="team-a",
    )
    assert TickInfo.from_mapping(tick_headers(CTX)) == expected
    assert TickInfo.from_mapping(tick_fields(CTX)) == expected
