"""A real Celery worker that traces, as a user's would: ``opentelemetry-instrumentation-celery`` and an OTLP
exporter (both configured by the standard ``OTEL_*`` variables), and a task guarded by ``dedupe``.

    SHARDCRON_TEST_CELERY_BROKER=redis://127.0.0.1:6379/0 SHARDCRON_TEST_DEDUPE_PREFIX=sc-test:abc: \\
    SHARDCRON_TEST_READY=/tmp/x.ready OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        celery -A tests.support.workers.traced_celery_app worker -P solo -Q <queue>

The task's effect is guarded by ``dedupe`` and then asked for again, as a redelivery of the same message
would be: the task's span (continued from the tick's ``traceparent`` by the instrumentation) gets the
verdicts ``first`` then ``duplicate`` as events.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery
from celery.signals import worker_init, worker_process_shutdown, worker_ready, worker_shutdown
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from shardcron.consumer import RedisDeduper, dedupe
from tests.support.workers.celery_app import BROKER_ENV, PREFIX_ENV, READY_ENV

TASK = "shardcron.tests.traced"
_REDIS = "redis://127.0.0.1:6379/0"

provider = TracerProvider()  # OTEL_SERVICE_NAME names it


@worker_init.connect
def _trace(**_) -> None:
    # In the worker only (the solo pool runs tasks in this process): a test importing this module for its
    # names must not start exporting spans.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    CeleryInstrumentor().instrument(tracer_provider=provider)


app = Celery("shardcron_traced_worker", broker=os.environ.get(BROKER_ENV, _REDIS), set_as_current=False)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_enable_remote_control=False,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
)

deduper = RedisDeduper(_REDIS, prefix=os.environ.get(PREFIX_ENV, "sc-traced:"), ttl_s=3600)


@dedupe(deduper)
def _effect() -> bool:
    return True


@app.task(name=TASK)
def traced(*args, **kwargs) -> None:
    _effect()  # the slot's first delivery: admitted
    _effect()  # as its redelivery would be: refused as a duplicate


@worker_ready.connect
def _say_ready(**_) -> None:
    if ready := os.environ.get(READY_ENV):
        Path(ready).touch()


@worker_shutdown.connect
@worker_process_shutdown.connect
def _flush(**_) -> None:
    provider.shutdown()
