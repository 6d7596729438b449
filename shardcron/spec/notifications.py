"""A notification's executor spec, from a job file's table, the CLI or a node flag.

It is parsed by the same code as a job's ``executor`` (``executor_table.parse_executor``), so every kind
(http webhook, celery, rq, arq, nats, amqp, redis-stream, python, shell, noop) is accepted and
refused the same way; only the field names in the errors say ``on_failure.url``, not ``executor.url``.

On the command line (``jobs put --on-failure``, ``node --notify-on-failure``) a SPEC is either a
URL (an http POST webhook: ``https://hooks.example/shardcron``) or the executor table as JSON
(``{"kind": "nats", "url": "nats://127.0.0.1", "subject": "alerts"}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardcron.errors import InvalidJob
from shardcron.model import ExecutorSpec
from shardcron.spec.bounds import MAX_FILE_DEPTH, shown
from shardcron.spec.executor_table import executor_to_dict, parse_executor
from shardcron.spec.nesting import load_json


def parse_table(raw: object, field: str, *, bounded: bool = True) -> ExecutorSpec | None:
    """A job file's ``on_failure`` / ``on_recovery`` table (None or absent: no notification);
    ``bounded``: check its values' bounds too (see ``job.job_from_dict``'s ``stored``)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidJob(field, "must be an executor table with a kind (http, nats, celery, ...)")
    try:
        spec = parse_executor(raw, bounded=bounded)
    except InvalidJob as e:
        raise InvalidJob(field + e.field.removeprefix("executor"), e.reason) from None
    if spec.python is not None and spec.python.session:
        # A fenced session commits the tick's result with the function's writes; a notification is no tick.
        raise InvalidJob(f"{field}.session", "a notification cannot take a fenced session: it records no tick")
    return spec


def _table(raw: object, field: str) -> ExecutorSpec:
    """``parse_table`` of a table that is given: never None."""
    spec = parse_table(raw, field)
    if spec is None:
        raise InvalidJob(field, "must be an executor table with a kind (http, nats, celery, ...)")
    return spec


def parse_cli(text: str, field: str) -> ExecutorSpec:
    """A SPEC given on a command line: a URL (an http POST webhook) or the executor table as JSON."""
    text = text.strip()
    if text.startswith(("http://", "https://")):
        return _table({"kind": "http", "url": text}, field)
    if not text.startswith("{"):
        raise InvalidJob(
            field,
            "expected an http(s):// URL or an executor table as JSON, such as "
            '{"kind": "nats", "url": "nats://127.0.0.1", "subject": "alerts"}; '
            f"got {shown(text)}",
        )
    return _table(load_json(text, field, MAX_FILE_DEPTH), field)


def to_table(spec: ExecutorSpec) -> dict[str, Any]:
    """The table ``parse_table`` reads back as ``spec``."""
    return executor_to_dict(spec)
