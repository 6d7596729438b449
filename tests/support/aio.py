"""Waiting on a condition from inside a coroutine, with a generous deadline (as ``wait_until`` does for threads)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

POLL_S = 0.01


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(POLL_S)
