"""The shards this node leads: each one's ``ShardRun``, by shard, under one lock.

The coordinator, the release threads, the API, the claimer and the dispatcher
all read it; a shard is added when it is acquired and forgotten when its
release has drained it.
"""

from __future__ import annotations

import threading

from shardcron.leader.shard_run import ShardRun


class LedShards:
    def __init__(self) -> None:
        self._runs: dict[int, ShardRun] = {}
        self._lock = threading.Lock()

    def add(self, run: ShardRun) -> None:
        with self._lock:
            self._runs[run.shard] = run

    def shards(self) -> list[int]:
        with self._lock:
            return sorted(self._runs)

    def runs(self) -> list[ShardRun]:
        with self._lock:
            return list(self._runs.values())

    def run_of(self, shard: int) -> ShardRun | None:
        with self._lock:
            return self._runs.get(shard)

    def forget(self, run: ShardRun) -> None:
        with self._lock:
            if self._runs.get(run.shard) is run:  # not a newer leadership of the same shard
                del self._runs[run.shard]

    def current(self, shard: int, fence: int) -> ShardRun | None:
        run = self.run_of(shard)
        return run if run is not None and run.fence == fence and run.active else None
