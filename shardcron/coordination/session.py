"""A node's session: one etcd lease, kept alive at TTL/3, like etcd's ``concurrency.Session``.

Losing the lease is an *event*: ``done`` is set and every ``on_lost`` callback
runs once. Nothing polls an "am I leader" flag; work stops because it waits
on this event.

The lease is judged lost, on this node's monotonic clock, as soon as TTL has
passed since the *send* time of the last renewal etcd confirmed. etcd starts
its own countdown no earlier than it receives that renewal, so by the time the
server can expire the lease and let a successor win, this node has already
given up. ``can_act()`` applies the same bound right before any executor
starts, which closes the window between a claim and the work behind it, even
across a stop-the-world pause.

States:  ALIVE --(renewal reports TTL<=0 | deadline passed | revoked)--> LOST
         ALIVE --close()/orphan()--> CLOSED
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from shardcron import clock, metrics
from shardcron.coordination.etcd import Etcd
from shardcron.errors import EtcdUnavailable
from shardcron.runtime import crashpoints
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
    def __init__(self, etcd: Etcd, ttl_s: int, *, name: str = "session", lifeline: Lifeline = UNWATCHED):
        self._etcd = etcd
        self._name = name
        sent = clock.monotonic()
        self.lease_id, granted = etcd.grant(ttl_s)
        self.ttl_s = granted
        self._last_confirmed = sent
        self._cond = threading.Condition()
        self.done = threading.Event()
        self.lost_reason: str | None = None
        self._closed = False
        self._callbacks: list[Callable[[str], None]] = []
        # It ends when the lease is lost or closed (may_end), which the coordinator handles; only a raise is a death.
        self._thread = lifeline.thread(self._keepalive, f"{name}-keepalive", may_end=True)
        self._thread.start()
        log.info("session started lease=%x ttl=%ss", self.lease_id, self.ttl_s)

    # -- the contract -----------------------------------------------------------

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Run ``callback(reason)`` once when the lease is lost (at once if it already is)."""
        with self._cond:
            if not self.done.is_set():
                self._callbacks.append(callback)
                return
        callback(self.lost_reason or "lost")

    def valid_until(self) -> float:
        """Monotonic time after which the lease may already have expired on the server."""
        return self._last_confirmed + self.ttl_s

    def seconds_since_renewal(self) -> float:
        return clock.monotonic() - self._last_confirmed

    def can_act(self) -> bool:
        """True while the lease provably cannot have expired yet. Checked right before work starts."""
        return not self.done.is_set() and clock.monotonic() + SAFETY_MARGIN_S < self.valid_until()

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
        with self._cond:
            if self.done.is_set():
                return
            self.lost_reason = reason
            self.done.set()
            callbacks, self._callbacks = self._callbacks, []
        log.error("session lost lease=%x: %s", self.lease_id, reason)
        for cb in callbacks:
            try:
                cb(reason)
            except Exception:  # noqa: BLE001 - one failing listener must not stop the others
                log.exception("session-lost callback failed")

    def _keepalive(self) -> None:
        interval = self.ttl_s / 3.0
        next_renewal = self._last_confirmed + interval
        while True:
            crashpoints.fail_worker()
            with self._cond:
                while not self._closed:
                    now = clock.monotonic()
                    wake = min(next_renewal, self.valid_until())
                    if now >= wake:
                        break
                    self._cond.wait(wake - now)
                if self._closed:
                    return
            if clock.monotonic() >= self.valid_until():
                self._lose(f"no renewal confirmed for {self.ttl_s}s (lease TTL); a successor may lead now")
                return
            sent = clock.monotonic()
            # The call must return before the lease could expire, so that a hung
            # network does not hold this thread past the deadline; and a member
            # that hangs (one in a leader election) may take half an interval,
            # not all of it, so another member still gets a try.
            timeout = max(0.2, min(interval / 2, self.valid_until() - sent))
            try:
                ttl = self._etcd.keepalive_once(self.lease_id, timeout)
            except EtcdUnavailable as e:
                log.warning("lease %x renewal failed: %s", self.lease_id, e)
                next_renewal = clock.monotonic() + min(RETRY_AFTER_FAILURE_S, interval / 2)
                continue
            if ttl <= 0:
                self._lose("etcd reports the lease expired (TTL<=0)")
                return
            with self._cond:
                due = self._last_confirmed + interval  # retries after a failure do not move it
                self._last_confirmed = sent
            metrics.lease_renewal_lateness.observe(max(0.0, clock.monotonic() - due))
            next_renewal = sent + interval
