"""Ticks and tick events between protobuf and ``model.Tick``."""

from __future__ import annotations

from shardcron.model import Tick, TickStatus
from shardcron.wire.tick_convert import tick_event_to_proto, tick_from_proto, tick_to_proto


def test_ticks_round_trip_with_their_optional_fields():
    full = Tick(
        "a",
        1000,
        3,
        17,
        "n1",
        TickStatus.SUCCEEDED,
        attempt=2,
        manual=True,
        claimed_at_ms=990,
        started_at_ms=1000,
        finished_at_ms=1500,
        exit_code=0,
        http_status=None,
        output="ok",
        error=None,
    )
    assert tick_from_proto(tick_to_proto(full)) == full
    bare = Tick("a", 1000, 0, 1, "n0", TickStatus.CLAIMED)
    assert tick_from_proto(tick_to_proto(bare)) == bare


def test_a_tick_event_becomes_a_tick_with_the_dropped_count():
    ev = Tick("a", 1000, 1, 5, "n0", TickStatus.FAILED, 1, started_at_ms=1000, finished_at_ms=1200, error="boom")
    p = tick_event_to_proto(ev, dropped=3)
    assert p.dropped == 3
    t = tick_from_proto(p.tick)
    assert (t.status, t.error, t.finished_at_ms, t.output) == (TickStatus.FAILED, "boom", 1200, None)
