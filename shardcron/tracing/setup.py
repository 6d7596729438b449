"""The node's tracer provider: its resource, the SDK's sampler, a batch processor and an OTLP exporter.

Imported only when ``settings.tracing_settings`` says tracing is on; a node without the ``otel`` extra then
fails to start with one line naming it. The SDK reads the rest of the ``OTEL_*`` environment itself:
``OTEL_TRACES_SAMPLER``/``_ARG`` (the provider's default sampler), the endpoint, headers and timeout (the
exporter), ``OTEL_BSP_*`` (the batch processor), ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
(the resource).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardcron.errors import ConfigError
from shardcron.tracing.settings import TracingSettings, tracing_settings

if TYPE_CHECKING:
    from shardcron.tracing.tick_spans import TickSpans

EXTRA = "otel"
# The modules the extra brings, checked before any is used: the first missing one is named.
_EXPORTER_MODULES = {
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
}
INSTRUMENTATION_NAME = "shardcron"


class MissingTracingExtra(ConfigError):
    """Tracing is asked for and the ``otel`` extra is not installed."""

    def __init__(self, variable: str, module: str):
        super().__init__(
            f"{variable} asks for tracing, but the {EXTRA!r} extra is missing (no module {module!r}): "
            f"pip install 'shardcron[{EXTRA}]', or unset {variable}"
        )


@dataclass
class Tracing:
    """A running tracer provider and the leader's tick spans; ``shutdown`` exports what its batch holds."""

    provider: Any  # opentelemetry.sdk.trace.TracerProvider
    tracer: Any  # opentelemetry.trace.Tracer
    tick_spans: TickSpans

    def shutdown(self) -> None:
        self.provider.shutdown()


def tracing_from_env(env: Mapping[str, str], node_id: str) -> Tracing | None:
    """The node's tracing as ``env`` asks for it (``settings.tracing_settings``), or None when it is off."""
    settings = tracing_settings(env)
    return None if settings is None else start_tracing(settings, node_id)


def start_tracing(settings: TracingSettings, node_id: str) -> Tracing:
    """A tracer provider exporting over OTLP as ``settings`` say, its spans tagged with the node's id."""
    exporter_module = _import(_EXPORTER_MODULES[settings.protocol], settings)
    sdk_trace = _import("opentelemetry.sdk.trace", settings)
    export = _import("opentelemetry.sdk.trace.export", settings)
    resources = _import("opentelemetry.sdk.resources", settings)
    attributes = {"service.instance.id": node_id}
    if settings.service_name is not None:
        attributes["service.name"] = settings.service_name
    # No sampler given: the provider takes OTEL_TRACES_SAMPLER/_ARG's (parent-based always-on by default).
    provider = sdk_trace.TracerProvider(resource=resources.Resource.create(attributes))
    provider.add_span_processor(export.BatchSpanProcessor(exporter_module.OTLPSpanExporter()))
    tracer = provider.get_tracer(INSTRUMENTATION_NAME)
    from shardcron.tracing.tick_spans import TickSpans  # imports opentelemetry: only now that it is installed

    return Tracing(provider, tracer, TickSpans(tracer, node_id))


def _import(module: str, settings: TracingSettings) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise MissingTracingExtra(settings.endpoint_variable, e.name or module) from None
