"""Log lines: what the node's handler makes of library records."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from shardcron import logs


def _record(name: str, level: int, msg: str, args: tuple, with_traceback: bool) -> logging.LogRecord:
    exc_info = None
    if with_traceback:
        try:
            raise RuntimeError('Failed "execute_batch": (SendStatusFromServerOperation,)')
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord(name, level, "server.pyx.pxi", 710, msg, args, exc_info)


@pytest.fixture
def node_log():
    """The node's handler on the root logger, writing to a buffer; restored after."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    out = io.StringIO()

    def configure(level: str) -> io.StringIO:
        logs.setup("n1", level=level)
        root.handlers[0].setStream(out)
        return out

    yield configure
    root.handlers[:], root.level = saved[0], saved[1]


@pytest.mark.parametrize(
    ("level", "shown"),
    [("info", False), ("debug", True)],
)
def test_a_call_ended_before_its_status_is_a_debug_line_without_traceback(node_log, level, shown):
    out = node_log(level)
    record = _record(
        logs.GRPC_SERVER_LOGGER,
        logging.ERROR,
        "ExecuteBatchError raised in core by servicer method [%s]",
        ("/shardcron.v1.Scheduler/WatchTicks",),
        with_traceback=True,
    )
    logging.getLogger().handle(record)
    text = out.getvalue()
    assert "Traceback" not in text
    assert ("DEBUG" in text and "/shardcron.v1.Scheduler/WatchTicks ended before its status" in text) is shown
    assert bool(text) is shown


def test_other_grpc_errors_keep_their_level_and_traceback(node_log):
    out = node_log("info")
    record = _record(
        logs.GRPC_SERVER_LOGGER,
        logging.ERROR,
        "Unexpected [%s] raised by servicer method [%s]",
        ("KeyError", "/shardcron.v1.Scheduler/PutJob"),
        with_traceback=True,
    )
    logging.getLogger().handle(record)
    text = out.getvalue()
    assert "ERROR" in text and "Traceback" in text and "Unexpected [KeyError]" in text


def test_a_broker_client_disconnect_is_one_line(node_log):
    out = node_log("info")
    logging.getLogger().handle(_record("aiormq.connection", logging.ERROR, "connection lost", (), with_traceback=True))
    text = out.getvalue()
    assert "Traceback" not in text and "connection lost (RuntimeError:" in text
