"""The fault harness's TCP forwarder: a reset must end every forwarded connection for both of its peers.

Seed 1029068069 (the short soak in CI): a db-conn-kill closed the forwarder's sockets while a node waited
for an UPDATE's answer. Closing did not wake the pump blocked on the node's side, so that connection
stayed open and silent, the node's coordinator waited on it for minutes, and the shards it had won were
led by nobody.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.faults.netns import TcpForwarder

WAIT_S = 30.0  # for an end that comes at once after the fix, and never before it


def test_a_reset_ends_a_connection_whose_client_waits_for_an_answer():
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    asked = threading.Event()

    def serve() -> None:  # takes the question and never answers, as a server stuck on a lock
        conn, _ = server.accept()
        accepted.append(conn)
        if conn.recv(64):
            asked.set()

    threading.Thread(target=serve, daemon=True).start()
    forwarder = TcpForwarder("127.0.0.1", server.getsockname()).start()
    client = socket.create_connection(("127.0.0.1", forwarder.port), timeout=WAIT_S)
    try:
        client.sendall(b"UPDATE shard_fences ...")
        assert asked.wait(WAIT_S), "the question never reached the server"

        forwarder.reset_all()

        try:
            ended = client.recv(1) == b""
        except ConnectionResetError:
            ended = True
        except TimeoutError:
            ended = False
        assert ended, f"the client saw no end of its connection in {WAIT_S} s"
        accepted[0].settimeout(WAIT_S)
        with contextlib.suppress(ConnectionResetError):
            assert accepted[0].recv(1) == b"", "the server's side of the connection did not end"
    finally:
        client.close()
        forwarder.stop()
        server.close()
