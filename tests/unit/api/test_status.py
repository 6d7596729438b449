"""What the server answers for each exception: the status code, the retry hint, the cut details."""

from __future__ import annotations

import grpc
import pytest
from sqlalchemy.exc import DataError

from shardcron.api.status import CallFailed, clip, retry_hint, status_for
from shardcron.errors import (
    FencedOut,
    InvalidJob,
    JobNotFound,
    StoreUnavailable,
    TriggerBusy,
    VersionConflict,
)
from shardcron.wire.messages import BadRequest


@pytest.mark.parametrize(
    "exc, code",
    [
        (InvalidJob("schedule.cron", "bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (BadRequest("page_size", "bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (JobNotFound("a"), grpc.StatusCode.NOT_FOUND),
        (VersionConflict("a", 1, 2), grpc.StatusCode.ABORTED),
        (FencedOut(3, 4, 5), grpc.StatusCode.UNAVAILABLE),
        (StoreUnavailable("db down"), grpc.StatusCode.UNAVAILABLE),
        (TriggerBusy("a", 1), grpc.StatusCode.UNAVAILABLE),
        (CallFailed(grpc.StatusCode.PERMISSION_DENIED, "no"), grpc.StatusCode.PERMISSION_DENIED),
        (KeyError("bug"), grpc.StatusCode.INTERNAL),
        (
            DataError("INSERT", {}, ValueError("PostgreSQL text fields cannot contain NUL (0x00) bytes")),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ],
)
def test_status_mapping(exc, code):
    assert status_for(exc)[0] is code


def test_only_leadership_changes_carry_the_retry_hint():
    assert retry_hint(FencedOut(1, 2, 3))
    assert retry_hint(CallFailed(grpc.StatusCode.UNAVAILABLE, "x", retry=True))
    assert not retry_hint(StoreUnavailable("db down"))


def test_long_details_are_cut_to_fit_a_header():
    assert clip("short") == "short"
    cut = clip("é" * 5000)
    assert len(cut.encode()) < 1100 and cut.endswith("(cut)")
