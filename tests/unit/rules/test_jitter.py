"""Jitter: pinned vectors (every node and every client must agree) and bounds. (Parsing: spec/test_jitter_field.py.)"""

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.rules.jitter import jitter_key, jitter_offset_ms

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
@given(
    job_id=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),  # no lone surrogates
    slot_ms=st.integers(-(2**62), 2**62),
    jitter_ms=st.integers(0, 315_360_000_000),
)
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
