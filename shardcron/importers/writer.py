"""An ``ImportResult`` written as a job file: TOML (default), YAML or JSON.

TOML and YAML carry every note and refusal as ``#`` comments: the file's notes at the top, each job's source
and notes above it, each refused entry (its source, its text, the reason) where it stood. JSON has no comments,
so ``render`` returns them beside the text for the caller to print. ``spec.jobfile.load_job_file`` reads any of
the three back as exactly the imported jobs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from shardcron.importers.result import Imported, ImportResult, Refused
from shardcron.spec.toml_text import toml_key, toml_string, toml_value

FORMATS = ("toml", "yaml", "json")
# Characters a comment line must not hold (TOML allows none but tab; a newline would end the comment).
_NOT_IN_COMMENT = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\u0085\u2028\u2029]")


@dataclass(frozen=True)
class Rendered:
    """The file's text, and the comments a format without comments (JSON) could not hold."""

    text: str
    comments: tuple[str, ...] = ()


def render(result: ImportResult, fmt: str = "toml", namespace: str | None = None) -> Rendered:
    """``result`` as a job file in ``fmt``; ``namespace``: the file's top-level ``namespace``."""
    if fmt == "json":
        data: dict[str, Any] = {"namespace": namespace} if namespace is not None else {}
        data["jobs"] = [imported.job for imported in result.jobs]
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        return Rendered(text, tuple(_comment_texts(result)))
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    toml = fmt == "toml"
    out = [comment(note) for note in result.notes]
    if namespace is not None:
        out.append(f"namespace = {toml_string(namespace)}" if toml else _yaml_value({"namespace": namespace}))
    if not result.jobs:
        out.append("jobs = []" if toml else "jobs: []")
    elif not toml:
        out.append("jobs:")
    for entry in _jobs_then_refusals(result):
        if isinstance(entry, Refused):
            out.append("\n" + "\n".join(comment(line) for line in _refused_lines(entry)))
            continue
        lines = [comment(f"from {entry.source}")] + [comment(f"note: {n}") for n in entry.notes]
        body = toml_job(entry.job) if toml else _yaml_value([entry.job]).rstrip("\n")
        out.append("\n" + "\n".join(lines) + "\n" + body)
    return Rendered("\n".join(out) + "\n")


def comment(text: str) -> str:
    """``text`` as one comment line, any character that would break the line shown escaped."""
    shown = _NOT_IN_COMMENT.sub(lambda m: json.dumps(m[0])[1:-1], text)
    return f"# {shown}".rstrip()


def toml_job(job: dict[str, Any]) -> str:
    return "[[jobs]]\n" + "\n".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in job.items())


class _PlainDumper(yaml.SafeDumper):
    """SafeDumper writing each value out: a job file's loader refuses anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _yaml_value(value: Any) -> str:
    return yaml.dump(value, Dumper=_PlainDumper, allow_unicode=True, sort_keys=False, width=1_000_000)


def _jobs_then_refusals(result: ImportResult) -> list[Imported | Refused]:
    """Jobs, then refusals: each list keeps the source's order; a refusal reads best after the jobs."""
    return [*result.jobs, *result.refused]


def _refused_lines(entry: Refused) -> list[str]:
    lines = [f"refused: {entry.source}: {entry.reason}"]
    lines += [f"  | {line}" for line in entry.text.splitlines()]
    return lines


def _comment_texts(result: ImportResult) -> list[str]:
    texts = list(result.notes)
    for imported in result.jobs:
        texts += [f"{imported.job.get('id')} ({imported.source}): {note}" for note in imported.notes]
    for entry in result.refused:
        texts += _refused_lines(entry)
    return texts
