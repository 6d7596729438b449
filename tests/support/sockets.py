"""Sockets for tests: a server that accepts connections and never answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_ACCEPT_POLL_S = 0.1


@contextmanager
def silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """A TCP port on 127.0.0.1 that accepts connections and never says anything (a server that hangs).

    Yields ``(port, accepted)``. A daemon thread accepts every connection and appends it to
    ``accepted``, so a test can wait for its client to have connected. When the block ends the
    thread stops, then every accepted socket and the listener are closed.
    """
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(_ACCEPT_POLL_S)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(srv.accept()[0])
            except OSError:  # the poll timed out (socket.timeout is an OSError): look at ``stop`` again
                continue

    thread = threading.Thread(target=accept, name="silent-server", daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(5 * _ACCEPT_POLL_S)  # so nothing is accepted after the sockets below are closed
        for s in accepted:
            s.close()
        srv.close()
