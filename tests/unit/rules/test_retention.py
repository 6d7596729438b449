"""Retention planning: parsing, the horizon, what may be deleted, batch sizing, and the audit's verdict."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.model import TickStatus
from shardcron.rules.retention import (
    MAX_DELETE_BATCH,
    MIN_DELETE_BATCH,
    PruneState,
    advance_horizon,
    audit_range_state,
    history_cutoff_ms,
    is_pruned,
    may_delete,
    next_batch_size,
    parse_retention_ms,
    pause_after_batch_ms,
    retention_horizon_ms,
)
from shardcron.spec.retention import RetentionError

H = 3_600_000
D = 24 * H
NOW = 1_767_225_600_000  # 2026-01-01T00:00Z


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("30d", 30 * D, id="days"),
        pytest.param("12h", 12 * H, id="hours"),
        pytest.param("1d12h", 36 * H, id="compound"),
        pytest.param("90s", 90_000, id="seconds"),
        pytest.param(3600, H, id="number-is-seconds"),
        pytest.param(None, None, id="absent-keeps-everything"),
        pytest.param("none", None, id="none"),
        pytest.param("Forever", None, id="forever"),
        pytest.param("", None, id="empty"),
    ],
)
def test_parse_retention(text, expected):
    assert parse_retention_ms(text) == expected


@pytest.mark.parametrize(
    "text, shown",
    [
        pytest.param("30 days", "'30 days'", id="words"),
        pytest.param("0", "at least 1s", id="zero-deletes-everything"),
        pytest.param("500ms", "at least 1s", id="below-a-second"),
        pytest.param(-5, "at least 1s", id="negative"),
        pytest.param("4000d", "ten years", id="past-the-limit"),
        pytest.param(True, "True", id="bool"),
    ],
)
def test_parse_retention_refuses_naming_the_flag(text, shown):
    with pytest.raises(RetentionError) as err:
        parse_retention_ms(text)
    assert isinstance(err.value, ValueError)
    assert err.value.field == "--tick-retention" and shown in str(err.value)


@pytest.mark.parametrize(
    "retention, window, expected",
    [
        pytest.param(30 * D, 0, NOW - 30 * D, id="plain"),
        pytest.param(30 * D, H, NOW - 30 * D, id="window-shorter"),
        pytest.param(30 * 60_000, H, NOW - H, id="catchup-window-holds-the-horizon-back"),
        pytest.param(None, H, None, id="keep-everything"),
    ],
)
def test_retention_horizon(retention, window, expected):
    assert retention_horizon_ms(NOW, retention, window) == expected


@pytest.mark.parametrize(
    "recorded, proposed, expected",
    [
        pytest.param(None, 100, 100, id="first"),
        pytest.param(100, 200, 200, id="forward"),
        pytest.param(200, 100, 200, id="a-lagging-clock-does-not-pull-it-back"),
        pytest.param(200, None, 200, id="retention-switched-off-keeps-the-record"),
        pytest.param(None, None, None, id="never"),
    ],
)
def test_advance_horizon(recorded, proposed, expected):
    assert advance_horizon(recorded, proposed) == expected


@pytest.mark.parametrize(
    "slots, limit, expected",
    [
        pytest.param([10, 20, 30, 40, 50], 3, 30, id="keep-newest-three"),
        pytest.param([50, 10, 40, 20, 30], 3, 30, id="any-order"),
        pytest.param([10, 20, 30], 3, 10, id="exactly-the-limit"),
        pytest.param([10, 20], 3, None, id="fewer-than-the-limit"),
        pytest.param([10, 20, 30], 1, 30, id="keep-one"),
        pytest.param([10, 20, 30], None, None, id="no-limit"),
        pytest.param([], 5, None, id="no-rows"),
    ],
)
def test_history_cutoff(slots, limit, expected):
    assert history_cutoff_ms(slots, limit) == expected


@settings(max_examples=100, deadline=None)
@given(slots=st.sets(st.integers(0, 10**6), max_size=40), limit=st.integers(1, 50))
def test_history_cutoff_keeps_exactly_the_newest(slots, limit):
    cutoff = history_cutoff_ms(list(slots), limit)
    kept = slots if cutoff is None else {s for s in slots if s >= cutoff}
    assert kept == set(sorted(slots, reverse=True)[:limit])


@pytest.mark.parametrize(
    "slot, status, newest, horizon, expected",
    [
        pytest.param(99, TickStatus.SUCCEEDED, False, 100, True, id="old-finished"),
        pytest.param(99, TickStatus.FAILED, False, 100, True, id="old-failed"),
        pytest.param(99, TickStatus.SKIPPED, False, 100, True, id="old-skipped"),
        pytest.param(100, TickStatus.SUCCEEDED, False, 100, False, id="at-the-horizon-kept"),
        pytest.param(99, TickStatus.RUNNING, False, 100, False, id="running-kept"),
        pytest.param(99, TickStatus.CLAIMED, False, 100, False, id="claimed-kept"),
        pytest.param(99, TickStatus.SUCCEEDED, True, 100, False, id="newest-of-job-kept"),
        pytest.param(99, TickStatus.SUCCEEDED, False, None, False, id="no-horizon"),
    ],
)
def test_may_delete(slot, status, newest, horizon, expected):
    assert may_delete(slot, status, newest, horizon) is expected


@pytest.mark.parametrize(
    "size, elapsed, expected",
    [
        pytest.param(1_000, 50, 1_000, id="on-target"),
        pytest.param(1_000, 25, 2_000, id="fast-grows"),
        pytest.param(1_000, 1, 2_000, id="very-fast-at-most-doubles"),
        pytest.param(1_000, 0, 2_000, id="instant"),
        pytest.param(1_000, 100, 500, id="slow-shrinks"),
        pytest.param(1_000, 5_000, 250, id="very-slow-at-most-quarters"),
        pytest.param(8_000, 10, MAX_DELETE_BATCH, id="capped"),
        pytest.param(150, 1_000, MIN_DELETE_BATCH, id="floored"),
    ],
)
def test_next_batch_size(size, elapsed, expected):
    assert next_batch_size(size, elapsed) == expected


@pytest.mark.parametrize("elapsed, duty, expected", [(50, 0.2, 200), (50, 1.0, 0), (0, 0.2, 0), (10, 0.5, 10)])
def test_pause_after_batch(elapsed, duty, expected):
    assert pause_after_batch_ms(elapsed, duty) == expected


@pytest.mark.parametrize("duty", [0, -0.1, 1.5])
def test_pause_refuses_bad_duty(duty):
    with pytest.raises(ValueError):
        pause_after_batch_ms(10, duty)


@pytest.mark.parametrize(
    "start, end, shard, job, expected",
    [
        pytest.param(100, 200, None, None, PruneState.INTACT, id="never-pruned"),
        pytest.param(100, 200, 100, None, PruneState.INTACT, id="horizon-at-start"),
        pytest.param(100, 200, 50, None, PruneState.INTACT, id="horizon-before"),
        pytest.param(100, 200, 101, None, PruneState.PARTIALLY_PRUNED, id="horizon-inside"),
        pytest.param(100, 200, 199, None, PruneState.PARTIALLY_PRUNED, id="horizon-at-last-ms"),
        pytest.param(100, 200, 200, None, PruneState.PRUNED, id="horizon-at-end"),
        pytest.param(100, 200, 500, None, PruneState.PRUNED, id="horizon-after"),
        pytest.param(100, 200, None, 150, PruneState.PARTIALLY_PRUNED, id="history-limit-only"),
        pytest.param(100, 200, 50, 250, PruneState.PRUNED, id="history-limit-later-wins"),
        pytest.param(100, 200, 250, 50, PruneState.PRUNED, id="shard-later-wins"),
    ],
)
def test_audit_range_state(start, end, shard, job, expected):
    assert audit_range_state(start, end, shard, job) is expected


def test_audit_range_must_not_be_empty():
    with pytest.raises(ValueError):
        audit_range_state(200, 200, 100)


@pytest.mark.parametrize(
    "slot, shard, job, expected",
    [
        (99, 100, None, True),
        (100, 100, None, False),
        (99, None, None, False),
        (99, None, 100, True),
        (150, 100, 200, True),
        (250, 100, 200, False),
    ],
)
def test_is_pruned(slot, shard, job, expected):
    assert is_pruned(slot, shard, job) is expected


@pytest.mark.parametrize(
    "retention_ms, every_ms",
    [
        pytest.param(None, 10_000, id="history-limits-only"),
        pytest.param(5_000, 1_000, id="short-floors-at-1s"),
        pytest.param(H, 60_000, id="an-hour-caps-at-1m"),
        pytest.param(5 * 60_000, 30_000, id="a-tenth"),
    ],
)
def test_prune_every(retention_ms, every_ms):
    from shardcron.rules.retention import prune_every_ms

    assert prune_every_ms(retention_ms) == every_ms


@pytest.mark.parametrize(
    "before, window, horizon",
    [
        pytest.param(NOW - D, H, NOW - D, id="older-than-every-window"),
        pytest.param(NOW - 60_000, H, NOW - H, id="held-back-to-the-longest-catch-up-window"),
        pytest.param(NOW, 0, NOW, id="now-with-no-window"),
    ],
)
def test_prune_before(before, window, horizon):
    from shardcron.rules.retention import prune_before_ms

    assert prune_before_ms(before, NOW, window) == horizon


def test_prune_before_refuses_the_future_naming_the_flag():
    from shardcron.rules.retention import prune_before_ms

    with pytest.raises(RetentionError) as err:
        prune_before_ms(NOW + 1, NOW, 0)
    assert err.value.field == "--before" and "future" in str(err.value)


@pytest.mark.parametrize(
    "gap_ms, limit, every_ms",
    [
        pytest.param(1_000, 3, 10_000, id="at-least-10s"),
        pytest.param(1_000, 1_000, 100_000, id="a-tenth-of-the-limit-of-slots"),
        pytest.param(60_000, 100, 600_000, id="every-minute-limit-100"),
        pytest.param(None, 5, 10_000, id="one-off"),
    ],
)
def test_history_prune_every(gap_ms, limit, every_ms):
    from shardcron.rules.retention import history_prune_every_ms

    assert history_prune_every_ms(gap_ms, limit) == every_ms
