"""The ``shardcron`` command as tests run it: a real process, output captured."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout

from shardcron.cli import admin as admin_cli
from shardcron.errors import ShardcronError


def shardcron(*args: str, timeout_s: float = 120, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``shardcron ARGS`` in a child process; ``env``: variables set for it over the test's own (a token, say)."""
    return subprocess.run(
        [sys.executable, "-m", "shardcron", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else {**os.environ, **env},
    )


def audit(db: str, from_ms: int, to_ms: int) -> dict:
    """``shardcron audit --json`` over ``(from_ms, to_ms]``; exit 0 (clean) or 2 (findings), never an error."""
    out = shardcron("audit", "--db", db, "--from", str(from_ms), "--to", str(to_ms), "--json", timeout_s=300)
    assert out.returncode in (0, 2), out.stderr
    return json.loads(out.stdout)


def admin_command(*argv: str) -> tuple[int, str, str]:
    """Run ``shardcron audit|db ...`` as ``cli.main`` does (ShardcronError -> one line, exit 1), in process:
    (exit status, stdout, stderr)."""
    parser = argparse.ArgumentParser(prog="shardcron")
    sub = parser.add_subparsers(dest="command", required=True)
    admin_cli.register(sub)
    a = parser.parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = a.func(a)
        except ShardcronError as e:
            print(f"shardcron: error: {e}", file=sys.stderr)
            rc = 1
    return rc, out.getvalue(), err.getvalue()


def node_command(node, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """``shardcron ARGS --server <node's address>``: an API command served by one node."""
    return shardcron(*args, "--server", node.address, timeout_s=timeout_s)
