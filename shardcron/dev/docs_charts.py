"""The performance page's charts, drawn from the benches' own ``--json`` output.

``docs/charts/data/`` holds the JSON files that ``shardcron bench ... --json FILE`` wrote for the figures
on the page; ``python -m shardcron.dev.docs_charts`` (``make docs-charts``) draws each chart of ``CHARTS``
from them into ``docs/charts/<name>.svg``. The drawing is deterministic (no date, a fixed hash salt, text
kept as text), so ``tests/docs/test_charts.py`` can redraw every chart and compare it byte for byte with
the committed one: a chart cannot drift from the data it claims to show.

Data files are named ``<bench>-<variant>.json``: ``throughput-postgresql.json``, ``dispatch-nats.json``.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

CHARTS_DIR = Path(__file__).resolve().parents[2] / "docs" / "charts"
DATA_DIR = CHARTS_DIR / "data"

THROUGHPUT_P99_TARGET_MS = 50
STORE_LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "mysql": "MariaDB"}


class ChartDataMissing(Exception):
    """No bench output for a chart: the message names the command that makes it."""


def _figures(data_dir: Path, bench: str) -> dict[str, dict]:
    """Each ``<bench>-<variant>.json`` in ``data_dir``, as {variant: the shardcron figures}."""
    found = {
        path.stem.removeprefix(f"{bench}-"): json.loads(path.read_text(encoding="utf-8"))["shardcron"]
        for path in sorted(data_dir.glob(f"{bench}-*.json"))
    }
    if not found:
        raise ChartDataMissing(
            f"no {data_dir}/{bench}-*.json: run `shardcron bench {bench} ... --json {data_dir}/{bench}-<variant>.json`"
        )
    return found


def _figure():
    import matplotlib  # the docs extra; imported here so that importing this module needs nothing

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.hashsalt": "shardcron", "svg.fonttype": "none", "font.size": 10})
    from matplotlib import pyplot

    fig, ax = pyplot.subplots(figsize=(7, 3.6), layout="constrained")
    ax.grid(True, alpha=0.3)
    return pyplot, fig, ax


def _svg(pyplot, fig) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    pyplot.close(fig)
    return out.getvalue()


def throughput(data_dir: Path) -> str:
    """p99 lateness against the offered rate, a line per store, with the target."""
    pyplot, fig, ax = _figure()
    for variant, figures in _figures(data_dir, "throughput").items():
        steps = figures["steps"]
        ax.plot(
            [s["rate"] for s in steps],
            [s["lateness_ms"]["p99"] for s in steps],
            marker="o",
            label=STORE_LABELS.get(variant, variant),
        )
    ax.axhline(
        THROUGHPUT_P99_TARGET_MS, linestyle="--", color="grey", label=f"target p99 {THROUGHPUT_P99_TARGET_MS} ms"
    )
    ax.set_xscale("log")
    ax.set_xlabel("ticks per second offered (one node)")
    ax.set_ylabel("p99 lateness, ms")
    ax.set_title("bench throughput: lateness against rate")
    ax.legend()
    return _svg(pyplot, fig)


def dispatch(data_dir: Path) -> str:
    """Enqueues per second reached against jobs per second offered, a line per broker kind."""
    pyplot, fig, ax = _figure()
    top = 0
    for variant, figures in _figures(data_dir, "dispatch").items():
        steps = figures["steps"]
        top = max(top, *(s["rate"] for s in steps))
        ax.plot([s["rate"] for s in steps], [s["enqueues_per_s"] for s in steps], marker="o", label=variant)
    ax.plot([0, top], [0, top], linestyle="--", color="grey", label="keeping up")
    ax.set_xlabel("jobs per second offered (one node, every slot on the same second)")
    ax.set_ylabel("enqueues per second")
    ax.set_title("bench dispatch: what reaches the broker")
    ax.legend(fontsize=8)
    return _svg(pyplot, fig)


CHARTS: dict[str, Callable[[Path], str]] = {"throughput": throughput, "dispatch": dispatch}


def draw(name: str, data_dir: Path = DATA_DIR) -> str:
    """The SVG text of chart ``name`` from the data in ``data_dir``."""
    return CHARTS[name](data_dir)


def main() -> int:
    try:
        for name in CHARTS:
            (CHARTS_DIR / f"{name}.svg").write_text(draw(name), encoding="utf-8")
            print(f"drew docs/charts/{name}.svg")
    except ChartDataMissing as e:
        print(f"docs-charts: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
