"""What the RESULT column of `shardcron ticks` shows for each kind of outcome."""

import pytest

from shardcron.cli.output import TICK_HEADERS, tick_row
from shardcron.model import Tick, TickStatus

BASE = dict(job_id="j", scheduled_at_ms=0, shard=0, fence=1, node_id="n1", status=TickStatus.SUCCEEDED)


@pytest.mark.parametrize(
    ("outcome", "shown"),
    [
        ({"error": "timed out after 5 s\nstack"}, "timed out after 5 s"),
        ({"http_status": 204, "output": "ignored"}, "http 204"),
        ({"exit_code": 3, "output": "hello"}, "exit 3"),
        ({"output": "celery task 5f0c2a\nmore"}, "celery task 5f0c2a"),
        ({"output": "x" * 100}, "x" * 60),
        ({}, "-"),
    ],
)
def test_the_result_column_shows_the_first_line_of_what_the_tick_left(outcome, shown):
    row = tick_row(Tick(**BASE, **outcome))
    assert row[TICK_HEADERS.index("RESULT")] == shown
