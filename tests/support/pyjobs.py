"""Callables for the python executor's tests: ``target = "tests.support.pyjobs:<name>"``.

In-process tests steer them with named gates (``gate(name)``): a callable sets
``entered(name)`` when it is inside, then waits for ``gate(name)``. Node
processes cannot share events with the test, so ``record_effect`` talks to
the test through files instead (see its docstring).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table

from shardcron.executors.python import CallContext

metadata = MetaData()

# The "user's" table: one row per effect. Deliberately no unique key on (job_id, slot):
# a slot's effect written twice must show up as two rows, not as a blocked or failed insert.
effects = Table(
    "user_effects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(200), nullable=False),
    Column("slot", BigInteger, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("node_id", String(100), nullable=False),
    Column("attempt", Integer, nullable=False),
)

NOT_CALLABLE = 42

_lock = threading.Lock()
_gates: dict[str, threading.Event] = {}
_entered: dict[str, threading.Event] = {}
late: dict[str, str] = {}  # name -> how a held call finally ended


def gate(name: str) -> threading.Event:
    with _lock:
        return _gates.setdefault(name, threading.Event())


def entered(name: str) -> threading.Event:
    with _lock:
        return _entered.setdefault(name, threading.Event())


def echo(ctx: CallContext, *args, **kwargs) -> dict:
    return {
        "job_id": ctx.job_id,
        "scheduled_at_ms": ctx.scheduled_at_ms,
        "scheduled_at": ctx.scheduled_at.isoformat(),
        "attempt": ctx.attempt,
        "fence": ctx.fence,
        "shard": ctx.shard,
        "node_id": ctx.node_id,
        "idempotency_key": ctx.idempotency_key,
        "session": ctx.session is not None,
        "args": list(args),
        "kwargs": kwargs,
    }


def returns(ctx: CallContext, value):
    return value


def returns_bytes(ctx: CallContext, text: str) -> bytes:
    return text.encode("utf-8")


def returns_object(ctx: CallContext) -> object:
    return {"when": ctx.scheduled_at}  # not JSON as it is: shown with str()


def boom(ctx: CallContext, message: str) -> None:
    raise ValueError(message)


def cooperative(ctx: CallContext, name: str) -> str:
    """Waits for cancel, as a well-behaved long job does, then returns."""
    entered(name).set()
    ctx.cancel.wait(60)
    return "stopped when told"


def stubborn(ctx: CallContext, name: str) -> str:
    """Ignores cancel: waits for its gate only, then records how it ended in ``late``."""
    entered(name).set()
    gate(name).wait(60)
    late[name] = f"returned (cancel was {'set' if ctx.cancel.is_set() else 'not set'})"
    return "done"


def insert_then_wait(ctx: CallContext, name: str, cooperate: bool = False) -> str:
    """Writes one effect row in its session, then waits for its gate (or for cancel, if ``cooperate``)."""
    ctx.session.execute(
        effects.insert().values(
            job_id=ctx.job_id, slot=ctx.scheduled_at_ms, fence=ctx.fence, node_id=ctx.node_id, attempt=ctx.attempt
        )
    )
    ctx.session.commit()  # only a flush: the executor commits with the tick's fenced result
    entered(name).set()
    deadline = time.monotonic() + 60
    while not gate(name).is_set() and time.monotonic() < deadline:
        if cooperate and ctx.cancel.is_set():
            break
        # A deliberate hold until the test opens the gate (or cancels, if cooperate); each 20 ms wait is only
        # the step between looks at the two.
        gate(name).wait(0.02)
    late[name] = "returned"
    return f"wrote slot {ctx.scheduled_at_ms} under fence {ctx.fence}"


def rolls_back(ctx: CallContext) -> str:
    ctx.session.execute(
        effects.insert().values(
            job_id=ctx.job_id, slot=ctx.scheduled_at_ms, fence=ctx.fence, node_id=ctx.node_id, attempt=ctx.attempt
        )
    )
    ctx.session.rollback()
    return "changed my mind"


_held_once = False


def record_effect(ctx: CallContext) -> str:
    """One effect row per call, in the fenced session. For the SIGSTOP test, in a node started with
    ``SHARDCRON_TEST_PYJOB_HOLD=<dir>``: the first call writes ``<dir>/held.json`` (its slot, fence,
    node) and then keeps working, ignoring cancel, until ``<dir>/release`` exists (at most 120 s)."""
    global _held_once
    ctx.session.execute(
        effects.insert().values(
            job_id=ctx.job_id, slot=ctx.scheduled_at_ms, fence=ctx.fence, node_id=ctx.node_id, attempt=ctx.attempt
        )
    )
    hold = os.environ.get("SHARDCRON_TEST_PYJOB_HOLD")
    if hold and not _held_once:
        _held_once = True
        folder = Path(hold)
        tmp = folder / "held.json.tmp"
        tmp.write_text(json.dumps({"slot": ctx.scheduled_at_ms, "fence": ctx.fence, "node": ctx.node_id}))
        tmp.rename(folder / "held.json")  # appears whole
        deadline = time.monotonic() + 120
        while not (folder / "release").exists() and time.monotonic() < deadline:
            # A deliberate hold, not a wait for cancel: the attempt keeps "working", deaf to ctx.cancel, until
            # the test makes <dir>/release; each sleep is only the step between looks for that file.
            time.sleep(0.05)
    return f"effect for {ctx.scheduled_at_ms} under fence {ctx.fence}"


def session_settings(ctx: CallContext) -> str:
    """How long the session's transaction may sit idle, as the database sees it."""
    conn = ctx.session.connection()
    if conn.dialect.name == "postgresql":
        return str(conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar())
    return f"{conn.exec_driver_sql('SELECT @@session.idle_transaction_timeout').scalar()}s"


def thread_names(ctx: CallContext, path: str) -> int:
    """The names of the node's threads now, written to ``path`` as JSON: a test outside the node's process
    sees which threads the node runs. Returns how many there are."""
    names = sorted(t.name for t in threading.enumerate())
    Path(path).write_text(json.dumps(names))
    return len(names)
