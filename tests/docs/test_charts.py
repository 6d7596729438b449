"""The performance page's charts are drawn from the committed bench output (docs/charts/data/), byte for byte.

Nothing here skips: a chart whose bench output is not committed fails, naming the command that makes it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from shardcron.dev import docs_charts
from shardcron.dev.docs_charts import CHARTS, CHARTS_DIR, ChartDataMissing, draw

# The bench whose --json output each chart draws.
BENCH = {"throughput": "throughput", "dispatch": "dispatch", "lateness-over-time": "precision", "scale": "scale"}


def test_every_chart_names_its_bench():
    assert set(BENCH) == set(CHARTS)


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_the_committed_chart_is_what_its_data_draws(name):
    drawn = draw(name)  # without data: ChartDataMissing, naming the bench command that writes it
    chart = CHARTS_DIR / f"{name}.svg"
    assert chart.exists(), f"docs/charts/{name}.svg is not committed: run `make docs-charts`"
    assert chart.read_text(encoding="utf-8") == drawn, (
        f"docs/charts/{name}.svg is not what docs/charts/data draws: run `make docs-charts`"
    )


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_the_performance_page_shows_every_chart(name):
    page = (CHARTS_DIR.parent / "performance.md").read_text(encoding="utf-8")
    assert f"charts/{name}.svg" in page


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_a_chart_without_data_names_the_bench_command_that_makes_it(tmp_path, name):
    bench = BENCH[name]
    with pytest.raises(ChartDataMissing, match=rf"shardcron bench {bench} .* --json .*{bench}-<variant>\.json"):
        draw(name, tmp_path)


def committed(bench: str) -> dict[str, dict]:
    """The committed output of ``bench``, as {file name: its JSON}; none committed fails the test."""
    found = {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(docs_charts.DATA_DIR.glob(f"{bench}-*.json"))
    }
    assert found, f"no docs/charts/data/{bench}-*.json: run `shardcron bench {bench} ... --json FILE`"
    return found


def changed(tmp_path: Path, bench: str, change: Callable[[dict], None]) -> Path:
    """A copy of ``bench``'s committed output in ``tmp_path``, each file's figures passed through ``change``."""
    for name, data in committed(bench).items():
        change(data["shardcron"])
        (tmp_path / name).write_text(json.dumps(data), encoding="utf-8")
    return tmp_path


def bump_p99(figures: dict) -> None:
    figures["steps"][0]["lateness_ms"]["p99"] += 7


def bump_first_second(figures: dict) -> None:
    first = figures["per_second"][0]["lateness_ms"]
    first["p99"] = (first["p99"] or 0) + 7


def bump_held_rate(figures: dict) -> None:
    figures["node_counts"][0]["highest_sustained_rate"] += 700


@pytest.mark.parametrize(
    "name, change",
    [("throughput", bump_p99), ("lateness-over-time", bump_first_second), ("scale", bump_held_rate)],
)
def test_a_changed_figure_changes_the_chart(tmp_path, name, change):
    assert draw(name, changed(tmp_path, BENCH[name], change)) != draw(name)


def test_a_run_without_a_neighbour_draws_its_quiet_window_alone(tmp_path):
    svg = draw("lateness-over-time", changed(tmp_path, "precision", lambda f: f.pop("loaded", None)))
    assert "quiet p99" in svg and "loaded p99" not in svg  # the legend is text in the SVG


def test_a_node_count_that_held_no_rate_leaves_a_gap_in_the_cpu_line(tmp_path):
    def held_none(figures: dict) -> None:
        figures["node_counts"][0]["highest_sustained_rate"] = 0

    assert draw("scale", changed(tmp_path, "scale", held_none)) != draw("scale")


def test_precision_output_without_its_seconds_names_the_command_that_writes_them(tmp_path):
    # A throughput step is a precision window's figures as the bench wrote them before it kept each second.
    window = next(iter(committed("throughput").values()))["shardcron"]["steps"][0]
    window.pop("per_second", None)
    (tmp_path / "precision-sqlite.json").write_text(json.dumps({"shardcron": window}), encoding="utf-8")
    with pytest.raises(ChartDataMissing, match=r"precision-sqlite\.json has no per-second .*bench precision"):
        draw("lateness-over-time", tmp_path)
