"""The client's errors: one ``ApiError`` subclass per gRPC status a caller handles differently."""

from __future__ import annotations

import grpc

from shardcron.errors import ShardcronError


class ApiError(ShardcronError):
    """The cluster refused or could not serve a call. ``code`` is the gRPC status."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details or code.name.lower().replace("_", " "))
        self.code = code
        self.details = details


class InvalidRequest(ApiError):
    """INVALID_ARGUMENT: the message names the field and says why."""


class NotFound(ApiError):
    """NOT_FOUND: no such job."""


class Conflict(ApiError):
    """ABORTED: the job is not at the expected version."""


class Unavailable(ApiError):
    """UNAVAILABLE: no node answered, or the job's shard had no leader before the deadline."""


class LimitExceeded(ApiError):
    """RESOURCE_EXHAUSTED: the call crossed one of the node's limits; the message names its flag."""


_ERRORS: dict[grpc.StatusCode, type[ApiError]] = {
    grpc.StatusCode.RESOURCE_EXHAUSTED: LimitExceeded,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}


def api_error(code: grpc.StatusCode, details: str) -> ApiError:
    return _ERRORS.get(code, ApiError)(code, details)


def code_name(value: int) -> str:
    """The name of the gRPC status numbered ``value`` (as a PutJobs result carries it)."""
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code.name
    return str(value)


__all__ = [
    "ApiError",
    "Conflict",
    "InvalidRequest",
    "LimitExceeded",
    "NotFound",
    "Unavailable",
    "api_error",
    "code_name",
]
