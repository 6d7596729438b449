"""The node-shape figures the benches print: percentiles from histogram buckets, threads from /proc."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardcron.dev.bench.node_shape import bucket_percentile, columns, describe, lateness_figures, thread_count

INF = float("inf")


@pytest.mark.parametrize(
    "counts, p, bound",
    [
        ({}, 99, None),
        ({0.01: 0, 0.1: 0, INF: 0}, 99, None),
        ({0.01: 100, 0.1: 100, INF: 100}, 99, 0.01),
        ({0.01: 98, 0.1: 100, INF: 100}, 99, 0.1),  # the 99th of 100 is in the second bucket
        ({0.01: 99, 0.1: 100, INF: 100}, 99, 0.01),
        ({0.01: 99, 0.1: 100, INF: 100}, 100, 0.1),
        ({0.01: 0, 0.1: 1, INF: 2}, 100, INF),  # one renewal beyond the last bound
    ],
)
def test_bucket_percentile_is_the_bound_of_the_bucket_it_falls_in(counts, p, bound):
    assert bucket_percentile(counts, p) == bound


def test_lateness_figures_count_only_the_renewals_between_the_two_reads():
    before = {0.005: 10, 0.1: 12, INF: 12}
    after = {0.005: 20, 0.1: 23, INF: 23}  # 11 more: 10 within 5 ms, 1 within 100 ms
    assert lateness_figures(before, after) == {"renewals": 11, "p99": 100.0, "max": 100.0}
    assert lateness_figures(after, after) == {"renewals": 0, "p99": None, "max": None}


def test_a_node_that_started_inside_the_window_counts_from_zero():
    assert lateness_figures({}, {0.005: 3, INF: 3}) == {"renewals": 3, "p99": 5.0, "max": 5.0}


def test_thread_count_is_the_kernels():
    assert thread_count(os.getpid()) >= 1
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert thread_count(int(done.stdout)) == 0  # gone: counted as none, not an error


SHAPE = {"threads_peak": 31, "event_loops": 2, "renewal_lateness_ms": {"renewals": 9, "p99": 5.0, "max": 10.0}}


@pytest.mark.parametrize(
    "shape, line, cells",
    [
        (
            SHAPE,
            "node: 31 threads at peak, 2 event loops; keep-alive: 9 renewals, lateness p99 <= 5.0 ms, max <= 10.0 ms",
            [31, 2, 5.0],
        ),
        (
            {**SHAPE, "renewal_lateness_ms": {"renewals": 0, "p99": None, "max": None}},
            "node: 31 threads at peak, 2 event loops; keep-alive: no renewal in the window",
            [31, 2, "-"],
        ),
        (
            {**SHAPE, "renewal_lateness_ms": None},
            "node: 31 threads at peak, 2 event loops; keep-alive: not measured (no /metrics)",
            [31, 2, "-"],
        ),
        (None, "node: not measured", ["-", "-", "-"]),
    ],
)
def test_how_a_report_shows_the_shape(shape, line, cells):
    assert describe(shape) == line
    assert columns(shape) == cells
