"""The ``shardcron`` command as tests run it: a real process, output captured."""

from __future__ import annotations

import json
import subprocess
import sys


def shardcron(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcron", *args], capture_output=True, text=True,
                          timeout=timeout_s)


def audit(db: str, from_ms: int, to_ms: int) -> dict:
    """``shardcron audit --json`` over ``(from_ms, to_ms]``; exit 0 (clean) or 2 (findings), never an error."""
    out = shardcron("audit", "--db", db, "--from", str(from_ms), "--to", str(to_ms), "--json", timeout_s=300)
    assert out.returncode in (0, 2), out.stderr
    return json.loads(out.stdout)
