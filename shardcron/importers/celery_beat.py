"""Celery beat's schedule as shardcron jobs: one ``celery`` job per ``beat_schedule`` entry, sent to the app's
broker, each slot enqueued once by the shard's leader.

``import_celery_beat("proj.celery:app")`` imports the module, reads the app's ``beat_schedule``, ``timezone``,
``enable_utc`` and ``broker_url``, and translates each entry. ``"proj.celery"`` finds the Celery app in the
module, or reads a Django-style settings module (``CELERY_BEAT_SCHEDULE``, ``CELERY_TIMEZONE``/``TIME_ZONE``,
``CELERY_ENABLE_UTC``, ``CELERY_BROKER_URL``; or the lower-case names).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from shardcron.errors import InvalidJob
from shardcron.importers.result import Imported, ImportResult, Refused, UniqueIds, id_stem
from shardcron.importers.translate import (
    EntryRefused,
    SourceUnreadable,
    as_json,
    cron_field,
    json_problem,
    ms_text,
    require,
)
from shardcron.spec.job import job_from_dict

# Celery's own default when an app names no broker (its ``broker_url`` setting).
CELERY_DEFAULT_BROKER = "amqp://guest@localhost:5672//"
# Options of an entry that the celery executor takes under the same name.
_OPTIONS_KEPT = ("queue", "routing_key", "priority")
_ENTRY_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})
DEDUPE_NOTE = (
    "Exactly once on the workers' side: decorate each task under @app.task with "
    "@dedupe(guard) from shardcron.consumer (guard = RedisDeduper(...) or SqlDeduper(...)), which refuses a "
    "second copy of a slot and a deposed leader's late one. Stop `celery beat` (and drop `-B` from workers) "
    "before these jobs run, or every slot is sent twice."
)


@dataclass(frozen=True)
class BeatSource:
    """What an app (or a settings module) says about its periodic tasks."""

    schedule: Mapping[str, Any]
    timezone: str | None  # as configured; None: not set
    enable_utc: bool
    broker_url: str | None


def import_celery_beat(app_ref: str) -> ImportResult:
    """The app's beat schedule as celery jobs; ``app_ref`` is ``module:attribute`` or ``module``.
    Raises ``SourceUnreadable`` when the module does not import or holds no app or schedule."""
    require("celery.schedules", "reading a Celery beat schedule", "pip install 'shardcron[celery]'")
    return translate_beat(load_beat_source(app_ref))


def translate_beat(source: BeatSource) -> ImportResult:
    result = ImportResult(notes=[DEDUPE_NOTE])
    timezone = _timezone(source, result.notes)
    broker = source.broker_url
    if not broker:
        broker = CELERY_DEFAULT_BROKER
        result.notes.append(f"The app names no broker_url: the jobs use Celery's default, {broker}.")
    ids = UniqueIds()
    for name, entry in source.schedule.items():
        where = f"beat_schedule[{name!r}]"
        try:
            job, notes = _job(str(name), entry, timezone, broker, ids)
        except EntryRefused as refusal:
            result.refused.append(Refused(where, refusal.reason, repr(entry)[:500]))
            continue
        try:
            job_from_dict(job, require_executor=True)
        except InvalidJob as e:
            result.refused.append(Refused(where, f"shardcron refuses the job it becomes: {e}", repr(entry)[:500]))
            continue
        result.jobs.append(Imported(where, job, tuple(notes)))
    return result


def _timezone(source: BeatSource, notes: list[str]) -> str:
    """The zone beat reads crontabs in: ``timezone``, else UTC with ``enable_utc`` (Celery's app.timezone)."""
    if source.timezone:
        return source.timezone
    if not source.enable_utc:
        notes.append(
            "The app sets no timezone and enable_utc = False: beat read its crontabs in this machine's local "
            "time. The jobs say UTC; set timezone on each to the zone beat ran in."
        )
    return "UTC"


def _job(name: str, entry: Any, timezone: str, broker: str, ids: UniqueIds) -> tuple[dict[str, Any], list[str]]:
    if not isinstance(entry, Mapping):
        raise EntryRefused(f"an entry must be a dict with task and schedule, got {type(entry).__name__}")
    task = entry.get("task")
    if not isinstance(task, str) or not task:
        raise EntryRefused("the entry names no task")
    notes = [f"entry key {key!r} is not carried over" for key in sorted(set(entry) - _ENTRY_KEYS, key=str)]
    schedule = _schedule(entry.get("schedule"), bool(entry.get("relative", False)), timezone, notes)
    executor: dict[str, Any] = {"kind": "celery", "url": broker, "task": task}
    for key in ("args", "kwargs"):
        value = entry.get(key)
        if value is None or value == () or value == [] or value == {}:
            continue
        problem = json_problem(value, key)
        if problem:
            raise EntryRefused(f"{key} must travel as JSON: {problem}")
        executor[key] = as_json(value)
    executor.update(_options(entry.get("options") or {}, notes))
    return {"id": ids.take(id_stem(name)), **schedule, "catchup": "latest", "executor": executor}, notes


def _schedule(raw: Any, relative: bool, timezone: str, notes: list[str]) -> dict[str, Any]:
    """The schedule keys of the job for beat's ``schedule`` value."""
    from celery.schedules import crontab, schedule, solar

    if isinstance(raw, crontab):
        return {"cron": crontab_expression(raw), "timezone": timezone}
    if isinstance(raw, solar):
        raise EntryRefused(
            f"solar({raw.event!r}, {raw.lat}, {raw.lon}) follows the sun; shardcron schedules are cron, "
            "intervals or single runs"
        )
    if type(raw) is schedule:
        return _every(raw.run_every, relative or raw.relative, notes)
    if isinstance(raw, timedelta | int | float) and not isinstance(raw, bool):
        return _every(raw if isinstance(raw, timedelta) else timedelta(seconds=raw), relative, notes)
    cls = type(raw)
    raise EntryRefused(f"a schedule of class {cls.__module__}.{cls.__qualname__} has no shardcron equivalent")


def crontab_expression(c: Any) -> str:
    """A 5-field cron expression with exactly the crontab's minutes, hours, days and months (crontab's
    parsed sets; Sunday is 0 in both). Refused when both days are restricted: beat needs the day of the
    month AND the weekday to match, cron either of them."""
    if c.nowfun is not None:
        raise EntryRefused("the crontab has its own nowfun (a clock of its own): when it fires cannot be known")
    days = cron_field(c.day_of_month, 1, 31)
    weekdays = cron_field(c.day_of_week, 0, 6)
    if days != "*" and weekdays != "*":
        raise EntryRefused(
            f"day_of_month ({days}) and day_of_week ({weekdays}, Sunday 0) are both given: "
            "beat runs when both match, cron when either does; split it into a job per weekday, or "
            "check the weekday in the task"
        )
    return " ".join(
        (cron_field(c.minute, 0, 59), cron_field(c.hour, 0, 23), days, cron_field(c.month_of_year, 1, 12), weekdays)
    )


def _every(period: timedelta, relative: bool, notes: list[str]) -> dict[str, Any]:
    ms = round(period.total_seconds() * 1000)
    if ms <= 0:
        raise EntryRefused(f"the interval must be positive, got {period}")
    if period != timedelta(milliseconds=ms):
        notes.append(f"the interval {period} is rounded to {ms} ms")
    notes.append(
        "beat ran this interval from its own last run"
        + (", rounded down to the interval's unit (relative=True)" if relative else "")
        + "; shardcron runs it at whole multiples of it since 1970-01-01 00:00 UTC (every 1h, for one, runs on the hour)"
    )
    return {"every": ms_text(ms)}


def _options(options: Any, notes: list[str]) -> dict[str, Any]:
    """The executor keys for an entry's ``options``; what the celery executor has no key for goes in notes."""
    if not isinstance(options, Mapping):
        raise EntryRefused(f"options must be a dict, got {type(options).__name__}")
    keys: dict[str, Any] = {k: options[k] for k in _OPTIONS_KEPT if options.get(k) is not None}
    expires = options.get("expires")
    if isinstance(expires, int | float) and not isinstance(expires, bool):
        keys["expires"] = ms_text(round(expires * 1000))
    elif expires is not None:
        notes.append(
            f"options expires={expires!r} is not carried over: a fixed time cannot repeat; the celery "
            "executor's expires is a duration after each slot"
        )
    for key in sorted(set(options) - set(_OPTIONS_KEPT) - {"expires"}, key=str):
        notes.append(f"options {key}={options[key]!r:.80} is not carried over: the celery executor has no such key")
    return keys


# -- reading the app ---------------------------------------------------------------------------------


def load_beat_source(app_ref: str) -> BeatSource:
    """The schedule ``app_ref`` names: ``module:attribute`` (an app, dotted attributes allowed), or ``module``
    (the Celery app in it, else its settings)."""
    module_name, colon, attribute = app_ref.partition(":")
    if not module_name or (colon and not attribute):
        raise SourceUnreadable(f"{app_ref!r} is not module:attribute or module, such as proj.celery:app")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as e:  # a user's module may raise anything, even SystemExit
        hint = " (run the import where the project's modules import: its directory on PYTHONPATH)"
        missing = isinstance(e, ModuleNotFoundError)
        raise SourceUnreadable(
            f"module {module_name!r} does not import: {type(e).__name__}: {e}{hint if missing else ''}"
        ) from None
    if colon:
        target: Any = module
        for part in attribute.split("."):
            if not hasattr(target, part):
                raise SourceUnreadable(f"module {module_name!r} has no attribute {attribute!r}")
            target = getattr(target, part)
        if not hasattr(target, "conf"):
            raise SourceUnreadable(f"{app_ref} is a {type(target).__name__}, not a Celery app")
        return _app_source(target, app_ref)
    return _module_source(module, module_name)


def _app_source(app: Any, where: str) -> BeatSource:
    conf = app.conf
    schedule = conf.beat_schedule or {}
    if not isinstance(schedule, Mapping):
        raise SourceUnreadable(f"{where}: beat_schedule must be a dict, got {type(schedule).__name__}")
    timezone = conf.timezone
    return BeatSource(
        schedule=schedule,
        timezone=None if not timezone else _zone_name(timezone),
        enable_utc=bool(conf.enable_utc),
        broker_url=conf.broker_url,
    )


def _zone_name(zone: Any) -> str:
    """A configured timezone's IANA name: a string as given, a zoneinfo or pytz zone by its key."""
    return str(getattr(zone, "key", None) or getattr(zone, "zone", None) or zone)


def _module_source(module: Any, name: str) -> BeatSource:
    from celery import Celery

    apps = [v for v in vars(module).values() if isinstance(v, Celery)]
    if len(apps) > 1:
        raise SourceUnreadable(f"module {name!r} holds {len(apps)} Celery apps: name one, as {name}:app")
    if apps:
        return _app_source(apps[0], name)
    schedule = _setting(module, "CELERY_BEAT_SCHEDULE", "beat_schedule")
    if schedule is None:
        raise SourceUnreadable(f"module {name!r} holds no Celery app, CELERY_BEAT_SCHEDULE nor beat_schedule")
    if not isinstance(schedule, Mapping):
        raise SourceUnreadable(f"module {name!r}: the beat schedule must be a dict, got {type(schedule).__name__}")
    enable_utc = _setting(module, "CELERY_ENABLE_UTC", "enable_utc")
    return BeatSource(
        schedule=schedule,
        timezone=_setting(module, "CELERY_TIMEZONE", "timezone") or _setting(module, "TIME_ZONE", "TIME_ZONE"),
        enable_utc=True if enable_utc is None else bool(enable_utc),
        broker_url=_setting(module, "CELERY_BROKER_URL", "broker_url"),
    )


def _setting(module: Any, django_name: str, celery_name: str) -> Any:
    return getattr(module, django_name, getattr(module, celery_name, None))


__all__ = ["BeatSource", "import_celery_beat", "crontab_expression", "load_beat_source", "translate_beat"]
