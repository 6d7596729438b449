"""Runs a tick as a call of a Python function in the node's process: ``target = "package.module:function"``.

Refused unless the node's ``--allow-python`` prefixes cover the module, on
dotted boundaries (``myapp`` covers ``myapp`` and ``myapp.tasks``, not
``myappx``): calling a function is running code, like a shell job. Right
before the call the target is resolved again by ``python_target.py``: it must
be a function or a class's method *defined* under a prefix, reached through
classes only, so ``myapp:os.system`` is refused even though ``myapp`` imports
``os``. Admission checks the same (``check_target``); a job row that skipped
it still fails here, naming the rule.

The function is called as ``fn(ctx, *args, **kwargs)`` with a ``CallContext``,
in a thread of its own, while the tick's worker thread waits, in one wait, for
the call to end, for the job's timeout and for ``cancel``. Python cannot stop
a thread, so on timeout or cancel the executor sets ``ctx.cancel``, waits a
short grace for the function to notice, and reports the attempt failed. From
that moment the call is abandoned: whatever it returns later is never recorded
as a success, and its session is rolled back. A function that ignores
``ctx.cancel`` is reported as such ("... ignored cancel and is still
running"). So a long function should look at ``ctx.cancel`` between steps.

It succeeds unless it raises. A raised exception is reported as one line,
``"ExceptionType: message"``; its traceback goes to the node's log. A returned
str, bytes or JSON value becomes the tick's output.

``session = true`` (PostgreSQL and MariaDB stores): ``ctx.session`` is a
SQLAlchemy ORM ``Session`` on the store's database, in a transaction shardcron
opens. ``session.commit()`` only flushes; the transaction commits after the
function returns, together with the tick's ``succeeded`` row and only if this
node's fence still holds (``store/effects.py``). So the job's writes in that
session happen exactly once per slot: a node that dies before the commit leaves
nothing (the next leader retries the slot), and a deposed leader's writes roll
back. Each statement is bound by the store's statement timeout, and the
transaction may sit idle between statements for the job's timeout plus 10 s
(PostgreSQL's idle_in_transaction_session_timeout, MariaDB's
idle_transaction_timeout), so a stopped node cannot hold its locks for ever.
Sessions come from a connection pool of their own, so long jobs cannot starve
the scheduler's store writes of connections.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from shardcron.abc import Cancel
from shardcron.errors import FencedOut, ShardcronError
from shardcron.executors.base import now_ms, truncate_output, wait_done_or_cancelled
from shardcron.executors.python_target import TargetRefused, one_line, resolve_target
from shardcron.jobkey import DEFAULT_NAMESPACE, split_key
from shardcron.model import ExecutionResult, ExecutorSpec, PythonSpec, SlotRef, TickContext
from shardcron.runtime.latch import Latch
from shardcron.spec.executors import python_module_allowed
from shardcron.store.effects import TickNotOwned, record_success_in
from shardcron.store.engine import make_engine

log = logging.getLogger(__name__)

# How long a cancelled or timed-out call gets to notice ``ctx.cancel`` and end.
CANCEL_GRACE_S = 2.0
# How long the executor waits for a commit that began before the deadline: the
# store's statement timeout bounds it, and its outcome is the truth to report.
COMMIT_WAIT_S = 30.0
# Added to the job's timeout for PostgreSQL's idle_in_transaction_session_timeout (see _open_transaction).
_IDLE_MARGIN_MS = 10_000
THREAD_NAME = "shardcron-python"


@dataclass
class CallContext:
    """What a Python job's function is told about the tick it runs (its first argument)."""

    job_id: str  # the id within its namespace
    scheduled_at_ms: int
    scheduled_at: datetime  # the slot, timezone-aware UTC
    attempt: int
    fence: int
    shard: int
    node_id: str
    idempotency_key: str  # the same on every attempt and leader (executors/identity.py)
    cancel: threading.Event = field(default_factory=threading.Event)  # set on timeout or shard loss: stop soon
    session: Session | None = None  # with session = true; commits with the tick's fenced result
    namespace: str = DEFAULT_NAMESPACE


