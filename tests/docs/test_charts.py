"""The performance page's charts are drawn from the committed bench output (docs/charts/data/), byte for byte."""

from __future__ import annotations

import json

import pytest

from shardcron.dev import docs_charts
from shardcron.dev.docs_charts import CHARTS, CHARTS_DIR, ChartDataMissing, draw


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_the_committed_chart_is_what_its_data_draws(name):
    committed = (CHARTS_DIR / f"{name}.svg").read_text(encoding="utf-8")
    assert committed == draw(name), f"docs/charts/{name}.svg is not what docs/charts/data draws: run `make docs-charts`"


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_the_performance_page_shows_every_chart(name):
    page = (CHARTS_DIR.parent / "performance.md").read_text(encoding="utf-8")
    assert f"charts/{name}.svg" in page


def test_a_chart_without_data_names_the_bench_command_that_makes_it(tmp_path):
    with pytest.raises(ChartDataMissing, match=r"shardcron bench throughput .* --json .*throughput-<variant>\.json"):
        draw("throughput", tmp_path)


def test_a_changed_figure_changes_the_chart(tmp_path):
    for path in docs_charts.DATA_DIR.glob("throughput-*.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["shardcron"]["steps"][0]["lateness_ms"]["p99"] += 7
        (tmp_path / path.name).write_text(json.dumps(data), encoding="utf-8")
    assert draw("throughput", tmp_path) != draw("throughput")
