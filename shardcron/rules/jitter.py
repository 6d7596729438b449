"""Jitter: a deterministic delay per slot, so every leader computes the same start.

``jitter_offset_ms(job_id, slot_ms, jitter_ms)`` is in ``[0, jitter_ms)`` and is

    murmur3_x64_128(key, seed=0), its first 64-bit half (h1) read as unsigned, mod jitter_ms

where ``key = utf8(job_id) + b"\\x00" + slot_ms as 8 bytes, big-endian, signed``.
The NUL keeps ("a", slot) and ("a\\x00...", ...) from meeting; job ids refuse
control characters anyway. h1 is ``mmh3.hash64(key, seed=0, x64arch=True,
signed=False)[0]``, which equals the first 8 bytes of ``mmh3.hash_bytes(key)`` read
little-endian: any murmur3 implementation can reproduce it. 64 bits, not the
32 of ``shard_for``: a jitter may be up to the duration limit (ten years, 3e11 ms),
and the modulo bias of 2**64 over such a range is below one part in 10**7.

The slot's identity stays the unjittered ``slot_ms``: the tick row, the audit and
catch-up all speak of ``slot_ms``; only the start (and the lateness measured
against it) moves to ``slot_ms + offset``.

A jitter as long as the gap between two slots could start slot k+1 before slot k,
so ``spec.schedule.check_jitter`` refuses one that is not shorter than the schedule's shortest gap.
"""

from __future__ import annotations

import mmh3


def jitter_key(job_id: str, slot_ms: int) -> bytes:
    """The exact bytes hashed for ``(job_id, slot_ms)``; see the module docstring."""
    return job_id.encode("utf-8") + b"\x00" + slot_ms.to_bytes(8, "big", signed=True)


def jitter_offset_ms(job_id: str, slot_ms: int, jitter_ms: int) -> int:
    """The delay in ``[0, jitter_ms)`` for this job's slot; 0 when there is no jitter."""
    if jitter_ms < 0:
        raise ValueError(f"jitter_ms must not be negative, got {jitter_ms}")
    if jitter_ms <= 1:  # [0, 1) holds only 0; skip the hash on the common no-jitter path
        return 0
    h1, _h2 = mmh3.hash64(jitter_key(job_id, slot_ms), seed=0, x64arch=True, signed=False)
    return h1 % jitter_ms


__all__ = ["jitter_key", "jitter_offset_ms"]
