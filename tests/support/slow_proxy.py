"""A TCP proxy that holds every client-to-server chunk for a fixed delay: a slow broker, for real.

A broker call through it takes at least ``delay_s`` per round trip, so a test can make a job's
executor call last tens of milliseconds without a mock: the broker is the real one behind it.
Chunks keep their order (one pump per direction per connection).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def slow_proxy(target_host: str, target_port: int, delay_s: float) -> Iterator[int]:
    """Listen on a free local port (yielded) and forward to ``target``, delaying the client's chunks."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    closing = threading.Event()
    open_sockets: list[socket.socket] = []

    def pump(src: socket.socket, dst: socket.socket, delay: float) -> None:
        try:
            while data := src.recv(65536):
                if delay:
                    time.sleep(delay)
                dst.sendall(data)
        except OSError:
            pass  # either side closed: the connection is over
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def accept() -> None:
        while not closing.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection((target_host, target_port), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            client.settimeout(None)
            open_sockets.extend((client, server))
            threading.Thread(target=pump, args=(client, server, delay_s), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, 0.0), daemon=True).start()

    acceptor = threading.Thread(target=accept, name="slow-proxy", daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        closing.set()
        acceptor.join(2)
        listener.close()
        for s in open_sockets:
            try:
                s.close()
            except OSError:
                pass
