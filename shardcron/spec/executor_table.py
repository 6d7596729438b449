"""A job's executor table, of any kind: parsing, validation and serialisation.

Noop, shell and http are read here; every dispatch kind (a broker or a Python
call) goes to ``spec.executors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from shardcron.errors import InvalidJob
from shardcron.model import ExecutorKind, ExecutorSpec, HttpSpec, ShellSpec
from shardcron.spec import executors as executor_specs
from shardcron.spec.bounds import MAX_PAYLOAD_BYTES, shown
from shardcron.spec.fields import check_keys, enum_value, parse_headers, utf8_size

HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"})

EXECUTOR_KEYS = {
    ExecutorKind.NOOP: frozenset({"kind"}),
    ExecutorKind.SHELL: frozenset({"kind", "command"}),
    ExecutorKind.HTTP: frozenset({"kind", "url", "method", "headers", "body", "secret_headers"}),
}

_KINDS = ", ".join(k.value for k in ExecutorKind)


def parse_executor(d: object, *, bounded: bool = True) -> ExecutorSpec:
    """An executor table; ``bounded``: check its values' bounds too (see ``job_from_dict``'s ``stored``)."""
    if d is None:
        raise InvalidJob("executor", f"missing: every job needs one, of kind {_KINDS}")
    if not isinstance(d, Mapping):
        raise InvalidJob("executor", f"must be a table with a kind ({_KINDS})")
    if not d.get("kind"):
        raise InvalidJob("executor.kind", f"missing: give one of {_KINDS}")
    kind = enum_value(ExecutorKind, d.get("kind", ""), "executor.kind")
    if kind in EXECUTOR_KEYS:
        check_keys(d, EXECUTOR_KEYS[kind], "executor", f" of the {kind.value} executor")
    if kind is ExecutorKind.NOOP:
        return ExecutorSpec(kind)
    if kind not in EXECUTOR_KEYS:
        return executor_specs.parse(kind, d, bounded=bounded)
    if kind is ExecutorKind.SHELL:
        cmd = d.get("command")
        if not isinstance(cmd, str) or not cmd.strip():
            raise InvalidJob("executor.command", "a shell job needs a non-empty command")
        if utf8_size(cmd, "executor.command") > MAX_PAYLOAD_BYTES:
            raise InvalidJob("executor.command", f"is larger than {MAX_PAYLOAD_BYTES} bytes")
        return ExecutorSpec(kind, shell=ShellSpec(cmd))
    url = d.get("url")
    if not isinstance(url, str) or not url:
        raise InvalidJob("executor.url", "an http job needs a url")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidJob("executor.url", f"{shown(url)} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidJob("executor.url", f"{shown(url)} is not an http:// or https:// URL")
    method = str(d.get("method", "POST")).upper()
    if method not in HTTP_METHODS:
        raise InvalidJob("executor.method", f"{shown(method)} is not one of {', '.join(sorted(HTTP_METHODS))}")
    body = d.get("body", "") or ""
    if not isinstance(body, str):
        raise InvalidJob("executor.body", "must be a string")
    if (size := utf8_size(body, "executor.body")) > MAX_PAYLOAD_BYTES:
        raise InvalidJob("executor.body", f"is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    headers = parse_headers(d.get("headers"), "executor.headers")
    secret = d.get("secret_headers", ()) or ()
    if not isinstance(secret, list | tuple) or not all(isinstance(h, str) for h in secret):
        raise InvalidJob("executor.secret_headers", "must be a list of header names")
    return ExecutorSpec(kind, http=HttpSpec(url, method, headers, body, tuple(secret)))


def executor_to_dict(spec: ExecutorSpec) -> dict[str, Any]:
    """An executor's table as a job file gives it; ``parse_executor(executor_to_dict(s)) == s``."""
    ex: dict[str, Any] = {"kind": spec.kind.value}
    if spec.http:
        h = spec.http
        ex.update(
            url=h.url,
            method=h.method,
            headers=[list(p) for p in h.headers],
            body=h.body,
            secret_headers=list(h.secret_headers),
        )
    if spec.shell:
        ex["command"] = spec.shell.command
    if spec.kind not in EXECUTOR_KEYS:
        ex.update(executor_specs.to_dict(spec))
    return ex
