"""The python executor without a store: admission by --allow-python, bad targets, results, timeout and cancel.

The callables are real functions in ``tests/support/pyjobs.py``, run in the
executor's own thread; the session cases are in
``tests/integration/executors/test_python.py``.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from datetime import UTC, datetime

import pytest

from shardcron.dev.testing.cluster import wait_until
from shardcron.executors.python import CallContext, PythonExecutor
from shardcron.model import OUTPUT_LIMIT_BYTES, ExecutorKind, ExecutorSpec, PythonSpec, TickContext
from shardcron.runtime.latch import Latch
from tests.support import pyjobs

pytestmark = pytest.mark.timeout(60)

CTX = TickContext(job_id="job-p", scheduled_at_ms=1_767_225_605_000, attempt=2, fence=7, shard=3, node_id="node-a")
ALLOW = ("tests.support",)


def spec(target: str, *args, session: bool = False, **kwargs) -> ExecutorSpec:
    return ExecutorSpec(
        ExecutorKind.PYTHON, python=PythonSpec(target=target, args=args, kwargs=kwargs, session=session)
    )


def run(target: str, *args, allow=ALLOW, timeout_s: float = 10.0, cancel=None, **kwargs):
    return PythonExecutor(None, allow).run(spec(target, *args, **kwargs), CTX, timeout_s, cancel or Latch())


def name() -> str:
    return uuid.uuid4().hex


@pytest.mark.parametrize(
    ("allow", "target", "allowed"),
    [
        (("tests.support",), "tests.support.pyjobs:echo", True),
        (("tests.support.pyjobs",), "tests.support.pyjobs:echo", True),  # the module itself
        (("tests",), "tests.support.pyjobs:echo", True),
        (("other", "tests.support"), "tests.support.pyjobs:echo", True),
        (("tests.sup",), "tests.support.pyjobs:echo", False),  # not on a dotted boundary
        (("tests.support.pyjob",), "tests.support.pyjobs:echo", False),
        (("tests.support.pyjobs.echo",), "tests.support.pyjobs:echo", False),  # a function is not a module prefix
        (("support",), "tests.support.pyjobs:echo", False),
        ((), "tests.support.pyjobs:echo", False),
    ],
)
def test_allow_python_covers_modules_on_dotted_boundaries(allow, target, allowed):
    result = run(target, allow=allow)
    assert result.ok is allowed, result.error
    if not allowed:
        assert result.error.startswith(
            "refused: module 'tests.support.pyjobs' is not covered by this node's --allow-python prefixes"
        ), result.error


def test_no_allow_python_says_so():
    assert "the node runs without --allow-python" in run("tests.support.pyjobs:echo", allow=()).error


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("tests.support.pyjobs", "invalid target 'tests.support.pyjobs': expected package.module:function"),
        ("tests.support.pyjobs:", "invalid target 'tests.support.pyjobs:': expected package.module:function"),
        (
            "tests.support.nosuch:fn",
            "cannot import tests.support.nosuch for tests.support.nosuch:fn: "
            "ModuleNotFoundError: No module named 'tests.support.nosuch'",
        ),
        ("tests.support.pyjobs:nosuch", "tests.support.pyjobs:nosuch: tests.support.pyjobs has no attribute 'nosuch'"),
        (
            "tests.support.pyjobs:echo.nosuch",
            "tests.support.pyjobs:echo.nosuch is refused: 'echo' is a function, not a "
            "class: after the colon a target walks through classes only",
        ),
        ("tests.support.pyjobs:NOT_CALLABLE", "tests.support.pyjobs:NOT_CALLABLE is not callable (int)"),
    ],
)
def test_bad_targets_fail_clearly(target, error):
    result = run(target)
    assert not result.ok
    assert result.error == error


def test_the_callable_gets_the_tick_and_its_arguments():
    result = run("tests.support.pyjobs:echo", 1, "two", flag=True)
    assert result.ok, result.error
    seen = json.loads(result.output)
    assert seen == {
        "job_id": "job-p",
        "scheduled_at_ms": 1_767_225_605_000,
        "scheduled_at": "2026-01-01T00:00:05+00:00",
        "attempt": 2,
        "fence": 7,
        "shard": 3,
        "node_id": "node-a",
        "idempotency_key": "job-p:1767225605000",
        "session": False,
        "args": [1, "two"],
        "kwargs": {"flag": True},
    }


def test_call_context_is_a_public_dataclass():
    ctx = CallContext(
        job_id="j",
        scheduled_at_ms=0,
        scheduled_at=datetime.fromtimestamp(0, tz=UTC),
        attempt=1,
        fence=1,
        shard=0,
        node_id="n",
        idempotency_key="j:0",
    )
    assert isinstance(ctx.cancel, threading.Event) and ctx.session is None


@pytest.mark.parametrize(
    ("target", "args", "output"),
    [
        ("returns", ("plain text",), "plain text"),
        ("returns", ("héllo ✓",), "héllo ✓"),
        ("returns_bytes", ("from bytes",), "from bytes"),
        ("returns", ({"a": [1, 2], "b": None},), '{"a": [1, 2], "b": null}'),
        ("returns", ([1, "x"],), '[1, "x"]'),
        ("returns", (42,), "42"),
        ("returns", (True,), "true"),
        ("returns", (None,), ""),
        ("returns_object", (), '{"when": "2026-01-01 00:00:05+00:00"}'),
    ],
)
def test_the_return_value_becomes_the_output(target, args, output):
    result = run(f"tests.support.pyjobs:{target}", *args)
    assert result.ok, result.error
    assert result.output == output


def test_a_long_output_is_truncated():
    result = run("tests.support.pyjobs:returns", "é" * OUTPUT_LIMIT_BYTES)
    assert result.ok
    assert len(result.output.encode("utf-8")) <= OUTPUT_LIMIT_BYTES
    assert result.output == "é" * (OUTPUT_LIMIT_BYTES // 2)


def test_an_exception_is_one_line_and_its_traceback_goes_to_the_log(caplog):
    caplog.set_level(logging.WARNING, logger="shardcron.executors.python")
    result = run("tests.support.pyjobs:boom", "first line\nsecond   line")
    assert not result.ok
    assert result.error == "ValueError: first line second line"
    assert "Traceback" not in result.error and result.output == ""
    [record] = [r for r in caplog.records if "raised ValueError" in r.getMessage()]
    assert record.levelno == logging.WARNING and record.exc_info is not None
    assert "job-p@1767225605000 attempt 2 (fence 7)" in record.getMessage()


def test_a_cooperative_callable_is_told_to_stop_on_timeout():
    n = name()
    result = run("tests.support.pyjobs:cooperative", n, timeout_s=0.3)
    assert not result.ok
    assert result.error == "timed out after 0.3s waiting for tests.support.pyjobs:cooperative"  # nothing ignored


def test_cancel_stops_the_call():
    n = name()
    cancel = Latch()
    threading.Thread(target=lambda: pyjobs.entered(n).wait(30) and cancel.set(), daemon=True).start()
    result = run("tests.support.pyjobs:cooperative", n, timeout_s=30, cancel=cancel)
    assert not result.ok
    assert result.error.startswith("cancelled: tests.support.pyjobs:cooperative was stopped"), result.error


def test_cancel_before_the_call():
    cancel = Latch()
    cancel.set()
    result = run("tests.support.pyjobs:echo", cancel=cancel)
    assert not result.ok and result.error == "cancelled: before tests.support.pyjobs:echo was called"


def test_a_callable_that_ignores_cancel_is_reported_and_never_succeeds(caplog):
    caplog.set_level(logging.WARNING, logger="shardcron.executors.python")
    n = name()
    result = run("tests.support.pyjobs:stubborn", n, timeout_s=0.3)
    assert not result.ok
    assert result.error == (
        "timed out after 0.3s waiting for tests.support.pyjobs:stubborn; "
        "tests.support.pyjobs:stubborn ignored cancel and is still running "
        "(its result will not be recorded)"
    )
    pyjobs.gate(n).set()
    wait_until(lambda: n in pyjobs.late, 30, 0.02, "the stubborn call to return")
    assert pyjobs.late[n] == "returned (cancel was set)"
    wait_until(
        lambda: any("returned after it was abandoned" in r.getMessage() for r in caplog.records),
        30,
        0.02,
        "the late return to be logged",
    )


def test_a_session_needs_a_store():
    result = PythonExecutor(None, ALLOW).run(spec("tests.support.pyjobs:echo", session=True), CTX, 5, Latch())
    assert not result.ok and "no store engine" in result.error


def test_a_session_is_refused_on_sqlite(tmp_path):
    from shardcron.store.engine import make_engine

    engine = make_engine(f"sqlite:///{tmp_path}/s.db")
    try:
        result = PythonExecutor(engine, ALLOW).run(spec("tests.support.pyjobs:echo", session=True), CTX, 5, Latch())
    finally:
        engine.dispose()
    assert not result.ok
    assert "needs a PostgreSQL or MariaDB store; this node's store is sqlite" in result.error