class PythonExecutor:
    """``engine``: the store's. Sessions get a pool of their own on the same database, made on first use: a
    job holds its connection for its whole run, and many long jobs must not starve the scheduler's own
    store writes (claims, fence checks, results) of connections. ``close()`` disposes of that pool."""

    def __init__(self, engine: Engine | None = None, allow_python: tuple[str, ...] = ()) -> None:
        self._engine = engine
        self._allow = tuple(allow_python)
        self._lock = threading.Lock()
        self._sessions: Engine | None = None

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, None
        if sessions is not None:
            sessions.dispose()

    def _session_engine(self) -> Engine:
        if self._engine is None:  # _refusal turns such a job away first
            raise ShardcronError("this node has no store engine to open a session on")
        with self._lock:
            if self._sessions is None:
                self._sessions = make_engine(self._engine.url)
            return self._sessions

    def run(self, spec: ExecutorSpec, ctx: TickContext, timeout_s: float, cancel: Cancel) -> ExecutionResult:
        started = now_ms()

        def failed(error: str) -> ExecutionResult:
            return ExecutionResult(ok=False, started_at_ms=started, finished_at_ms=now_ms(), error=error)

        p = spec.python
        if p is None:
            return failed("invalid job: a python executor needs a target")
        refused = self._refusal(p)
        if refused:
            return failed(refused)
        if cancel.is_set():
            return failed(f"cancelled: before {p.target} was called")
        call = _Call(p, ctx, self._session_engine if p.session else None, timeout_s, started, self._allow)
        try:
            threading.Thread(target=call.perform, name=f"{THREAD_NAME}-{ctx.job_id}", daemon=True).start()
        except RuntimeError as e:  # out of threads
            return failed(f"could not start a thread for {p.target}: {e}")

        deadline = time.monotonic() + timeout_s
        while not call.done.is_set():
            wait_done_or_cancelled(call.done, cancel, deadline - time.monotonic())
            if call.done.is_set():
                break
            if not cancel.is_set() and time.monotonic() < deadline:
                continue  # only a wait that returned a hair early: neither event, before the deadline
            reason = (
                f"cancelled: {p.target} was stopped (this node lost the shard or is stopping)"
                if cancel.is_set()
                else f"timed out after {timeout_s:g}s waiting for {p.target}"
            )
            if call.abandon(reason):
                return failed(call.after_abandon(reason))
            # Its commit began before the deadline: that commit's outcome is what happened.
            if not call.done.wait(COMMIT_WAIT_S):
                return failed(
                    f"{p.target} returned, but the store did not finish its commit within "
                    f"{COMMIT_WAIT_S:g}s: the tick's record says whether it landed"
                )
        return call.result

    def _refusal(self, p: PythonSpec) -> str | None:
        module = p.target.partition(":")[0]
        if not python_module_allowed(p.target, self._allow):
            allowed = ", ".join(self._allow) if self._allow else "none: the node runs without --allow-python"
            return f"refused: module {module!r} is not covered by this node's --allow-python prefixes ({allowed})"
        if p.session:
            if self._engine is None:
                return f"{p.target} asks for a session, but this node has no store engine to open it on"
            if self._engine.dialect.name not in ("postgresql", "mysql", "mariadb"):
                return (
                    f"{p.target} asks for a session, which needs a PostgreSQL or MariaDB store; this node's "
                    f"store is {self._engine.dialect.name} (its open transaction would hold the whole file's "
                    "write lock while the job runs)"
                )
        return None


