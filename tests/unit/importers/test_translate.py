"""What the Python schedulers' importers share: cron fields from value sets, JSON arguments, durations."""

from __future__ import annotations

import math
from datetime import datetime

import pytest
from croniter import croniter
from hypothesis import given
from hypothesis import strategies as st

from shardcron.importers.translate import SourceUnreadable, cron_field, json_problem, ms_text, require
from shardcron.spec.durations import parse_duration_ms


@pytest.mark.parametrize(
    "values, lowest, highest, text",
    [
        (range(60), 0, 59, "*"),
        ({0}, 0, 59, "0"),
        ({0, 30}, 0, 59, "0,30"),
        ({1, 2}, 0, 59, "1,2"),
        ({1, 2, 3}, 0, 59, "1-3"),
        ({9, 10, 11, 12, 13, 20, 21}, 0, 23, "9-13,20,21"),
        (range(1, 32), 1, 31, "*"),
        (range(1, 31), 1, 31, "1-30"),
        ({0, 6}, 0, 6, "0,6"),
    ],
)
def test_a_value_set_becomes_the_shortest_field_text(values, lowest, highest, text):
    assert cron_field(values, lowest, highest) == text


@given(st.sets(st.integers(0, 59), min_size=1), st.sets(st.integers(0, 23), min_size=1))
def test_croniter_reads_back_exactly_the_values(minutes, hours):
    expr = f"{cron_field(minutes, 0, 59)} {cron_field(hours, 0, 23)} * * *"
    minute_field, hour_field = croniter(expr, datetime(2030, 1, 1)).expanded[:2]
    assert expanded(minute_field, 60) == minutes
    assert expanded(hour_field, 24) == hours


def expanded(field: list, size: int) -> set[int]:
    return set(range(size)) if field == ["*"] else {int(v) for v in field}


@pytest.mark.parametrize(
    "value, problem",
    [
        ([1, "a", None, True, 2.5, {"k": [1]}], None),
        ((1, (2, 3)), None),
        ([object()], "[0] is a object"),
        ({"a": {"b": {1, 2}}}, "['a']['b'] is a set"),
        ({1: "x"}, "the key 1"),
        ([math.inf], "[0] is inf"),
        (b"bytes", "is a bytes"),
    ],
)
def test_values_that_json_does_not_hold_are_named_where_they_are(value, problem):
    found = json_problem(value, "args")
    assert found == problem if problem is None else problem in found


@given(st.integers(1, 10 * 365 * 86_400_000))
def test_a_duration_reads_back_as_the_same_milliseconds(ms):
    assert parse_duration_ms(ms_text(ms), "d") == ms


def test_a_scheduler_that_is_not_installed_is_named_with_how_to_install_it():
    with pytest.raises(SourceUnreadable, match=r"needs no_such_scheduler here: pip install it"):
        require("no_such_scheduler.stores", "reading its store", "pip install it")
