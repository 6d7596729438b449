"""`pip install .` builds a wheel that carries the generated gRPC code and the migrations; the entry points work."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from shardcron import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_generated_code_and_migrations(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    wheel = next(tmp_path.glob("shardcron-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "shardcron/v1/scheduler_pb2.py",
        "shardcron/v1/scheduler_pb2_grpc.py",
        "shardcron/store/migrations/env.py",
        "shardcron/store/migrations/script.py.mako",
        "shardcron/store/migrations/versions/0001_initial.py",
    ):
        assert needed in names, f"{needed} is missing from {wheel.name}"
    assert any(n.endswith("entry_points.txt") for n in names)


def test_version_and_python_dash_m():
    v = subprocess.run([sys.executable, "-m", "shardcron", "--version"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0 and v.stdout.strip() == f"shardcron {__version__}"
