"""A crontab (Vixie cron, cronie) as shardcron jobs: each entry a ``shell`` job, every other line accounted for.

* Schedules: five fields in every form cron has, or a macro (``importers.cron_fields``); ``@reboot`` is refused.
* ``CRON_TZ=Zone`` sets the timezone the schedules of the lines after it are read in (cronie's rule, per
  entry); ``TZ=Zone`` does too when no ``CRON_TZ`` was given (with a note: to cron it was also the commands'
  environment). Lines before either are read in ``timezone`` (the machine's zone, which cron used).
* Other environment lines (``MAILTO``, ``PATH``, ``SHELL``, ...) are file-level notes; a job whose command
  names one (``$NAME``), or which ran under a changed ``PATH`` or ``SHELL``, carries a note too.
* ``%``: cron ends the command at the first unescaped ``%`` and feeds the rest to its stdin, each further
  ``%`` a newline; the job's command does the same with ``printf`` into ``/bin/sh -c``. ``\\%`` is a ``%``.
* ``system``: the lines of ``/etc/crontab`` or ``/etc/cron.d``, whose sixth field names the user to run as.
* Each job keeps cron's overlap (a slot starts even while the last run still goes: ``overlap = "allow"``).
"""

from __future__ import annotations

import re
import shlex

from shardcron.errors import InvalidJob
from shardcron.importers.cron_fields import UnsupportedSchedule, translate_schedule
from shardcron.importers.result import Imported, ImportResult, Refused, UniqueIds, id_stem
from shardcron.spec.bounds import shown
from shardcron.spec.job import job_from_dict

_ENV_LINE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*)$")
_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
_SCHEDULE_VARS = ("CRON_TZ", "TZ")
_ENV_MEANING = {
    "MAILTO": "cron mailed each job's output there; shardcron keeps each run's outcome in its ticks "
    "(on_failure can notify)",
    "MAILFROM": "the sender of cron's mail; shardcron sends none",
    "CRON_TZ": "the schedules of the lines after it are read in this zone",
    "TZ": "the commands after it saw TZ; their schedules are read in this zone unless CRON_TZ is set",
    "SHELL": "the commands after it ran with this shell; shardcron's shell executor runs /bin/sh -c",
    "RANDOM_DELAY": "cronie delayed each job by up to this many minutes; shardcron's jitter does that",
}
FILE_NOTES = (
    "each job is a shell job: nodes run them only when started with --allow-shell",
    "cron never stopped a run; shardcron stops one after its timeout (default 1m): set timeout on jobs that run longer",
    'cron started every slot even while the last run still went: each job keeps that (overlap = "allow")',
)


def import_crontab(text: str, source_name: str, *, system: bool = False, timezone: str = "UTC") -> ImportResult:
    """The jobs of crontab ``text`` (named ``source_name`` in notes); ``system``: a sixth field names the user."""
    result = ImportResult(notes=list(FILE_NOTES))
    env: dict[str, tuple[int, str]] = {}  # name -> (line number, value), as set so far
    ids = UniqueIds()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source_name} line {number}"
        assignment = _ENV_LINE.match(line)
        if assignment:
            name, value = assignment["name"], _unquoted(assignment["value"].strip())
            env[name] = (number, value)
            meaning = _ENV_MEANING.get(name, "the commands after it saw it in their environment; the node's applies")
            result.notes.append(f"line {number}: {name}={value}: {meaning}")
            continue
        entry = _entry(line, where, env, system, timezone, ids)
        if isinstance(entry, Refused):
            result.refused.append(entry)
        else:
            result.jobs.append(entry)
    return result


def _entry(
    line: str, where: str, env: dict[str, tuple[int, str]], system: bool, timezone: str, ids: UniqueIds
) -> Imported | Refused:
    """One schedule line as a job, or why it cannot be one."""
    fields = 1 if line.startswith("@") else 5
    words = line.split(None, fields + (1 if system else 0))
    if len(words) < fields + (2 if system else 1):
        wanted = "a macro" if fields == 1 else "five schedule fields"
        return Refused(where, f"expected {wanted}, {'a user, ' if system else ''}then a command", line)
    schedule_text, rest = " ".join(words[:fields]), words[fields:]
    notes: list[str] = []
    if system:
        notes.append(f"cron ran it as the user {shown(rest[0])}; shardcron runs it as the node's user")
        rest = rest[1:]
    try:
        translated = translate_schedule(schedule_text, "vixie")
    except UnsupportedSchedule as e:
        return Refused(where, str(e), line)
    command, stdin_note = _command(rest[0])
    notes += [*translated.notes, *stdin_note, *_env_notes(rest[0], env)]
    zone = env.get("CRON_TZ", env.get("TZ", (0, timezone)))[1]
    job = {
        "id": ids.take(id_stem(rest[0])),
        "cron": translated.cron,
        "timezone": zone,
        "overlap": "allow",
        "executor": {"kind": "shell", "command": command},
    }
    try:
        job_from_dict(job, require_executor=True)
    except InvalidJob as e:
        return Refused(where, f"shardcron refuses it: {e}", line)
    return Imported(where, job, tuple(notes))


def _command(text: str) -> tuple[str, list[str]]:
    """Cron's command field as a shell command, and a note when its ``%`` stdin was translated."""
    parts, current, chars = [], [], iter(text)
    for c in chars:
        if c == "\\":
            following = next(chars, "")
            current.append("%" if following == "%" else c + following)
        elif c == "%":
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    if len(parts) == 1:
        return parts[0], []
    stdin = "\n".join(parts[1:])
    if stdin and not stdin.endswith("\n"):
        stdin += "\n"  # cron ends the input with a newline when it has none
    piped = f"printf %s {shlex.quote(stdin)} | /bin/sh -c {shlex.quote(parts[0])}"
    return piped, ["cron fed the text after '%' to the command's stdin; printf pipes it in"]


def _env_notes(command: str, env: dict[str, tuple[int, str]]) -> list[str]:
    """Notes on the environment lines ``command`` depended on."""
    used = {m["braced"] or m["bare"] for m in _VARIABLE.finditer(command)}
    notes = [
        f"uses ${name}, which line {number} set to {shown(value)}; set it in the node's environment or the command"
        for name, (number, value) in env.items()
        if name in used and name not in _SCHEDULE_VARS
    ]
    if "PATH" in env and "PATH" not in used:
        number, value = env["PATH"]
        notes.append(f"cron ran it with PATH={value} (line {number}); the node's PATH applies instead")
    if env.get("SHELL", (0, "/bin/sh"))[1] != "/bin/sh":
        number, value = env["SHELL"]
        notes.append(f"cron ran it with SHELL={value} (line {number}); shardcron runs /bin/sh -c")
    if "TZ" in env:
        number, value = env["TZ"]
        schedule = "; its schedule is read in that zone" if "CRON_TZ" not in env else ""
        notes.append(f"cron ran it with TZ={value} (line {number}){schedule}")
    return notes


def _unquoted(value: str) -> str:
    """An environment value as cron reads it: one pair of matching outer quotes removed."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value
