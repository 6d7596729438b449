"""The at-rest bench's reading of thread names: a pool's numbering folded, this process's own threads read."""

from __future__ import annotations

import os
import threading

import pytest

from shardcron.dev.bench.at_rest import grouped, thread_names


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([], {}),
        (["tick_0", "tick_12", "api_3", "claimer"], {"tick_*": 2, "api_*": 1, "claimer": 1}),
        (["health-1", "health-2", "MainThread"], {"health_*": 2, "MainThread": 1}),
        (["bench-0-keepali", "Thread-3 (_run)"], {"Thread-N (_run)": 1, "bench-0-keepali": 1}),
        (["Thread-3 (_run)", "Thread-12 (_run)", "Thread-1 (serve"], {"Thread-N (_run)": 2, "Thread-N (serve": 1}),
    ],
)
def test_grouped_folds_a_pool_numbering_and_puts_the_largest_first(names, expected):
    got = grouped(names)
    assert got == expected
    assert list(got.values()) == sorted(got.values(), reverse=True)


def test_thread_names_reads_this_process_threads():
    release = threading.Event()
    extra = threading.Thread(target=release.wait, daemon=True)
    extra.start()
    try:
        # (at least: a C library, gRPC say, may run threads of its own in this process)
        assert len(thread_names(os.getpid())) >= threading.active_count() >= 2
    finally:
        release.set()
        extra.join()


def test_thread_names_of_a_process_gone_is_empty():
    assert thread_names(2**22 + 12345) == []
