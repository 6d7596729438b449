"""One line that says what a job's executor does, safe to log: secret header values are masked."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from shardcron.headers import MASK, masked_headers
from shardcron.model import ExecutorKind, ExecutorSpec
_MAX_COMMAND_CHARS = 120


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
        return f"http {h.method} {_mask_password(h.url)}{suffix}"
    if spec.kind is ExecutorKind.SHELL and spec.shell is not None:
        command = " ".join(spec.shell.command.split())  # one line, whatever the script's layout
        if len(command) > _MAX_COMMAND_CHARS:
            command = command[: _MAX_COMMAND_CHARS - 1] + "…"
        return f"shell: {command}"
    if spec.kind is ExecutorKind.NOOP:
        return "noop"
    return f"{spec.kind.value} (incomplete: no settings)"


def _mask_password(url: str) -> str:
    """``https://user:pw@host/`` -> ``https://user:***@host/``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        userinfo, _, hostport = parts.netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostport}"))
    except ValueError:
        return url
