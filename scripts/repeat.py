"""Run a part of the suite several times in a row, optionally beside a CPU neighbour, and tally every run.

    make repeat RUNS=10 TESTS=tests/faults NEIGHBOUR=cpu

A flaky test is a bug: this is how we look for one before calling a fault story proven. Each run's whole
output is kept in its own log (the soak prints its seeds there), and a failed run is listed with the tests
that failed, so the failure can be replayed; the fault suite's figures table and a failed scenario's
node and etcd logs are kept per run too. The neighbour is the one ``shardcron bench --neighbour cpu``
uses: a spinning process pinned to each CPU, so every core is shared with the cluster under test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from shardcron.dev.bench.neighbour import cpu_neighbour

# pytest's last line: "==== 3 passed, 1 failed in 12.34s ====" (no rules with -q).
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|errors?|skipped|deselected)\b.*?) in ([\d.]+)s", re.MULTILINE)
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def one_run(number: int, pytest_args: list[str], logs: Path, neighbour: bool) -> tuple[int, str, list[str], float]:
    log = logs / f"run-{number:02d}.log"
    # The fault suite writes its figures table and a failed scenario's node and etcd logs to these: one
    # of each per run, kept beside the run's log instead of overwritten by the next run.
    env = {
        **os.environ,
        "SHARDCRON_FAULT_FIGURES": str(logs / f"run-{number:02d}-FIGURES.md"),
        "SHARDCRON_FAULT_LOGS": str(logs / f"run-{number:02d}-kept"),
    }
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if neighbour:
            stack.enter_context(cpu_neighbour(sorted(os.sched_getaffinity(0))))
        with log.open("w") as out:
            rc = subprocess.run(
                [sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", *pytest_args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            ).returncode
    text = log.read_text(errors="replace")
    summary = SUMMARY.findall(text)
    counts = summary[-1][0] if summary else f"no pytest summary (exit {rc})"
    return rc, counts, FAILED.findall(text), time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="how many runs in a row (default 10)")
    parser.add_argument("--neighbour", choices=["none", "cpu"], default="cpu", help="what else wants the CPUs")
    parser.add_argument(
        "--logs", type=Path, default=None, help="where each run's log goes (default: a new folder in test-artifacts/)"
    )
    parser.add_argument("pytest_args", nargs="*", help="what to run, as pytest takes it (after --)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    logs = (args.logs or Path("test-artifacts") / f"repeat-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    logs.mkdir(parents=True, exist_ok=True)
    print(
        f"repeat: {args.runs} runs of pytest {' '.join(args.pytest_args)}, neighbour {args.neighbour}; logs in {logs}"
    )
    failed_runs = 0
    for number in range(1, args.runs + 1):
        rc, counts, failures, seconds = one_run(number, args.pytest_args, logs, args.neighbour == "cpu")
        failed_runs += rc != 0
        verdict = "ok" if rc == 0 else f"FAILED (exit {rc})"
        print(f"run {number:2d}/{args.runs}: {verdict:<16} {counts}, {seconds:.0f} s", flush=True)
        for test in failures:
            print(f"          {test}", flush=True)
    print(f"repeat: {args.runs - failed_runs} of {args.runs} runs passed")
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
