"""Every ShardcronError pickles as itself: a worker pool, arq's results and multiprocessing send errors that way."""

from __future__ import annotations

import pickle

import grpc
import pytest

from shardcron.client.errors import NotFound
from shardcron.consumer import NotATick
from shardcron.errors import ConfigError, FencedOut, InvalidJob, JobRunning, ShardcronError, VersionConflict
from shardcron.executors.extras import MissingExtra
from shardcron.model import ExecutorKind, SlotRef
from shardcron.spec.calendar import CalendarError
from shardcron.store.effects import TickNotOwned

ERRORS = [
    pytest.param(NotATick(None, "f was called without one"), id="not-a-tick"),
    pytest.param(NotATick("shardcron_fence", "missing"), id="not-a-tick-field"),
    pytest.param(ConfigError("--ttl must be at least 2"), id="message-only"),
    pytest.param(InvalidJob("every", "must be at least 1s"), id="field-and-reason"),
    pytest.param(MissingExtra(ExecutorKind.CELERY, "celery", "celery"), id="subclass-of-a-subclass"),
    pytest.param(FencedOut(3, 41, 57), id="numbers"),
    pytest.param(VersionConflict("nightly", 2, 3), id="version-conflict"),
    pytest.param(JobRunning("nightly"), id="job-running"),
    pytest.param(TickNotOwned(SlotRef("nightly", 1_767_225_600_000), 9), id="tuple-argument"),
    pytest.param(CalendarError("holidays", "dates", "not a date"), id="also-a-value-error"),
    pytest.param(NotFound(grpc.StatusCode.NOT_FOUND, "job 'nightly' not found"), id="client-error"),
]


@pytest.mark.parametrize("error", ERRORS)
def test_an_error_pickles_as_itself(error: ShardcronError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)
