"""Draw one trace's spans as a waterfall (SVG): each span a bar from its start to its end, nested under
its parent, its events as ticks on the bar.

    SHARDCRON_TEST_TRACE_DUMP=/tmp/spans.json .venv/bin/python -m pytest tests/integration/tracing -k celery
    .venv/bin/python scripts/trace_waterfall.py /tmp/spans.json docs/tracing/waterfall.svg

The input is the JSON the tests' OTLP receiver dumps (``tests/support/otlp_receiver.py``). The trace drawn
is the one with the most services, then the most spans. Matplotlib comes with the ``docs`` extra; the SVG is
deterministic (no date, a fixed hash salt, text kept as text).
"""

from __future__ import annotations

import argparse
import io
import json
from collections import defaultdict
from pathlib import Path


def chosen_trace(spans: list[dict]) -> list[dict]:
    by_trace: dict[str, list[dict]] = defaultdict(list)
    for s in spans:
        by_trace[s["trace_id"]].append(s)
    return max(by_trace.values(), key=lambda ss: (len({s["service"] for s in ss}), len(ss)))


def in_nesting_order(spans: list[dict]) -> list[tuple[dict, int]]:
    """Each span with its depth, parents before their children, siblings by start."""
    ids = {s["span_id"] for s in spans}
    children: dict[str | None, list[dict]] = defaultdict(list)
    for s in spans:
        children[s["parent_span_id"] if s["parent_span_id"] in ids else None].append(s)
    out: list[tuple[dict, int]] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in sorted(children[parent], key=lambda s: s["start_ns"]):
            out.append((s, depth))
            walk(s["span_id"], depth + 1)

    walk(None, 0)
    return out


def draw(spans: list[dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.hashsalt": "shardcron", "svg.fonttype": "none", "font.size": 9})
    from matplotlib import pyplot

    rows = in_nesting_order(chosen_trace(spans))
    t0 = min(s["start_ns"] for s, _ in rows)
    colours = {}
    palette = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]
    fig, ax = pyplot.subplots(figsize=(9, 0.8 * len(rows) + 1.4))
    for y, (s, depth) in enumerate(rows):
        colour = colours.setdefault(s["service"], palette[len(colours) % len(palette)])
        start, end = (s["start_ns"] - t0) / 1e6, (s["end_ns"] - t0) / 1e6
        ax.barh(y, max(end - start, 0.5), left=start, height=0.5, color=colour)
        label = f"{'  ' * depth}{s['service']}: {s['name']}  ({end - start:.1f} ms)"
        ax.text(0, y - 0.38, label, va="bottom", ha="left", fontsize=8)
        for e in s["events"]:
            at = (e["time_ns"] - t0) / 1e6
            ax.plot([at, at], [y - 0.25, y + 0.25], color="black", linewidth=1)
            ax.text(at, y + 0.3, e["name"], rotation=30, fontsize=6, va="top", ha="left")
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the trace's first span began")
    ax.set_title("One tick's trace: the leader's span, the Celery worker's task span and the dedupe verdicts", pad=16)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    pyplot.close(fig)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spans", type=Path, help="the receiver's JSON dump")
    parser.add_argument("svg", type=Path, help="where to write the waterfall")
    a = parser.parse_args()
    a.svg.write_text(draw(json.loads(a.spans.read_text(encoding="utf-8"))), encoding="utf-8")
    print(f"drew {a.svg}")


if __name__ == "__main__":
    main()
