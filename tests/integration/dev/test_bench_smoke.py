"""Short runs of every `shardcron bench` scenario: they complete and report sane figures (no speed asserted)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


def bench(tmp_path, *args: str) -> dict:
    out_file = tmp_path / "figures.json"
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", "bench", *args, "--json", str(out_file)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "Traceback" not in out.stderr
    return json.loads(out_file.read_text())


def sane_ticks(f: dict) -> None:
    assert f["expected"] > 0 and 0 <= f["recorded"] <= f["expected"]
    assert f["missed"] == f["expected"] - f["recorded"] and f.get("duplicated", 0) >= 0
    lat = f["lateness_ms"]
    if f["recorded"]:
        assert lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]


@pytest.mark.parametrize("peer_store", ["memory", "sqlite"])
def test_precision_with_the_apscheduler_peer(tmp_path, peer_store):
    f = bench(
        tmp_path,
        "precision",
        "--jobs",
        "50",
        "--seconds",
        "3",
        "--shards",
        "8",
        "--peer",
        "apscheduler",
        "--peer-store",
        peer_store,
    )
    sane_ticks(f["shardcron"])
    sane_ticks(f["peer"])
    assert f["peer"]["peer"] == f"apscheduler ({peer_store} store)"
    assert f["shardcron"]["cpu_ms_per_1000_ticks"] > 0 and f["shardcron"]["peak_rss_mb"] > 10
    sane_shape(f["shardcron"]["node"])


def sane_shape(shape: dict) -> None:
    """The node's shape over a window: its threads (the kernel's count), its loops (the API's at least) and
    its keep-alive (renewals in the window, each with a lateness bucket)."""
    assert shape["threads_peak"] >= 2 and shape["event_loops"] >= 1, shape
    renewal = shape["renewal_lateness_ms"]
    assert renewal["renewals"] >= 0
    assert (renewal["p99"] is None) == (renewal["renewals"] == 0), renewal
    if renewal["renewals"]:
        assert 0 < renewal["p99"] <= renewal["max"], renewal


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_throughput_steps(tmp_path, fresh_db_url, kind):
    # On a server database every step shares one store: each must start clean and agree with it.
    db = ["--db", fresh_db_url(kind)] if kind != "sqlite" else []
    f = bench(tmp_path, "throughput", "--rates", "20,40", "--seconds", "3", "--shards", "8", *db)["shardcron"]
    assert f["db"] == kind
    assert 1 <= len(f["steps"]) <= 2
    for step in f["steps"]:
        sane_ticks(step)
        sane_shape(step["node"])
    assert f["highest_sustained_rate"] in (0, 20, 40)


def test_failover_kill_and_sigterm(tmp_path):
    f = bench(
        tmp_path, "failover", "--jobs", "20", "--trials", "1", "--graceful-trials", "1", "--ttl", "3", "--shards", "4"
    )["shardcron"]
    kinds = [t["kind"] for t in f["trials"]]
    assert kinds == ["SIGKILL", "SIGTERM"]
    assert all(t["seconds_to_first_claim"] >= 0 for t in f["trials"])
    assert all(t["slots_not_run"] == 0 and t["seconds_to_new_leader"] is not None for t in f["trials"])
    assert f["kill9_max_s"] >= 0 and f["sigterm_max_s"] >= 0


def test_submit_through_a_forwarding_node(tmp_path):
    f = bench(tmp_path, "submit", "--jobs", "40", "--seconds", "20", "--shards", "8")["shardcron"]
    assert f["forwarded"] and f["via"] != f["leader"]
    for mode in f["modes"].values():
        assert mode["jobs_per_s"] > 0 and mode["errors"] == 0
    cpu = f["modes"]["unary PutJob (16 callers)"]["cpu_ms_per_call"]
    assert set(cpu) == {"caller", "forwarder", "leader", "rest"}
    assert cpu["caller"] > 0 and min(cpu.values()) >= 0  # a node's counters tick every 10 ms: 40 calls may read 0


def test_fairness_both_modes(tmp_path):
    f = bench(
        tmp_path,
        "fairness",
        "--jobs",
        "10",
        "--flood-jobs",
        "100",
        "--executor-slots",
        "5",
        "--seconds",
        "3",
        "--shards",
        "8",
    )["shardcron"]
    assert f["executor_slots"] == 5 and set(f["modes"]) == {"on", "off"}
    for mode in ("on", "off"):
        for window in ("idle", "flooding"):
            w = f["modes"][mode][window]
            assert w["expected"] == 30 and 0 <= w["started"] <= w["recorded"] <= w["expected"], (mode, window, w)
            assert w["censored"] == w["recorded"] - w["started"]
            sane_shape(w["node"])
        assert f["modes"][mode]["flooding"]["flood_starts_per_s"] > 0
    assert f["modes"]["on"]["idle"]["started"] == f["modes"]["on"]["idle"]["expected"]
    assert f["fair_p99_ratio"] is not None


def test_rest_lists_the_node_threads_by_their_own_names(tmp_path):
    f = bench(tmp_path, "rest", "--jobs", "20", "--seconds", "3", "--shards", "8")["shardcron"]
    by_name = f["threads_by_name"]
    assert sum(by_name.values()) == f["threads"] == f["node"]["threads_peak"]
    # Named for the OS by the node itself: the scheduler's own threads are there under their names, and the
    # etcd client's threads (started from one of ours) do not carry our names.
    assert {"coordinator", "tick-writer", "dispatcher"} <= by_name.keys()
    assert by_name["tick-writer"] == 1, "one writer of tick rows"
    assert not {"claimer", "recorder", "pruner", "marks_0"} & by_name.keys(), "the tick writer's streams own no thread"
    assert by_name["coordinator"] == 1
    assert not {"settings", "notifier"} & by_name.keys()  # tasks on the node's loop, their passes on the api pool
    assert f["target_met"] == (f["threads"] <= f["target_threads"] == 16)
    undocumented = [name for name in by_name if not any(documented(name, doc) for doc in documented_threads())]
    assert not undocumented, f"threads a node at rest runs that docs/architecture.md does not list: {undocumented}"


OS_NAME_BYTES = 15  # what Linux keeps of a thread's name


def documented_threads() -> list[str]:
    """The names in the first column of docs/architecture.md's table of a node's threads."""
    text = (Path(__file__).parents[3] / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("<!-- threads:", 1)[1].split("\n\n", 1)[0]
    cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return [name for cell in cells for name in re.findall(r"`([^`]+)`", cell)]


def documented(observed: str, doc: str) -> bool:
    """Whether ``observed`` (an OS name as ``bench rest`` folds it) is the thread the docs name ``doc``: a
    pool's ``_N`` is its numbering, ``<node-id>`` the bench's node, another ``<...>`` anything after it."""
    doc = re.sub(r"[_-](N|\d+)$", "_*", doc.replace("<node-id>", "bench-0"))
    if "<" in doc:
        return observed.startswith(doc[: doc.index("<")])
    return observed == doc[:OS_NAME_BYTES]
