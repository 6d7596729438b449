"""Structured logs: text or JSON, with node, shard, job, fence and tick on the lines that concern them.

Callers pass the context as ``extra={"shard": 3, "fence": 17, "job": "a"}``;
the node id is added to every line. ``job`` is the job's key: a line about a job
outside ``default`` shows ``namespace=`` and the id apart, and a key in the
message reads ``namespace/id`` (the key's U+001F separator is no character to print).
"""

from __future__ import annotations

import json
import logging
import sys
import time

from shardcron.jobkey import KEY_SEPARATOR, split_key

CONTEXT_FIELDS = ("shard", "job", "fence", "tick")


def _context(record: logging.LogRecord) -> dict:
    ctx = {k: getattr(record, k) for k in CONTEXT_FIELDS if hasattr(record, k)}
    job = ctx.get("job")
    if isinstance(job, str) and KEY_SEPARATOR in job:
        key = split_key(job)
        ctx = {"namespace": key.namespace, **ctx, "job": key.id}
    return ctx


def _message(record: logging.LogRecord) -> str:
    return record.getMessage().replace(KEY_SEPARATOR, "/")


class _NodeFilter(logging.Filter):
    def __init__(self, node_id: str):
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node_id
        return True


# Broker clients that log an expected disconnect (a broker restarted, a connection
# closed by the server) with its traceback. The executor already reports the
# failure on the tick, in one line; the library's line stays, without the traceback.
QUIET_TRACEBACKS = ("aiormq", "aio_pika", "nats", "kombu", "celery", "redis", "rq", "arq")


class _OneLineFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.name.split(".", 1)[0] in QUIET_TRACEBACKS:
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


# grpc's asyncio server logs at ERROR, with a traceback, a call whose final status could not
# be sent because the call had already ended in grpc's core: its caller cancelled it, its
# deadline passed, or the server stopped, in the same instant as the handler returned. The
# handler had finished and the caller has its own ending; nothing is lost, so the line is a
# one-line debug note.
GRPC_SERVER_LOGGER = "grpc._cython.cygrpc"
CALL_ENDED_FIRST = "ExecuteBatchError raised in core by servicer method"


class _CallEndedFirstFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != GRPC_SERVER_LOGGER or not str(record.msg).startswith(CALL_ENDED_FIRST):
            return True
        method = record.getMessage()[len(CALL_ENDED_FIRST) :].strip(" []")
        record.msg = "a call to %s ended before its status could be sent (its caller or the server ended it)"
        record.args = (method,)
        record.exc_info = None
        record.exc_text = None
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        return logging.getLogger().isEnabledFor(logging.DEBUG)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        ctx = " ".join(f"{k}={v}" for k, v in _context(record).items())
        line = f"{ts} {record.levelname:<7} node={getattr(record, 'node', '-')} {record.name}: {_message(record)}"
        if ctx:
            line += f"  [{ctx}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        d = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "node": getattr(record, "node", None),
            "logger": record.name,
            "msg": _message(record),
            **_context(record),
        }
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info)
        return json.dumps(d, default=str)


def setup(node_id: str, fmt: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_NodeFilter(node_id))
    handler.addFilter(_OneLineFilter())
    handler.addFilter(_CallEndedFirstFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("sqlalchemy", "alembic", "pyetcd"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
