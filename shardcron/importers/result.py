"""What an importer returns: the jobs it translated, the entries it refused, and notes for the whole file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from shardcron.spec.fields import MAX_JOB_ID_BYTES


@dataclass(frozen=True)
class Imported:
    """One source entry translated into a job.

    ``job`` is the job's table as a job file holds it (``spec.job.job_from_dict`` reads it, ``id`` included);
    ``source`` says where it came from ("crontab line 12", "beat_schedule['nightly']"); ``notes`` say what was
    approximated or left out, and are written as comments above the job.
    """

    source: str
    job: dict[str, Any]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    """A source entry that could not be expressed: written as a comment with ``reason``, never dropped."""

    source: str
    reason: str
    text: str = ""  # the entry as the source wrote it, where it has a text form


@dataclass
class ImportResult:
    """An importer's whole answer. ``notes`` are comments for the top of the file (environment lines, a hint for
    the workers' side); ``jobs`` and ``refused`` keep the source's order."""

    jobs: list[Imported] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_NOT_ID = re.compile(r"[^a-z0-9]+")
ID_STEM_CHARS = 48


def id_stem(text: str, fallback: str = "job") -> str:
    """A readable job id stem from ``text`` (a command, an entry's name): lower-case letters and digits joined by
    dashes, at most ``ID_STEM_CHARS`` characters; ``fallback`` when nothing readable is left."""
    stem = _NOT_ID.sub("-", text.lower()).strip("-")[:ID_STEM_CHARS].strip("-")
    return stem or fallback


class UniqueIds:
    """Hands out job ids unique within one import: a stem taken already gets ``-2``, ``-3``, ... appended."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, stem: str) -> str:
        stem = stem[: MAX_JOB_ID_BYTES - 8]
        candidate, n = stem, 1
        while candidate in self._taken:
            n += 1
            candidate = f"{stem}-{n}"
        self._taken.add(candidate)
        return candidate
