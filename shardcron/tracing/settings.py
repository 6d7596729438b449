"""Whether tracing is on, and how spans are exported: decided from the standard ``OTEL_*`` variables alone.

Tracing is on when an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``), unless ``OTEL_SDK_DISABLED`` is true or ``OTEL_TRACES_EXPORTER`` is
``none``. Everything else the SDK reads from the environment itself (the endpoint, headers, timeouts, the
sampler, the batch processor's sizes, ``OTEL_SERVICE_NAME``); the only decisions made here are the ones
the SDK leaves to the program: on or off, which OTLP exporter to build, and the service's default name.
Pure: no OpenTelemetry import, so the decision costs a node without the extra nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shardcron.errors import ConfigError

DEFAULT_SERVICE_NAME = "shardcron"
# OTLP's transports this package builds an exporter for. The specification's default is http/protobuf.
PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_PROTOCOL = "http/protobuf"


@dataclass(frozen=True)
class TracingSettings:
    protocol: str  # one of PROTOCOLS
    endpoint_variable: str  # the variable that turned tracing on (named in errors)
    service_name: str | None  # None: the environment names the service (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)


def tracing_settings(env: Mapping[str, str]) -> TracingSettings | None:
    """The tracing ``env`` asks for, or None when tracing is off. ``ConfigError`` for a protocol not served."""
    if _value(env, "OTEL_SDK_DISABLED").lower() == "true":
        return None
    exporters = [e.strip().lower() for e in _value(env, "OTEL_TRACES_EXPORTER").split(",") if e.strip()]
    if exporters == ["none"]:
        return None
    endpoint_variable = next(
        (name for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") if _value(env, name)),
        None,
    )
    if endpoint_variable is None:
        return None
    protocol = (
        _value(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _value(env, "OTEL_EXPORTER_OTLP_PROTOCOL")
    ).lower() or DEFAULT_PROTOCOL
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not served; shardcron exports traces over "
            + " or ".join(PROTOCOLS)
        )
    return TracingSettings(protocol, endpoint_variable, _service_name(env))


def _service_name(env: Mapping[str, str]) -> str | None:
    if _value(env, "OTEL_SERVICE_NAME"):
        return None
    attributes = (pair.partition("=")[0].strip() for pair in _value(env, "OTEL_RESOURCE_ATTRIBUTES").split(","))
    return None if "service.name" in attributes else DEFAULT_SERVICE_NAME


def _value(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()
