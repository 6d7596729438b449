"""Which page is generated from what: the page's path and the function that renders its generated part."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from shardcron.dev.docs_reference.markdown import REGENERATE, entries, generated_part, splice

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT / "docs" / "reference"

# Page -> the module whose ``render()`` writes its generated part. Imported one at a time, when asked for.
PAGES: dict[str, str] = {
    "api.md": "shardcron.dev.docs_reference.api",
    "cli.md": "shardcron.dev.docs_reference.cli",
    "executors.md": "shardcron.dev.docs_reference.executors",
    "job-file.md": "shardcron.dev.docs_reference.job_file",
    "limits.md": "shardcron.dev.docs_reference.limits",
    "metrics.md": "shardcron.dev.docs_reference.metrics",
    "sharding.md": "shardcron.dev.docs_reference.sharding",
}


def renderer(page: str) -> Callable[[], str]:
    render: Callable[[], str] = importlib.import_module(PAGES[page]).render
    return render


def fresh(page: str, current: str | None = None) -> str:
    """The page as the generator writes it: ``current`` (else the file) with a fresh generated part."""
    path = REFERENCE / page
    text = path.read_text(encoding="utf-8") if current is None else current
    return splice(text, renderer(page)(), str(path.relative_to(ROOT)))


def drift(page: str, committed: str, generated: str, most: int = 20) -> str:
    """Why ``committed`` is not ``generated``: the entries (flags, keys, metrics, RPCs, ...) that have no
    entry on the page, those the page names that the code no longer has, the rows that changed, and how
    to regenerate. Empty when they are the same."""
    if committed == generated:
        return ""
    old, new = generated_part(committed), generated_part(generated)
    old_entries, new_entries = entries(old), entries(new)
    missing = [e for e in new_entries if e not in old_entries]
    gone = [e for e in old_entries if e not in new_entries]
    old_lines, new_lines = set(old.splitlines()), set(new.splitlines())
    changed = [line for line in new.splitlines() if line not in old_lines and line.startswith("|")]
    changed = [line for line in changed if not any(line.startswith(f"| {e.rpartition(': ')[2]} |") for e in missing)]
    said = [f"docs/reference/{page} differs from what the code generates:"]
    if missing:
        said.append(f"  not on the page, but in the code: {', '.join(missing[:most])}")
    if gone:
        said.append(f"  on the page, but no longer in the code: {', '.join(gone[:most])}")
    if changed:
        said.append("  rows that changed (as the code has them now):")
        said += [f"    {line}" for line in changed[:most]]
    if not (missing or gone or changed):
        stale = [line for line in old.splitlines() if line not in new_lines][:most]
        said.append("  the text around the generated part changed" if not stale else "  lines that changed:")
        said += [f"    {line}" for line in stale]
    said.append(f"regenerate with `{REGENERATE}` (python -m shardcron.dev.docs_reference), then review and commit")
    return "\n".join(said)


__all__ = ["PAGES", "REFERENCE", "ROOT", "drift", "fresh", "renderer"]
