"""The OTEL_* environment -> whether tracing is on, over which OTLP transport, and the service's default name."""

import pytest

from shardcron.errors import ConfigError
from shardcron.tracing.settings import TracingSettings, tracing_settings

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
TRACES_ENDPOINT = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, None),  # no endpoint: off
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, None),
        (ENDPOINT, TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", "shardcron")),
        (TRACES_ENDPOINT, TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "shardcron")),
        (
            {**ENDPOINT, **TRACES_ENDPOINT},
            TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "shardcron"),
        ),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, None),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, None),
        (
            {**ENDPOINT, "OTEL_SDK_DISABLED": "false"},
            TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", "shardcron"),
        ),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, None),
        (
            {**ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"},
            TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", "shardcron"),
        ),
        (
            {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            TracingSettings("grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "shardcron"),
        ),
        (
            {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
            TracingSettings("grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "shardcron"),
        ),
        (
            {**ENDPOINT, "OTEL_SERVICE_NAME": "billing-cron"},
            TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", None),
        ),
        (
            {**ENDPOINT, "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, service.name=cron"},
            TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", None),
        ),
        (
            {**ENDPOINT, "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod"},
            TracingSettings("http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT", "shardcron"),
        ),
    ],
)
def test_the_environment_decides(env, expected):
    assert tracing_settings(env) == expected


@pytest.mark.parametrize("protocol", ["http/json", "thrift"])
def test_a_protocol_not_served_is_one_clear_error(protocol):
    with pytest.raises(ConfigError, match=f"OTEL_EXPORTER_OTLP_PROTOCOL: '{protocol}' is not served"):
        tracing_settings({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol})


def test_a_protocol_set_without_an_endpoint_leaves_tracing_off():
    assert tracing_settings({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}) is None
