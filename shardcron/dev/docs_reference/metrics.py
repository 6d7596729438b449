"""docs/reference/metrics.md: every metric a node serves, read from the Prometheus registry after
``shardcron.metrics`` (where every metric object lives, once) has registered them.

A counter is listed by the name it is scraped by (``..._total``); a histogram by its base name (its
series are ``_bucket``, ``_sum`` and ``_count``), with its buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

import shardcron.metrics  # noqa: F401 - registers every metric of a node
from shardcron.dev.docs_reference.markdown import code, table

PREFIX = "shardcron_"


@dataclass(frozen=True)
class Metric:
    name: str
    type: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()


def metrics() -> list[Metric]:
    """Every ``shardcron_`` metric in the registry, by name."""
    found: list[Metric] = []
    for collector in list(REGISTRY._collector_to_names):
        if isinstance(collector, MetricWrapperBase):
            kind = str(collector._type)
            name = collector._name + ("_total" if kind == "counter" else "")
            bounds = tuple(getattr(collector, "_upper_bounds", ()))
            found.append(Metric(name, kind, tuple(collector._labelnames), collector._documentation, bounds))
            continue
        for family in collector.describe() if hasattr(collector, "describe") else ():
            name = family.name + ("_total" if family.type == "counter" else "")
            bounds = tuple(getattr(collector, "_bounds", ()))
            found.append(
                Metric(name, family.type, tuple(getattr(family, "_labelnames", ())), family.documentation, bounds)
            )
    return sorted((m for m in found if m.name.startswith(PREFIX)), key=lambda m: m.name)


def _bucket(b: float) -> str:
    return "+Inf" if b == float("inf") else f"{b:g}"


def render() -> str:
    rows = []
    for m in metrics():
        what = m.help
        if m.buckets:
            what += " Buckets: " + ", ".join(_bucket(b) for b in m.buckets if b != float("inf")) + ", +Inf."
        rows.append([code(m.name), m.type, ", ".join(code(label) for label in m.labels), what])
    return table(["metric", "type", "labels", "what"], rows)


__all__ = ["Metric", "metrics", "render"]
