"""Admission: the checks of a valid job that depend on the node's flags, the cluster's minimum interval and the clock."""

from datetime import datetime

import pytest

from shardcron.errors import InvalidJob
from shardcron.executors.admission import check_admissible
from shardcron.model import Job
from shardcron.spec.bounds import DEFAULT_MIN_INTERVAL_MS
from shardcron.spec.durations import format_duration_ms
from shardcron.spec.job import job_from_dict


def utc_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()) * 1000


NOW = utc_ms("2026-06-01T12:00:00Z")
SHELL = job_from_dict({"id": "s", "every": "5s", "executor": {"kind": "shell", "command": "true"}})


def once(at_ms: int, window: str = "1h") -> Job:
    return job_from_dict({"id": "o", "at_ms": at_ms, "catchup_window": window})


@pytest.mark.parametrize(
    "job_, allow_shell",
    [
        (SHELL, True),
        (job_from_dict({"id": "n", "every": "5s"}), False),
        (once(NOW + 1), False),
        (once(NOW), False),
        (once(NOW - 3_600_000), False),  # exactly at the window's edge: still runs
        (once(NOW, window="0s"), False),
        (job_from_dict({"id": "c", "cron": "0 0 1 1 *"}), False),
    ],
)
def test_admissible(job_, allow_shell):
    check_admissible(job_, allow_shell=allow_shell, now_ms=NOW)


@pytest.mark.parametrize(
    "job_, field",
    [
        (SHELL, "executor.kind"),  # no --allow-shell: remote code execution guard
        (once(NOW - 3_600_001), "schedule.at"),  # past, beyond the window: it would never run
        (once(NOW - 1, window="0s"), "schedule.at"),
        (once(utc_ms("2020-01-01T00:00:00Z"), window="24h"), "schedule.at"),
    ],
)
def test_not_admissible(job_, field):
    with pytest.raises(InvalidJob) as err:
        check_admissible(job_, allow_shell=False, now_ms=NOW)
    assert err.value.field == field


# --- the minimum interval ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule, minimum_ms, admitted",
    [
        ({"every": "1ms"}, DEFAULT_MIN_INTERVAL_MS, False),
        ({"every": "999ms"}, DEFAULT_MIN_INTERVAL_MS, False),
        ({"every": "1s"}, DEFAULT_MIN_INTERVAL_MS, True),
        ({"every": "1ms"}, 0, True),  # --min-interval 0: any interval
        ({"every": "100ms"}, 100, True),
        ({"cron": "* * * * * *"}, DEFAULT_MIN_INTERVAL_MS, True),
        ({"cron": "* * * * * *"}, 2_000, False),
        ({"cron": "*/5 * * * *"}, 600_000, False),  # 5 fields: every 5 min is below a 10 min minimum
        ({"cron": "0 9 * * 1-5"}, 3_600_000, True),
        ({"at": "2030-01-01T00:00:00Z"}, 3_600_000, True),  # a single run has no gap
    ],
)
def test_min_interval(schedule, minimum_ms, admitted):
    j = job_from_dict({"id": "m", **schedule, "executor": {"kind": "noop"}})
    if admitted:
        check_admissible(j, allow_shell=False, now_ms=NOW, min_interval_ms=minimum_ms)
        return
    with pytest.raises(InvalidJob) as err:
        check_admissible(j, allow_shell=False, now_ms=NOW, min_interval_ms=minimum_ms)
    assert err.value.field == ("schedule.cron" if "cron" in schedule else "schedule.every")
    assert format_duration_ms(minimum_ms) in err.value.reason and "--min-interval" in err.value.reason


def test_the_default_minimum_applies_when_none_is_given():
    with pytest.raises(InvalidJob, match="minimum interval of 1s"):
        check_admissible(job_from_dict({"id": "e2", "every": "1ms"}), allow_shell=False, now_ms=NOW)
