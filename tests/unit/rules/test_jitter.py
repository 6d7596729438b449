"""Jitter: pinned vectors (every node and every client must agree), bounds, parsing."""

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.errors import InvalidJob
from shardcron.rules.jitter import check_jitter, jitter_key, jitter_offset_ms, parse_jitter

JAN_1_2026 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


# Pinned: changing the hash, the key layout or the reduction moves every jittered
# start in a running cluster, and two versions of a node would disagree.
@pytest.mark.parametrize(
    "job_id, slot_ms, jitter_ms, expected",
    [
        pytest.param("job-a", JAN_1_2026, 30_000, 25_580, id="30s"),
        pytest.param("job-a", JAN_1_2026 + 5_000, 30_000, 27_786, id="next-slot-differs"),
        pytest.param("job-b", JAN_1_2026, 30_000, 23_391, id="other-job-differs"),
        pytest.param("billing/nightly", JAN_1_2026, 3_600_000, 1_889_470, id="1h"),
        pytest.param("é", 0, 1_000, 105, id="utf8-id-epoch-slot"),
        pytest.param("job-a", -5_000, 30_000, 22_223, id="negative-slot"),
        pytest.param("job-a", JAN_1_2026, 315_360_000_000, 233_265_625_580, id="ten-years-needs-64-bits"),
    ],
)
def test_pinned_vectors(job_id, slot_ms, jitter_ms, expected):
    assert jitter_offset_ms(job_id, slot_ms, jitter_ms) == expected


@pytest.mark.parametrize(
    "job_id, slot_ms, key",
    [
        pytest.param("a", 0, b"a\x00" + bytes(8), id="zero-slot"),
        pytest.param("a", 1, b"a\x00\x00\x00\x00\x00\x00\x00\x00\x01", id="big-endian"),
        pytest.param("a", -1, b"a\x00" + b"\xff" * 8, id="signed"),
        pytest.param("é", JAN_1_2026, b"\xc3\xa9\x00" + JAN_1_2026.to_bytes(8, "big"), id="utf8"),
    ],
)
def test_key_bytes_are_the_documented_ones(job_id, slot_ms, key):
    assert jitter_key(job_id, slot_ms) == key


@pytest.mark.parametrize("job_id, slot_ms, jitter_ms", [("job-a", JAN_1_2026, 30_000), ("x", 7, 999_983)])
def test_recipe_reproducible_from_hash_bytes(job_id, slot_ms, jitter_ms):
    # What another language's client does: murmur3 x64_128, first 8 bytes little-endian, mod jitter.
    key = job_id.encode() + b"\x00" + slot_ms.to_bytes(8, "big", signed=True)
    h1 = int.from_bytes(mmh3.hash_bytes(key, 0)[:8], "little")
    assert jitter_offset_ms(job_id, slot_ms, jitter_ms) == h1 % jitter_ms


@pytest.mark.parametrize("jitter_ms", [0, 1])
def test_no_room_no_jitter(jitter_ms):
    assert jitter_offset_ms("job-a", JAN_1_2026, jitter_ms) == 0


def test_negative_jitter_is_refused():
    with pytest.raises(ValueError):
        jitter_offset_ms("job-a", JAN_1_2026, -1)


@settings(max_examples=300, deadline=None)
@given(job_id=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),  # no lone surrogates
       slot_ms=st.integers(-(2**62), 2**62), jitter_ms=st.integers(0, 315_360_000_000))
def test_bounds_and_determinism(job_id, slot_ms, jitter_ms):
    offset = jitter_offset_ms(job_id, slot_ms, jitter_ms)
    assert offset == jitter_offset_ms(job_id, slot_ms, jitter_ms)
    assert 0 <= offset < max(jitter_ms, 1)


def test_offsets_spread_over_the_range():
    # 2,000 slots into 10 buckets of a 10 s jitter: each bucket near 200 (a stuck or
    # biased hash would pile into a few).
    buckets = [0] * 10
    for k in range(2_000):
        buckets[jitter_offset_ms("job-a", JAN_1_2026 + k * 1_000, 10_000) // 1_000] += 1
    assert min(buckets) > 140 and max(buckets) < 260, buckets


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("30s", 30_000, id="seconds"),
        pytest.param("1m30s", 90_000, id="compound"),
        pytest.param("250ms", 250, id="ms"),
        pytest.param(5, 5_000, id="number-is-seconds"),
        pytest.param("0", 0, id="zero"),
        pytest.param(None, 0, id="absent"),
        pytest.param("", 0, id="empty"),
    ],
)
def test_parse_jitter(text, expected):
    assert parse_jitter(text) == expected


@pytest.mark.parametrize("text", ["soon", "30 s", "-5s", True, "11000d"])
def test_parse_jitter_refuses_naming_the_field(text):
    with pytest.raises(InvalidJob) as err:
        parse_jitter(text)
    assert err.value.field == "jitter"


@pytest.mark.parametrize("text", [-5, -0.5])
def test_parse_jitter_refuses_negative_numbers(text):
    with pytest.raises(InvalidJob, match="jitter"):
        parse_jitter(text)


@pytest.mark.parametrize(
    "jitter_ms, gap_ms, ok",
    [
        (0, 1_000, True),
        (999, 1_000, True),
        (1_000, 1_000, False),
        (60_000, 5_000, False),
        (86_400_000, None, True),  # a once job has no gap
    ],
)
def test_check_jitter(jitter_ms, gap_ms, ok):
    if ok:
        assert check_jitter(jitter_ms, gap_ms) == jitter_ms
    else:
        with pytest.raises(InvalidJob, match="shortest gap"):
            check_jitter(jitter_ms, gap_ms)
