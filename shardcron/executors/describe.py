"""One line that says what a job's executor does, safe to log: secret header values and URL passwords are masked."""

from __future__ import annotations

from shardcron.model import ExecutorKind, ExecutorSpec
from shardcron.spec.headers import mask_url, masked_headers

_MAX_COMMAND_CHARS = 120

# What each dispatch kind sends where, in a few words: (the settings' attribute names, how to join them).
_TARGET = {
    ExecutorKind.CELERY: lambda s: f"task {s.task}" + (f" on queue {s.queue}" if s.queue else ""),
    ExecutorKind.RQ: lambda s: f"{s.func} on queue {s.queue}",
    ExecutorKind.ARQ: lambda s: f"{s.function} on queue {s.queue}",
    ExecutorKind.NATS: lambda s: f"{'jetstream' if s.jetstream else 'core'} subject {s.subject}",
    ExecutorKind.AMQP: lambda s: f"exchange {s.exchange or '(default)'} routing key {s.routing_key}",
    ExecutorKind.REDIS_STREAM: lambda s: f"stream {s.stream}",
    ExecutorKind.PYTHON: lambda s: s.target + (" with a fenced session" if s.session else ""),
}


def target(spec: ExecutorSpec) -> str:
    """What a dispatch job sends, without where to: ``task app.tasks.report on queue q``."""
    return _TARGET[spec.kind](spec.settings)


def describe(spec: ExecutorSpec) -> str:
    """``http POST https://hooks.example/run (headers: Authorization: ***; body: 12 bytes)``,
    ``shell: /usr/local/bin/backup --full``, ``noop``."""
    if spec.kind is ExecutorKind.HTTP and spec.http is not None:
        h = spec.http
        details = []
        if h.headers:
            shown = ", ".join(f"{name}: {value}" for name, value in masked_headers(h))
            details.append(f"headers: {shown}")
        if h.body:
            details.append(f"body: {len(h.body.encode('utf-8'))} bytes")
        suffix = f" ({'; '.join(details)})" if details else ""
        return f"http {h.method} {mask_url(h.url)}{suffix}"
    if spec.kind is ExecutorKind.SHELL and spec.shell is not None:
        command = " ".join(spec.shell.command.split())  # one line, whatever the script's layout
        if len(command) > _MAX_COMMAND_CHARS:
            command = command[: _MAX_COMMAND_CHARS - 1] + "…"
        return f"shell: {command}"
    if spec.kind is ExecutorKind.NOOP:
        return "noop"
    if spec.settings is not None and spec.kind in _TARGET:
        s = spec.settings
        where = f" via {mask_url(s.url)}" if hasattr(s, "url") else ""
        return f"{spec.kind.value} {target(spec)}{where}"
    return f"{spec.kind.value} (incomplete: no settings)"
