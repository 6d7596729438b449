"""The sharding rule: which shard a job belongs to. Pure, and the same in every language.

``shard = murmur3_x86_32(utf8(job_id), seed=0) as unsigned % shard_count``.
``tests/vectors/shards.json`` holds ids with their shards for other clients to check against.
"""

import mmh3


def shard_for(job_id: str, shard_count: int) -> int:
    if shard_count <= 0:
        raise ValueError(f"shard_count must be positive, got {shard_count}")
    return mmh3.hash(job_id.encode("utf-8"), 0, signed=False) % shard_count
