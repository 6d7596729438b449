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


@pytest.mark.parametrize("spread", [False, True], ids=["one-second", "spread"])
def test_redis_stream_dispatch_is_counted_exactly_and_cleaned_up(tmp_path, spread):
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
            *(["--spread"] if spread else []),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "Traceback" not in out.stderr
    case = "slots spread by 900 ms of jitter" if spread else "slots on one second"
    assert f"target (issue 32, {case}): >= 5000/s to redis-stream" in out.stdout  # the table and its verdict

    f = json.loads(out_file.read_text())["shardcron"]
    assert (f["scenario"], f["kind"], f["db"], f["seconds"]) == ("dispatch", "redis-stream", "sqlite", 3)
    assert (f["spread"], f["jitter_ms"], f["target_p99_ms"]) == ((True, 900, 50) if spread else (False, 0, None))
    assert f["target_per_s"] == 5000 and f["target_met"] is False  # 20 jobs/s cannot meet it
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
    # Spread: from each slot's due time, so a negative one would be an offset the scheduler did not apply.
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert 0 <= step["to_start_ms"]["p50"] <= step["to_start_ms"]["p99"]
    assert step["cpu_ms_per_1000_ticks"] > 0

    # What the bench made on the broker is gone (its per-slot markers too, by the same clean-up).
    client = redis.Redis.from_url(REDIS)
    try:
        assert step["destination"].startswith("shardcron-bench-")
        assert client.exists(step["destination"]) == 0
    finally:
        client.close()
