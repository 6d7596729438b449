"""A short `shardcron bench dispatch` run: well-formed figures, every tick at the broker once, nothing left behind.

No speed is asserted: the rate is far below anything a node should miss, and
the bench's own figures are the place for how fast it goes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

pytestmark = pytest.mark.cluster

REDIS = "redis://127.0.0.1:6379/0"


def test_redis_stream_dispatch_is_counted_exactly_and_cleaned_up(tmp_path):
    out_file = tmp_path / "figures.json"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcron",
            "bench",
            "dispatch",
            "--kind",
            "redis-stream",
            "--rates",
            "20",
            "--seconds",
            "3",
            "--shards",
            "4",
            "--broker",
            REDIS,
            "--json",
            str(out_file),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "Traceback" not in out.stderr
    assert "target: >= 2000/s to redis-stream" in out.stdout  # the table and its verdict were printed

    f = json.loads(out_file.read_text())["shardcron"]
    assert (f["scenario"], f["kind"], f["db"], f["seconds"]) == ("dispatch", "redis-stream", "sqlite", 3)
    assert f["target_per_s"] == 2000 and f["target_met"] is False  # 20 jobs/s cannot meet it
    [step] = f["steps"]
    assert "error" not in step, step.get("error")
    assert step["rate"] == 20 and step["expected"] == 60
    # Every slot of the window enqueued once, and the stream holds one entry per succeeded tick, no more.
    assert (step["missed"], step["duplicated"], step["failed"], step["first_error"]) == (0, 0, 0, None)
    assert step["succeeded"] == 60 and step["enqueues_per_s"] == 20
    assert step["succeeded_all_slots"] >= 60
    assert step["at_broker"] == step["succeeded_all_slots"]
    assert (step["lost"], step["unrecorded"]) == (0, 0)
    lat = step["lateness_ms"]
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert step["cpu_ms_per_1000_ticks"] > 0

    # What the bench made on the broker is gone (its per-slot markers too, by the same clean-up).
    client = redis.Redis.from_url(REDIS)
    try:
        assert step["destination"].startswith("shardcron-bench-")
        assert client.exists(step["destination"]) == 0
    finally:
        client.close()
