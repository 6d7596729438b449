"""`make dev` (`shardcron dev`) starts, shows ticks, and stops cleanly on SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from shardcron.dev.testing.etcd_server import free_port

pytestmark = pytest.mark.cluster


def descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.add(k)
            todo.append(k)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_dev_cluster_streams_ticks_and_leaves_nothing_behind_on_ctrl_c(tmp_path):
    base = free_port()  # the command refuses busy ports itself, naming them
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardcron", "dev", "--base-port", str(base), "--sink-port", str(free_port()),
         "--dir", str(tmp_path / "dev")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    seen = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "heartbeat" in line and "succeeded" in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(180), "no tick streamed:\n" + "".join(lines[-60:])
        children = descendants(proc.pid)
        assert len(children) >= 4, "three nodes and an etcd run under `shardcron dev`"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0, "".join(lines[-40:])
        reader.join(10)
        left = [p for p in children if alive(p)]
        assert not left, f"processes left behind: {left}"
        text = "".join(lines)
        assert "submitted heartbeat" in text and "ping-sink" in text and "FAIR SHARE" in text
        assert "Traceback" not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
