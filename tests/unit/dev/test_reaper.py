"""The reaper `shardcron dev` starts first: what it keeps listed, and how it stops a process group."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shardcron.dev.reaper import Reaper, stop_groups, watched

IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
)


@pytest.mark.parametrize(
    "lines, listed",
    [
        ([], []),
        (["+10\n", "+11\n"], [10, 11]),
        (["+10\n", "+11\n", "-10\n"], [11]),  # reaped by dev itself: its number may be reused, never signal it
        (["+10\n", "-10\n", "+10\n"], [10]),
        (["+10\n", "+10\n"], [10]),
        (["+12", "garbage\n", "-\n", "+\n", "+-3\n", "+1x\n"], [12]),  # a torn last line or noise is ignored
    ],
)
def test_watched_keeps_what_was_added_and_not_reaped(lines, listed):
    assert watched(lines) == listed


def group_leader(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_group_that_stops_on_sigterm_is_not_killed():
    proc = group_leader("import time; print('ready', flush=True); time.sleep(600)")
    try:
        assert stop_groups([proc.pid], grace_s=60, alive=lambda _: proc.poll() is None) == []
        assert proc.wait(10) == -15
    finally:
        proc.kill()


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace():
    proc = group_leader(IGNORES_SIGTERM)
    try:
        assert stop_groups([proc.pid], grace_s=0.5, alive=lambda _: proc.poll() is None) == [proc.pid]
        assert proc.wait(10) == -9
    finally:
        proc.kill()


def test_the_reaper_stops_what_is_listed_when_its_pipe_ends():
    kept, forgotten = group_leader(IGNORES_SIGTERM), group_leader(IGNORES_SIGTERM)
    try:
        reaper = Reaper()
        reaper.watch(kept.pid)
        reaper.watch(forgotten.pid)
        reaper.forget(forgotten.pid)
        assert reaper.close(), "the reaper ends once it has stopped what was listed"  # as dev's exit closes it
        assert kept.wait(60) == -9  # it ignored SIGTERM: killed after the grace
        with pytest.raises(subprocess.TimeoutExpired):  # every signal the reaper sends is sent by now
            forgotten.wait(1)
    finally:
        kept.kill()
        forgotten.kill()
