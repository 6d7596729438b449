"""The tutorials' own steps, run: what a page says a command writes is what the command writes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CELERY_BEAT = ROOT / "docs" / "tutorials" / "replacing-celery-beat.md"


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)


def test_the_celery_beat_tutorials_import_writes_the_job_file_it_shows(tmp_path):
    page = CELERY_BEAT.read_text(encoding="utf-8")
    (tasks,) = [b for b in fenced_blocks(page, "python") if b.startswith("# tasks.py")]
    (shown,) = [b for b in fenced_blocks(page, "toml") if "[[jobs]]" in b]
    (command,) = [b.strip() for b in fenced_blocks(page, "sh") if b.startswith("shardcron import celery-beat")]
    (tmp_path / "tasks.py").write_text(tasks, encoding="utf-8")

    args = command.split()[1:]
    out = subprocess.run(
        [sys.executable, "-m", "shardcron", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "2 jobs" in out.stderr + out.stdout  # the line the page says it prints
    assert (tmp_path / "jobs.toml").read_text(encoding="utf-8") == shown
