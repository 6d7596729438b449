"""Short runs of `shardcron bench precision --neighbour cpu` and `shardcron bench scale` through the CLI:
both windows and every node count are measured, nothing runs twice, and the neighbour does not outlive the bench."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster


def run_bench(tmp_path, *args: str) -> tuple[dict, str]:
    out_file = tmp_path / "figures.json"
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", "bench", *args, "--json", str(out_file)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "Traceback" not in out.stderr
    return json.loads(out_file.read_text())["shardcron"], out.stdout


def assert_every_tick_once(m: dict) -> None:
    assert m["expected"] > 0 and m["recorded"] == m["expected"] and m["missed"] == 0
    assert m["duplicated"] == 0
    lat = m["lateness_ms"]
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert m["cpu_ms_per_1000_ticks"] > 0
    # Second by second (the performance page's lateness-over-time chart): every started tick in its second.
    assert [r["second"] for r in m["per_second"]] == list(range(m["seconds"]))
    assert sum(r["ticks"] for r in m["per_second"]) == m["recorded"] - m["not_started"]


def test_precision_quiet_and_beside_a_cpu_neighbour(tmp_path):
    f, printed = run_bench(
        tmp_path, "precision", "--jobs", "50", "--seconds", "3", "--shards", "8", "--neighbour", "cpu"
    )
    assert f["neighbour"] == "cpu"
    assert_every_tick_once(f)
    assert_every_tick_once(f["loaded"])
    rows = [line.split("|")[1].strip() for line in printed.splitlines() if line.startswith("|")]
    assert rows[2:] == ["quiet", "loaded"]  # after the header and its rule
    met = f["loaded_target_met"]
    assert met == (f["loaded"]["lateness_ms"]["p99"] <= f["loaded_p99_target_ms"])
    assert f"p99 <= 10.0 ms loaded, nothing missed: {'met' if met else 'NOT met'}" in printed
    # One spinner per CPU the node may use, and none left once the bench is done.
    assert 1 <= len(f["neighbour_pids"]) <= os.cpu_count()
    for pid in f["neighbour_pids"]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as proc:
                assert b"getppid" not in proc.read(), f"neighbour {pid} outlived the bench"
        except FileNotFoundError:
            pass


def test_scale_steps_each_node_count_on_postgresql(tmp_path, fresh_db_url):
    f, printed = run_bench(
        tmp_path,
        "scale",
        "--nodes",
        "1,2",
        "--rates",
        "20,40",
        "--seconds",
        "3",
        "--shards",
        "8",
        "--db",
        fresh_db_url("postgresql"),
    )
    assert [c["nodes"] for c in f["node_counts"]] == [1, 2]
    assert "statements: sent by the nodes" in printed
    for c in f["node_counts"]:
        assert c["steps"] and c["highest_sustained_rate"] in (0, 20, 40)
        for s in c["steps"]:
            assert s["nodes"] == c["nodes"]
            assert_every_tick_once(s)
            cost = s["db_per_1000_ticks"]
            # Every tick is claimed and its result recorded in the database: neither can cost nothing.
            assert cost["commits"] > 0 and cost["rows_written"] > 0
            assert cost["statements"] > 0  # claims and results at least, counted by the nodes
            # Measured (the test's PostgreSQL runs on this machine); at 20 ticks/s it may be below /proc's 10 ms tick.
            assert cost["server_cpu_ms"] is not None and cost["server_cpu_ms"] >= 0
            assert cost["wal_bytes"] > 0
    assert "1 node: " in printed and "2 nodes: " in printed


@pytest.mark.parametrize(
    "args, named",
    [
        (["scale", "--nodes", "1"], "--db"),
        (["scale", "--nodes", "1", "--db", "sqlite:///x.db"], "--db"),
        (["throughput", "--neighbour", "cpu"], "--neighbour"),
        (["precision", "--nodes", "1,2"], "--nodes"),
    ],
)
def test_misuse_is_refused_naming_the_flag(tmp_path, args, named):
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", "bench", *args, "--seconds", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode != 0
    assert named in out.stderr and "Traceback" not in out.stderr
