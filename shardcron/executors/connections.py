"""One client per broker URL in this process, made on first use and closed when the node stops.

Broker clients are expensive to open (a TCP and often TLS handshake, an AMQP
channel, a NATS CONNECT) and cheap to share, so no executor opens one per
tick. ``Connections.get((kind, url), make)`` returns the client for that key,
making it once even when many worker threads ask at the same time. A client
made on the event loop (it connects asynchronously) is looked up with
``find`` and pooled with ``put``. After an
error that may have broken the client, an executor calls ``discard`` so that
the next tick reconnects instead of reusing a dead client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Connections:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[Hashable, tuple[Any, Callable[[Any], None] | None]] = {}
        self._making: dict[Hashable, threading.Lock] = {}
        self._closed = False

    def get(self, key: Hashable, make: Callable[[], T], close: Callable[[T], None] | None = None) -> T:
        """The client for ``key``; ``make()`` runs at most once at a time per key (outside the pool's lock)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the node is stopping: no new broker connections")
            found = self._clients.get(key)
            if found is not None:
                return found[0]
            making = self._making.setdefault(key, threading.Lock())
        with making:  # one maker per key; the others wait for it and share what it made
            with self._lock:
                found = self._clients.get(key)
                if found is not None:
                    return found[0]
            client = make()
            with self._lock:
                if self._closed:
                    _close_quietly(key, client, close)
                    raise RuntimeError("the node is stopping: no new broker connections")
                self._clients[key] = (client, close)
            return client

    def find(self, key: Hashable) -> Any:
        """The client pooled for ``key``, or None: for a caller on the event loop that makes its client itself."""
        with self._lock:
            found = self._clients.get(key)
            return None if found is None else found[0]

    def put(self, key: Hashable, client: T, close: Callable[[T], None] | None = None) -> T:
        """Pool ``client`` for ``key``, unless one is pooled already: then that one, and ``client`` is closed."""
        with self._lock:
            found = None if self._closed else self._clients.get(key)
            if not self._closed and found is None:
                self._clients[key] = (client, close)
                return client
        _close_quietly(key, client, close)
        if found is None:
            raise RuntimeError("the node is stopping: no new broker connections")
        return found[0]

    def discard(self, key: Hashable, client: Any = None) -> None:
        """Forget (and close) the client for ``key``; with ``client``, only if it is still that one."""
        with self._lock:
            found = self._clients.get(key)
            if found is None or (client is not None and found[0] is not client):
                return
            del self._clients[key]
        _close_quietly(key, *found)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, {}
        for key, (client, close) in clients.items():
            _close_quietly(key, client, close)


def _close_quietly(key: Hashable, client: Any, close: Callable[[Any], None] | None) -> None:
    if close is None:
        return
    try:
        close(client)
    except Exception as e:  # noqa: BLE001 - closing a broken client must not stop the others closing
        log.debug("closing the client for %s: %s", key[0] if isinstance(key, tuple) else key, e)
