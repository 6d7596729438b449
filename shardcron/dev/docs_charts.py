"""The performance page's charts, drawn from the benches' own ``--json`` output.

``docs/charts/data/`` holds the JSON files that ``shardcron bench ... --json FILE`` wrote for the figures
on the page; ``python -m shardcron.dev.docs_charts`` (``make docs-charts``) draws each chart of ``CHARTS``
from them into ``docs/charts/<name>.svg``. The drawing is deterministic (no date, a fixed hash salt, text
kept as text), so ``tests/docs/test_charts.py`` can redraw every chart and compare it byte for byte with
the committed one: a chart cannot drift from the data it claims to show.

Data files are named ``<bench>-<variant>.json``: ``throughput-postgresql.json``, ``dispatch-nats.json``,
``precision-sqlite.json`` (a ``--neighbour cpu`` run: its quiet and loaded windows), ``scale-postgresql.json``.
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
PRECISION_LOADED_P99_TARGET_MS = 10
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


def _pyplot():
    import matplotlib  # the docs extra; imported here so that importing this module needs nothing

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.hashsalt": "shardcron", "svg.fonttype": "none", "font.size": 10})
    from matplotlib import pyplot

    return pyplot


def _figure():
    pyplot = _pyplot()
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


def _missing(value: float | None) -> float:
    """A figure as matplotlib draws it: one not measured (None) leaves a gap in its line."""
    return float("nan") if value is None else value


def _from_zero(ax, values: list[float], headroom: float) -> None:
    """The y axis from 0 to ``headroom`` times the highest figure drawn on it, so that no point sits on the
    frame and the legend has room above the lines."""
    drawn = [v for v in values if v == v]  # NaN, a figure not measured, is not equal to itself
    if drawn and max(drawn) > 0:
        ax.set_ylim(0, headroom * max(drawn))


def _windows(data_dir: Path, variant: str, figures: dict) -> list[tuple[str, dict]]:
    """The measured windows of a ``bench precision`` run, as (name, figures): quiet, then loaded when the
    run had ``--neighbour cpu``."""
    windows = [("quiet", figures)] + ([("loaded", figures["loaded"])] if "loaded" in figures else [])
    if any("per_second" not in window for _, window in windows):
        raise ChartDataMissing(
            f"precision-{variant}.json has no per-second figures: run `shardcron bench precision ... "
            f"--neighbour cpu --json {data_dir}/precision-{variant}.json` again"
        )
    return windows


def lateness_over_time(data_dir: Path) -> str:
    """p99 and max lateness of each second of the measured windows, quiet and loaded, a panel per store."""
    runs = _figures(data_dir, "precision")
    pyplot = _pyplot()
    fig, axes = pyplot.subplots(
        len(runs), 1, figsize=(7, 0.8 + 2.8 * len(runs)), layout="constrained", sharex=True, squeeze=False
    )
    for ax, (variant, figures) in zip(axes[:, 0], runs.items(), strict=True):
        ax.grid(True, alpha=0.3)
        drawn: list[float] = []
        for colour, (window, measured) in zip(("C0", "C1"), _windows(data_dir, variant, figures), strict=False):
            seconds = [row["second"] for row in measured["per_second"]]
            for figure, style in (("p99", "-"), ("max", ":")):
                lateness = [_missing(row["lateness_ms"][figure]) for row in measured["per_second"]]
                drawn += lateness
                ax.plot(seconds, lateness, linestyle=style, color=colour, label=f"{window} {figure}")
        if "loaded" in figures:
            drawn.append(PRECISION_LOADED_P99_TARGET_MS)
            ax.axhline(
                PRECISION_LOADED_P99_TARGET_MS,
                linestyle="--",
                color="grey",
                label=f"target p99 {PRECISION_LOADED_P99_TARGET_MS} ms loaded",
            )
        _from_zero(ax, drawn, headroom=1.4)
        ax.set_ylabel("lateness, ms")
        ax.set_title(f"{STORE_LABELS.get(variant, variant)}, {figures['jobs']:,} jobs due every second", fontsize=10)
        ax.legend(fontsize=8, ncols=3, loc="upper left")
    axes[-1, 0].set_xlabel("second of the measured window")
    fig.suptitle("bench precision: lateness second by second")
    return _svg(pyplot, fig)


def _at_held_rate(count: dict) -> float | None:
    """The server's CPU per 1,000 ticks at the highest rate a node count held (None if it held none)."""
    held = [s for s in count["steps"] if s["rate"] == count["highest_sustained_rate"]]
    return held[0]["db_per_1000_ticks"]["server_cpu_ms"] if held else None


def scale(data_dir: Path) -> str:
    """The highest rate held against the node count, and what the database server's CPU spends per 1,000
    ticks at that rate, a line each per store."""
    pyplot, fig, ax = _figure()
    cpu_ax = ax.twinx()
    counts: set[int] = set()
    held: list[float] = []
    cpu: list[float] = []
    for variant, figures in _figures(data_dir, "scale").items():
        store = STORE_LABELS.get(variant, variant)
        nodes = [c["nodes"] for c in figures["node_counts"]]
        counts.update(nodes)
        rates = [c["highest_sustained_rate"] for c in figures["node_counts"]]
        costs = [_missing(_at_held_rate(c)) for c in figures["node_counts"]]
        held += rates
        cpu += costs
        (line,) = ax.plot(
            nodes,
            rates,
            marker="o",
            label=f"{store}: ticks/s held (p99 <= {figures['p99_limit_ms']:g} ms, none missed)",
        )
        cpu_ax.plot(
            nodes,
            costs,
            marker="s",
            linestyle="--",
            color=line.get_color(),
            label=f"{store}: server CPU per 1,000 ticks at that rate",
        )
    ax.set_xticks(sorted(counts))
    _from_zero(ax, held, headroom=1.15)
    _from_zero(cpu_ax, cpu, headroom=1.15)
    ax.set_xlabel("nodes (one database)")
    ax.set_ylabel("ticks per second held")
    cpu_ax.set_ylabel("server CPU, ms per 1,000 ticks")
    ax.set_title("bench scale: throughput with nodes, and what a tick costs the server")
    lines, labels = ax.get_legend_handles_labels()
    cpu_lines, cpu_labels = cpu_ax.get_legend_handles_labels()
    ax.legend(lines + cpu_lines, labels + cpu_labels, fontsize=8, loc="lower right")
    return _svg(pyplot, fig)


CHARTS: dict[str, Callable[[Path], str]] = {
    "throughput": throughput,
    "dispatch": dispatch,
    "lateness-over-time": lateness_over_time,
    "scale": scale,
}


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
