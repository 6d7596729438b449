"""Celery beat's own reading of a ``crontab``: the reference the beat importer's slots are held to, by its unit
tests (tests/unit/importers) and by the round trip through a real node (tests/integration/cli)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from celery.schedules import crontab


def crontab_admits(c: crontab, local: datetime) -> bool:
    """Whether beat's crontab admits the local wall-clock minute ``local``: its own sets, day of the month AND
    weekday (Sunday 0), as ``crontab.is_due`` reads them."""
    return (
        local.minute in c.minute
        and local.hour in c.hour
        and local.day in c.day_of_month
        and local.month in c.month_of_year
        and local.isoweekday() % 7 in c.day_of_week
    )
