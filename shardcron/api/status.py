"""Which gRPC status each failure becomes.

Every error the caller caused, or that is worth retrying, has its own code;
INTERNAL is left for bugs, which are logged with their traceback. UNKNOWN
is never returned.
"""

from __future__ import annotations

import logging

import grpc
from sqlalchemy import exc as sa_exc

from shardcron.errors import (
    ConfigError,
    EtcdUnavailable,
    FencedOut,
    InvalidJob,
    JobNotFound,
    NamespaceExists,
    NamespaceNotFound,
    NotLeader,
    QuotaRefused,
    SessionLost,
    ShardcronError,
    StoreUnavailable,
    TickNotFound,
    TriggerBusy,
    VersionConflict,
)
from shardcron.store.calendars import CalendarNotFound

log = logging.getLogger(__name__)


class CallFailed(Exception):
    """A status to return as it is: the answer of another node, or one this node decided on."""

    def __init__(self, code: grpc.StatusCode, details: str, *, retry: bool = False):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.retry = retry  # UNAVAILABLE because leadership moved: the shard's new leader may serve it


def retry_hint(exc: BaseException) -> bool:
    """Whether the failure means "not the shard's leader (any more)": see client.channel.RETRY_HEADER."""
    return isinstance(exc, FencedOut | NotLeader | SessionLost) or (isinstance(exc, CallFailed) and exc.retry)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """(code, details) for an exception raised while serving a call."""
    if isinstance(exc, CallFailed):
        return exc.code, exc.details
    if isinstance(exc, grpc.RpcError) and callable(getattr(exc, "code", None)):  # another node's answer, passed on
        return exc.code(), exc.details() or ""
    if isinstance(exc, InvalidJob):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, JobNotFound | TickNotFound | CalendarNotFound | NamespaceNotFound):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, NamespaceExists):
        return grpc.StatusCode.ALREADY_EXISTS, str(exc)
    if isinstance(exc, QuotaRefused):  # names the namespace, the quota, its limit and the would-be value
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)
    if isinstance(exc, VersionConflict):
        return grpc.StatusCode.ABORTED, str(exc)
    if isinstance(exc, FencedOut | NotLeader | SessionLost):
        return grpc.StatusCode.UNAVAILABLE, f"leadership changed, retry: {exc}"
    if isinstance(exc, sa_exc.DataError):
        # A value of the request the database cannot hold (a NUL character on
        # PostgreSQL, a number out of its range): the caller's, not a bug.
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return grpc.StatusCode.INVALID_ARGUMENT, f"request: the store cannot hold one of its values: {reason}"
    if isinstance(exc, StoreUnavailable | EtcdUnavailable | TriggerBusy):
        return grpc.StatusCode.UNAVAILABLE, str(exc)
    if isinstance(exc, ConfigError):
        return grpc.StatusCode.FAILED_PRECONDITION, str(exc)
    if isinstance(exc, ShardcronError):
        return grpc.StatusCode.FAILED_PRECONDITION, str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see the node's log"


def is_retryable(code: grpc.StatusCode) -> bool:
    """Codes after which the same call may succeed against the shard's (new) leader."""
    return code in (grpc.StatusCode.UNAVAILABLE,)


def log_if_bug(exc: BaseException, method: str) -> None:
    code, _ = status_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        log.error("%s failed with an unexpected error", method, exc_info=exc)


DETAILS_LIMIT_BYTES = 1000


def clip(text: str, limit_bytes: int = DETAILS_LIMIT_BYTES) -> str:
    """Status details travel in a header (clients accept 8 KiB of them, percent-encoded):
    a message echoing a 1 MiB cron string must be cut, or the caller would see a transport error."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit_bytes:
        return text
    return raw[:limit_bytes].decode("utf-8", "ignore") + "... (cut)"
