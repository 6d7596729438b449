"""docs/reference/executors.md: every executor kind and the keys of its table.

What is read from the spec itself:
- the kinds (``model.ExecutorKind``) and each kind's keys (``spec.executor_table.EXECUTOR_KEYS`` for
  noop, shell and http, ``spec.executors.EXECUTOR_KEYS`` for the dispatch kinds). A key without an
  entry in ``KEYS`` below, or an entry for a key the kind no longer takes, stops the generator;
- which keys are required: ``MINIMAL[kind]`` must parse, and a key is required when the table
  without it is refused;
- the defaults: the minimal table parsed and written back (``executor_to_dict``);
- every example: the minimal table with it added must parse, and it reads back as TOML.

What is written here: each key's type, meaning and example, and each kind's minimal table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardcron.dev.docs_reference.markdown import code, table
from shardcron.dev.docs_reference.toml_values import line, shown_default
from shardcron.model import ExecutorKind
from shardcron.spec import executor_table, executors

HERE = "shardcron/dev/docs_reference/executors.py"


@dataclass(frozen=True)
class Key:
    type: str
    meaning: str
    example: Any


_ARGS = Key("list", "positional arguments, JSON values", [2026, "eu"])
_KWARGS = Key("table", "keyword arguments, JSON values", {"region": "eu"})
_HEADERS = Key("table", "message headers, name = value", {"X-Team": "finance"})
_BODY = Key("string", "the message body (up to 1 MiB)", '{"report": "daily"}')

# Each kind's smallest table: what its required keys look like. Every example below is tried on it.
MINIMAL: dict[ExecutorKind, dict[str, Any]] = {
    ExecutorKind.NOOP: {"kind": "noop"},
    ExecutorKind.SHELL: {"kind": "shell", "command": "/usr/local/bin/report --daily"},
    ExecutorKind.HTTP: {"kind": "http", "url": "https://reports.internal/run"},
    ExecutorKind.CELERY: {"kind": "celery", "url": "redis://127.0.0.1:6379/0", "task": "app.tasks.report"},
    ExecutorKind.RQ: {"kind": "rq", "url": "redis://127.0.0.1:6379/0", "func": "app.tasks.report"},
    ExecutorKind.ARQ: {"kind": "arq", "url": "redis://127.0.0.1:6379/0", "function": "report"},
    ExecutorKind.NATS: {"kind": "nats", "url": "nats://127.0.0.1:4222", "subject": "jobs.reports"},
    ExecutorKind.AMQP: {"kind": "amqp", "url": "amqp://127.0.0.1:5672", "routing_key": "reports"},
    ExecutorKind.REDIS_STREAM: {"kind": "redis-stream", "url": "redis://127.0.0.1:6379/0", "stream": "reports"},
    ExecutorKind.PYTHON: {"kind": "python", "target": "myapp.jobs:report"},
}

# (kind, key) -> its entry; a key shared by several kinds may be given once under None.
KEYS: dict[tuple[ExecutorKind | None, str], Key] = {
    (None, "kind"): Key("string", "the executor's kind", "noop"),
    (ExecutorKind.SHELL, "command"): Key(
        "string", "run under `/bin/sh -c`; needs nodes with `--allow-shell`", "/usr/local/bin/report --daily"
    ),
    (ExecutorKind.HTTP, "url"): Key("string", "an http:// or https:// URL", "https://reports.internal/run"),
    (ExecutorKind.HTTP, "method"): Key("string", "one of " + ", ".join(sorted(executor_table.HTTP_METHODS)), "PUT"),
    (ExecutorKind.HTTP, "headers"): Key("table", "request headers, name = value", {"X-Team": "finance"}),
    (ExecutorKind.HTTP, "body"): Key("string", "the request body (up to 1 MiB)", '{"report": "daily"}'),
    (ExecutorKind.HTTP, "secret_headers"): Key(
        "list of strings", "headers whose values are never logged nor shown", ["X-Signature"]
    ),
    (None, "url"): Key("string", "the broker's URL", ""),  # each kind's example is its minimal table's
    (None, "args"): _ARGS,
    (None, "kwargs"): _KWARGS,
    (ExecutorKind.CELERY, "task"): Key("string", "the registered Celery task name", "app.tasks.report"),
    (ExecutorKind.CELERY, "queue"): Key("string", "the queue to send to", "reports"),
    (ExecutorKind.CELERY, "routing_key"): Key("string", "the routing key", "reports.daily"),
    (ExecutorKind.CELERY, "priority"): Key("whole number", f"0 to {executors.MAX_PRIORITY}", 5),
    (ExecutorKind.CELERY, "expires"): Key("duration", "workers drop the task this long after its slot", "10m"),
    (ExecutorKind.RQ, "func"): Key("string", "the dotted path a worker imports", "app.tasks.report"),
    (ExecutorKind.RQ, "queue"): Key("string", "the RQ queue", "reports"),
    (ExecutorKind.ARQ, "function"): Key("string", "a function of the worker's functions", "report"),
    (ExecutorKind.ARQ, "queue"): Key("string", "the arq queue", "arq:reports"),
    (ExecutorKind.ARQ, "tick_kwarg"): Key("string", "pass the tick as this keyword argument", "tick"),
    (ExecutorKind.NATS, "subject"): Key("string", "the subject to publish to (no wildcards)", "jobs.reports"),
    (ExecutorKind.NATS, "jetstream"): Key(
        "boolean", "publish to JetStream and wait for its ack; false: a core publish", False
    ),
    (ExecutorKind.NATS, "body"): _BODY,
    (ExecutorKind.NATS, "headers"): _HEADERS,
    (ExecutorKind.AMQP, "exchange"): Key("string", "the exchange; empty: the default exchange", "reports"),
    (ExecutorKind.AMQP, "routing_key"): Key(
        "string", "the routing key; with the default exchange, the queue's name (then required)", "reports"
    ),
    (ExecutorKind.AMQP, "body"): _BODY,
    (ExecutorKind.AMQP, "headers"): _HEADERS,
    (ExecutorKind.AMQP, "persistent"): Key("boolean", "delivery mode 2: the broker writes it to disk", False),
    (ExecutorKind.AMQP, "content_type"): Key("string", "the message's content type", "text/plain"),
    (ExecutorKind.REDIS_STREAM, "stream"): Key("string", "the stream key to XADD to", "reports"),
    (ExecutorKind.REDIS_STREAM, "fields"): Key(
        "table", "the entry's fields, name = string (not starting with shardcron_)", {"report": "daily"}
    ),
    (ExecutorKind.REDIS_STREAM, "maxlen"): Key("whole number", "trim the stream to about this many entries", 10000),
    (ExecutorKind.REDIS_STREAM, "dedupe_ttl"): Key(
        "duration", "how long a slot's dedupe marker lives, at least 1m (unset: the Redis kinds' 25 h)", "48h"
    ),
    (ExecutorKind.PYTHON, "target"): Key(
        "string", "package.module:function; needs nodes with `--allow-python` covering the module", "myapp.jobs:report"
    ),
    (ExecutorKind.PYTHON, "session"): Key(
        "boolean", "pass a fenced database session that commits with the tick's result", True
    ),
}


class DriftError(Exception):
    """The spec and this module disagree about an executor's keys, or refuse one of its examples."""


