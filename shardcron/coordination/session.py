"""A node's session: one etcd lease, kept alive at TTL/3, like etcd's ``concurrency.Session``.

Losing the lease is one *event*: ``done`` (a ``runtime.latch.Latch``) is set
and every ``on_lost`` callback runs, once. Every waiter waits on it, or on a
shard's event derived from it (``leader.shard_cancel``); nothing polls an "am
I leader" flag on a timer.

The lease is judged lost, on this node's monotonic clock, at ``lost_at()``:
``SAFETY_MARGIN_S`` before TTL has passed since the *send* time of the last
renewal etcd confirmed. etcd starts its own countdown no earlier than it
receives that renewal, so by the time the server can expire the lease and let
a successor win, this node has already given up. The keep-alive thread wakes
at that deadline and sets ``done`` there, as etcd's ``Session.Done()`` closes
at its own; a renewal in flight is given no longer than the deadline, so the
thread is back in time. ``can_act()`` turns false at the same instant, and is
still asked right before any executor starts: after a stop-the-world pause the
clock has passed the deadline before the keep-alive thread has run to say so.

The lease is not kept alive for a holder that cannot act on it: before each
renewal the keep-alive thread asks the holder's ``watchdog`` (the coordinator's:
is it stuck in one step past its budget? see ``runtime.steps``). A reason
stops the renewals for good; the holder's node then revokes the lease, or it
is lost at its deadline like any lease nobody renews.

States:

    ALIVE      renewing at TTL/3; ``can_act()`` while the clock is before ``lost_at()``
    UNRENEWED  the watchdog named a reason: no renewal is sent any more; ``can_act()`` until ``lost_at()``
    LOST       ``done`` set, ``lost_reason`` says why; terminal
    CLOSED     renewals stopped by this node (``close()`` revokes, ``orphan()`` does not); ``done`` stays unset

State transitions (and their causes), all on the keep-alive thread but the last:

    ALIVE -> ALIVE        a renewal etcd confirmed: ``lost_at()`` moves to its send time + TTL - margin
    ALIVE -> LOST         the clock reached ``lost_at()`` with no renewal confirmed before it
    ALIVE -> LOST         a renewal was answered with TTL<=0 (expired, or revoked by someone else)
    ALIVE -> UNRENEWED    the watchdog, asked before a renewal, named why the holder is stuck
    UNRENEWED -> LOST     the clock reached ``lost_at()``
    ALIVE | UNRENEWED -> CLOSED   ``close()`` or ``orphan()``, from any thread
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from shardcron import clock, metrics
from shardcron.coordination.etcd import Etcd
from shardcron.errors import EtcdUnavailable
from shardcron.runtime import crashpoints
from shardcron.runtime.latch import Latch
from shardcron.runtime.lifeline import UNWATCHED, Lifeline

log = logging.getLogger(__name__)

# Monotonic clocks on two machines can run at slightly different rates; stop
# acting this much before the computed deadline.
SAFETY_MARGIN_S = 0.15

# After a failed renewal, try again this soon (the client has moved to another
# member by then): when a member dies, the lease has TTL - TTL/3 left to find a
# live one, and a half-second pause per try spent most of it.
RETRY_AFTER_FAILURE_S = 0.1


class Session:
    def __init__(
        self,
        etcd: Etcd,
        ttl_s: int,
        *,
        name: str = "session",
        lifeline: Lifeline = UNWATCHED,
        watchdog: Callable[[], str | None] = lambda: None,
    ):
        """``watchdog()`` is asked on the keep-alive thread before each renewal: why the lease's holder is stuck,
        or None. It must not block: the renewal waits for it."""
        self._etcd = etcd
        self._name = name
        self._watchdog = watchdog
        self.unrenewed_why: str | None = None  # the watchdog's reason, once it named one
        sent = clock.monotonic()
        self.lease_id, granted = etcd.grant(ttl_s)
        self.ttl_s = granted
        self._last_confirmed = sent
        self._cond = threading.Condition()
        self.done = Latch()  # set once, when the lease is lost
        self.lost_reason: str | None = None  # written before ``done`` is set
        self._closed = False
        # It ends when the lease is lost or closed (may_end), which the coordinator handles; only a raise is a death.
        self._thread = lifeline.thread(self._keepalive, f"{name}-keepalive", may_end=True)
        self._thread.start()
        log.info("session started lease=%x ttl=%ss", self.lease_id, self.ttl_s)

    # -- the contract -----------------------------------------------------------

    def on_lost(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Run ``callback(reason)`` once when the lease is lost (at once if it already is).

        Returns what takes the callback back. It runs on the keep-alive thread: it must not block."""
        return self.done.on_set(lambda: callback(self.lost_reason or "lost"))

    def valid_until(self) -> float:
        """Monotonic time after which the lease may already have expired on the server."""
        return self._last_confirmed + self.ttl_s

    def lost_at(self) -> float:
        """Monotonic time at which this node declares the lease lost, unless a renewal is confirmed first."""
        return self.valid_until() - SAFETY_MARGIN_S

    def seconds_since_renewal(self) -> float:
        return clock.monotonic() - self._last_confirmed

    def can_act(self) -> bool:
        """True while the lease provably cannot have expired yet. The point check right before work starts."""
        return not self.done.is_set() and clock.monotonic() < self.lost_at()

    def close(self) -> None:
        """Stop renewing and revoke the lease: every key bound to it goes at once."""
        if not self._stop():
            return
        try:
            self._etcd.revoke(self.lease_id)
            log.info("session closed, lease %x revoked", self.lease_id)
        except EtcdUnavailable as e:
            log.warning("could not revoke lease %x (%s); it expires within %ss", self.lease_id, e, self.ttl_s)

    def orphan(self) -> None:
        """Stop renewing without revoking: the keys live until the TTL runs out."""
        self._stop()

    # -- internals --------------------------------------------------------------

    def _stop(self) -> bool:
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=self.ttl_s)
        return True

    def _lose(self, reason: str) -> None:
        # Only the keep-alive thread calls this, once: it returns right after.
        self.lost_reason = reason
        log.error("session lost lease=%x: %s", self.lease_id, reason)
        self.done.set()  # runs every callback; one that raises is logged and does not stop the others

    def _keepalive(self) -> None:
        interval = self.ttl_s / 3.0
        next_renewal = self._last_confirmed + interval
        while True:
            crashpoints.fail_worker()
            with self._cond:
                while not self._closed:
                    now = clock.monotonic()
                    wake = min(next_renewal, self.lost_at())
                    if now >= wake:
                        break
                    self._cond.wait(wake - now)
                if self._closed:
                    return
            sent = clock.monotonic()
            if sent >= self.lost_at():
                self._lose(
                    f"no renewal confirmed for {self.ttl_s - SAFETY_MARGIN_S:g}s (lease TTL less the safety "
                    "margin); a successor may lead soon"
                    if self.unrenewed_why is None
                    else f"not renewed since its holder is stuck ({self.unrenewed_why})"
                )
                return
            if self.unrenewed_why is None and (why := self._watchdog()) is not None:
                self.unrenewed_why = why
                log.error("lease %x is renewed no more: %s", self.lease_id, why)
            if self.unrenewed_why is not None:
                next_renewal = math.inf  # the thread wakes at ``lost_at()``, or when closed
                continue
            # The call must return by the deadline, so that a hung network does not
            # hold this thread past the moment it must declare the lease lost; and a
            # member that hangs (one in a leader election) may take half an interval,
            # not all of it, so another member still gets a try.
            timeout = min(max(0.2, interval / 2), self.lost_at() - sent)
            try:
                ttl = self._etcd.keepalive_once(self.lease_id, timeout)
            except EtcdUnavailable as e:
                log.warning("lease %x renewal failed: %s", self.lease_id, e)
                next_renewal = clock.monotonic() + min(RETRY_AFTER_FAILURE_S, interval / 2)
                continue
            if ttl <= 0:
                self._lose("etcd reports the lease expired (TTL<=0)")
                return
            if clock.monotonic() >= self.lost_at():
                # ``can_act()`` has said False already; it must not come back: the loss is one event.
                self._lose("the renewal was confirmed only after the lease's deadline; a successor may lead soon")
                return
            with self._cond:
                due = self._last_confirmed + interval  # retries after a failure do not move it
                self._last_confirmed = sent
            metrics.lease_renewal_lateness.observe(max(0.0, clock.monotonic() - due))
            next_renewal = sent + interval
