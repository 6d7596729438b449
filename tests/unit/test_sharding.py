"""The sharding rule against the stored vectors that every client language checks too.

The vectors in tests/vectors/shards.json were computed once with mmh3 and are
never regenerated: if this test fails, the rule changed, and every job would
move to another shard. A pure-Python murmur3 below checks the stored hashes
without mmh3, so the file stays trustworthy even if the library changes.
"""

import json
from pathlib import Path

import mmh3
import pytest

from shardcron.sharding import shard_for

VECTORS_FILE = Path(__file__).resolve().parents[1] / "vectors" / "shards.json"
DOC = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
VECTORS = DOC["vectors"]


def murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """The reference algorithm (Austin Appleby's MurmurHash3_x86_32), written out."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed & mask
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & mask  # noqa: E731
    tail_at = len(data) - len(data) % 4
    for i in range(0, tail_at, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = rotl((k * c1) & mask, 15) * c2 & mask
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & mask
    k = int.from_bytes(data[tail_at:], "little")  # the last 1-3 bytes; 0 when there are none
    h ^= rotl((k * c1) & mask, 15) * c2 & mask
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def test_vectors_file_covers_the_required_cases():
    ids = {v["id"] for v in VECTORS}
    assert len(ids) >= 24
    assert {v["shard_count"] for v in VECTORS} == {16, 64, 256}
    assert len(VECTORS) == 3 * len(ids)
    assert DOC["rule"] == "mmh3.hash(utf8(id), seed=0, signed=False) % shard_count"
    assert any(not i.isascii() for i in ids) and any("/" in i for i in ids) and any(" " in i for i in ids)
    assert max(len(i.encode()) for i in ids) == 256


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: f"{v['id'][:24]!r}-{v['shard_count']}")
def test_shard_for_matches_vector(v):
    assert shard_for(v["id"], v["shard_count"]) == v["shard"]
    assert v["hash"] % v["shard_count"] == v["shard"]


@pytest.mark.parametrize("job_id", sorted({v["id"] for v in VECTORS}))
def test_stored_hash_matches_mmh3_and_reference(job_id):
    stored = next(v["hash"] for v in VECTORS if v["id"] == job_id)
    data = job_id.encode("utf-8")
    assert 0 <= stored < 2**32
    assert mmh3.hash(data, 0, signed=False) == stored
    assert murmur3_x86_32(data) == stored


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"hello", 613153351),  # 0x248bfa47, the widely published murmur3_32("hello", 0)
        (b"", 0),  # seed 0, no input: every step mixes zeros
    ],
)
def test_murmur3_known_values(data, expected):
    assert mmh3.hash(data, 0, signed=False) == expected
    assert murmur3_x86_32(data) == expected


@pytest.mark.parametrize("shard_count", [0, -1, -256])
def test_non_positive_shard_count_is_refused(shard_count):
    with pytest.raises(ValueError):
        shard_for("a", shard_count)


@pytest.mark.parametrize("shard_count", [1, 2, 16, 1024])
def test_shard_is_in_range(shard_count):
    assert all(0 <= shard_for(f"job-{i}", shard_count) < shard_count for i in range(200))