class _Call:
    """One call of a job's function, on its own thread.

    Who decides the outcome: the waiting thread may ``abandon`` the call
    (timeout, cancel) up to the moment the function has returned and the call
    ``_claim``-s its finish; after that the call's own commit decides. The two
    meet under ``_lock``, so a call is either abandoned (nothing commits) or
    finishing (the waiter waits for its commit), never both.
    """

    def __init__(
        self,
        spec: PythonSpec,
        ctx: TickContext,
        engine: Callable[[], Engine] | None,
        timeout_s: float,
        started: int,
        allow: tuple[str, ...],
    ):
        self.spec = spec
        self.allow = allow  # --allow-python: the target is resolved under it right before the call
        self.tick = ctx
        self.engine = engine  # gives the engine sessions are opened on; None: no session
        self.timeout_s = timeout_s
        self.started = started
        self.ctx = CallContext(
            job_id=split_key(ctx.job_id).id,
            namespace=split_key(ctx.job_id).namespace,
            scheduled_at_ms=ctx.scheduled_at_ms,
            scheduled_at=datetime.fromtimestamp(ctx.scheduled_at_ms / 1000, tz=UTC),
            attempt=ctx.attempt,
            fence=ctx.fence,
            shard=ctx.shard,
            node_id=ctx.node_id,
            idempotency_key=ctx.idempotency_key,
        )
        self.done = Latch()  # set when the call has ended, result and commit included
        self.result = ExecutionResult(
            ok=False, started_at_ms=started, finished_at_ms=started, error=f"{spec.target} ended without a result"
        )
        self._lock = threading.Lock()
        self._abandoned: str | None = None
        self._finishing = False

    # -- the waiting thread ----------------------------------------------------------------

    def abandon(self, reason: str) -> bool:
        """Give up on the call; False when it is already finishing (its commit has begun)."""
        with self._lock:
            if self._finishing:
                return False
            self._abandoned = reason
        self.ctx.cancel.set()
        return True

    def after_abandon(self, reason: str) -> str:
        """Wait the grace for the function to end; the error to report."""
        if self.done.wait(CANCEL_GRACE_S):
            return reason
        what = " and its session will be rolled back" if self.engine is not None else ""
        self._log(
            logging.WARNING,
            "%s ignored cancel for %gs and is still running; its result will be discarded%s",
            self.spec.target,
            CANCEL_GRACE_S,
            what,
        )
        return (
            f"{reason}; {self.spec.target} ignored cancel and is still running (its result will not be recorded{what})"
        )

    # -- the call's own thread -------------------------------------------------------------

    def perform(self) -> None:
        try:
            fn = resolve_target(self.spec.target, self.allow)
            if self.engine is None:
                self._call_plain(fn)
            else:
                self._call_in_session(fn, self.engine)
        except TargetRefused as e:
            self._fail(str(e))
        except Exception as e:  # noqa: BLE001 - a bug here must still end the call with a result
            log.warning("python job %s: unexpected error around the call", self.tick.job_id, exc_info=True)
            self._fail(f"{type(e).__name__}: {one_line(e)}")
        finally:
            self.done.set()

    def _call_plain(self, fn: Callable[..., Any]) -> None:
        value, error = self._invoke(fn)
        if not self._claim():
            self._log_late(error)
        elif error is not None:
            self._fail(error)
        else:
            self._succeed(value)

    def _call_in_session(self, fn: Callable[..., Any], engine: Callable[[], Engine]) -> None:
        try:
            conn = engine().connect()
        except (sa_exc.SQLAlchemyError, ShardcronError) as e:
            reason = _db_reason(e) if isinstance(e, sa_exc.SQLAlchemyError) else str(e)
            self._fail(f"cannot open a session on the store for {self.spec.target}: {reason}")
            return
        with conn:
            tx = conn.begin()
            session = Session(bind=conn, join_transaction_mode="rollback_only")
            try:
                try:
                    self._open_transaction(conn)
                except sa_exc.SQLAlchemyError as e:
                    self._fail(f"cannot open a session on the store for {self.spec.target}: {_db_reason(e)}")
                    return
                self.ctx.session = session
                value, error = self._invoke(fn, session)
                if not self._claim():
                    if tx.is_active:
                        tx.rollback()
                    self._log_late(error, rolled_back=True)
                elif error is not None:
                    self._fail(error)
                elif not tx.is_active:  # the function rolled its session back: it chose to write nothing
                    self._succeed(value, note="(the function rolled its session back: nothing written)")
                else:
                    self._commit(conn, tx, value)
            finally:
                session.close()
                if tx.is_active:
                    tx.rollback()

    def _open_transaction(self, conn: Connection) -> None:
        # The store's engine ends a transaction idle for 2x the statement
        # timeout (engine.py); a job may well think longer than that between
        # statements. Still bounded, so that a stopped process cannot hold its
        # locks for ever: the job's timeout plus a margin.
        ms = int(self.timeout_s * 1000) + _IDLE_MARGIN_MS
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {ms}")
        elif getattr(conn.dialect, "is_mariadb", False):
            # No per-transaction form; the connection belongs to the sessions' own pool, and every call sets it.
            conn.exec_driver_sql(f"SET SESSION idle_transaction_timeout = {-(-ms // 1000)}")

    def _commit(self, conn: Connection, tx, value: Any) -> None:
        result = ExecutionResult(ok=True, started_at_ms=self.started, finished_at_ms=now_ms(), output=_output(value))
        slot = SlotRef(self.tick.job_id, self.tick.scheduled_at_ms)
        try:
            record_success_in(conn, slot, self.tick.attempt, result, shard=self.tick.shard, fence=self.tick.fence)
            tx.commit()
        except FencedOut as e:
            tx.rollback()
            self._log(logging.WARNING, "%s returned but %s: its writes were rolled back", self.spec.target, e)
            self._fail(
                f"fenced out: shard {e.shard}'s fence moved from {e.fence} to {e.current} while "
                f"{self.spec.target} ran (a newer leader owns the slot): its writes were rolled back"
            )
            return
        except TickNotOwned as e:
            tx.rollback()
            self._log(logging.WARNING, "%s returned but %s: its writes were rolled back", self.spec.target, e)
            self._fail(f"{e}: the writes of {self.spec.target} were rolled back")
            return
        except sa_exc.SQLAlchemyError as e:
            self._log(logging.WARNING, "committing %s's writes failed: %s", self.spec.target, one_line(e))
            self._fail(
                f"committing the writes of {self.spec.target} failed (rolled back unless the tick's record "
                f"says succeeded): {_db_reason(e)}"
            )
            return
        self.result = result

    def _invoke(self, fn, session: Session | None = None) -> tuple[Any, str | None]:
        """Call the function (and flush its session): (value, None) or (None, one-line error)."""
        try:
            value = fn(self.ctx, *self.spec.args, **dict(self.spec.kwargs))
            if session is not None:
                session.flush()  # pending ORM objects fail here, as the function's own error
            return value, None
        except Exception as e:  # noqa: BLE001 - every failure of the job is a result
            if self._abandoned is None:
                self._log(logging.WARNING, "%s raised %s", self.spec.target, type(e).__name__, exc_info=True)
            return None, f"{type(e).__name__}: {one_line(e)}"

    def _claim(self) -> bool:
        """Mark the call finishing, unless it was abandoned (then it must not commit nor report)."""
        with self._lock:
            if self._abandoned is None:
                self._finishing = True
            return self._finishing

    def _log_late(self, error: str | None, rolled_back: bool = False) -> None:
        outcome = f"raised {error}" if error else "returned"
        session = "; its session was rolled back" if rolled_back else ""
        self._log(
            logging.WARNING,
            "%s %s after it was abandoned (%s): its result is discarded%s",
            self.spec.target,
            outcome,
            self._abandoned,
            session,
        )

    def _succeed(self, value: Any, note: str = "") -> None:
        output = _output(value)
        if note:
            output = f"{output} {note}".strip()
        self.result = ExecutionResult(ok=True, started_at_ms=self.started, finished_at_ms=now_ms(), output=output)

    def _fail(self, error: str) -> None:
        self.result = ExecutionResult(ok=False, started_at_ms=self.started, finished_at_ms=now_ms(), error=error)

    def _log(self, level: int, msg: str, *args, exc_info: bool = False) -> None:
        t = self.tick
        log.log(
            level,
            "python job %s@%d attempt %d (fence %d): " + msg,
            t.job_id,
            t.scheduled_at_ms,
            t.attempt,
            t.fence,
            *args,
            exc_info=exc_info,
            extra={"job": t.job_id, "shard": t.shard, "fence": t.fence},
        )


def _output(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return truncate_output(value)
    if isinstance(value, str):
        return truncate_output(value.encode("utf-8", "surrogatepass"))
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular, or a key json cannot take
        text = repr(value)
    return truncate_output(text.encode("utf-8", "surrogatepass"))


def _db_reason(e: sa_exc.SQLAlchemyError) -> str:
    orig = getattr(e, "orig", None) or e
    return f"{type(orig).__name__}: {one_line(orig)}"