def kind_keys(kind: ExecutorKind) -> frozenset[str]:
    """The keys ``kind``'s table takes, as the spec says."""
    if kind in executor_table.EXECUTOR_KEYS:
        return executor_table.EXECUTOR_KEYS[kind]
    return executors.EXECUTOR_KEYS[kind]


def entry(kind: ExecutorKind, key: str) -> Key | None:
    return KEYS.get((kind, key)) or KEYS.get((None, key))


def check_entries() -> None:
    said = []
    for kind in ExecutorKind:
        if kind not in MINIMAL:
            said.append(f"the kind {kind.value!r} has no MINIMAL table")
            continue
        said += [
            f"{kind.value}.{k}: the spec takes it, KEYS has no entry"
            for k in sorted(kind_keys(kind))
            if not entry(kind, k)
        ]
    taken = {(kind, k) for kind in ExecutorKind for k in kind_keys(kind)}
    for described, k in KEYS:
        if described is None and not any(k == key for _, key in taken):
            said.append(f"{k}: KEYS describes it for every kind, and no kind takes it")
        elif described is not None and (described, k) not in taken:
            said.append(f"{described.value}.{k}: KEYS describes it, the spec no longer takes it")
    said += [f"MINIMAL names the kind {k.value!r}, which is gone" for k in MINIMAL if k not in list(ExecutorKind)]
    if said:
        raise DriftError(f"{HERE}: " + "; ".join(said) + ": describe or drop it there, then run make docs-reference")


def _parse(table_: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        return executor_table.executor_to_dict(executor_table.parse_executor(table_))
    except Exception as e:  # noqa: BLE001 - whatever the spec raises, the page must not show it
        raise DriftError(f"{HERE}: {what} is refused by the spec: {e}") from e


def _refused(table_: dict[str, Any]) -> bool:
    try:
        executor_table.parse_executor(table_)
    except Exception:  # noqa: BLE001 - any refusal makes the key required
        return True
    return False


def render() -> str:
    check_entries()
    out = []
    for kind in ExecutorKind:
        minimal = MINIMAL[kind]
        parsed = _parse(minimal, f"MINIMAL[{kind.value!r}]")
        out.append(f"### `{kind.value}`\n")
        out.append(f"The smallest table: {code(line('executor', minimal))}\n")
        rows = []
        for key in sorted(kind_keys(kind), key=lambda k: (k != "kind", k not in minimal, k)):
            doc = entry(kind, key)
            assert doc is not None  # check_entries
            example = minimal.get(key, doc.example) if key in ("kind", "url") else doc.example
            if key not in ("kind", "url"):
                _parse({**minimal, key: example}, f"the example of {kind.value}.{key} ({example!r})")
            if key in minimal and _refused({k: v for k, v in minimal.items() if k != key}):
                default = "required"
            elif key in parsed and key not in minimal and parsed[key] not in ([], {}, ""):
                default = code(shown_default(parsed[key]))
            else:
                default = "none"
            meaning = doc.meaning
            if key == "url" and kind in executors.URL_SCHEMES:
                meaning += ": " + ", ".join(f"`{scheme}://`" for scheme in executors.URL_SCHEMES[kind])
            rows.append([code(key), doc.type, default, code(line(key, example)), meaning])
        out.append(table(["key", "type", "default", "example", "meaning"], rows))
    return "\n".join(out)


__all__ = ["KEYS", "MINIMAL", "DriftError", "check_entries", "kind_keys", "render"]
