"""``free_port``: a port for a test's server that no outgoing connection can take before the server binds it."""

from __future__ import annotations

import socket

from shardcron.dev.testing.etcd_server import LOWEST_PORT, ephemeral_ports_start, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_bound():
    below = ephemeral_ports_start()
    ports = {free_port() for _ in range(50)}
    assert all(LOWEST_PORT <= p < below for p in ports), sorted(ports)
    assert len(ports) > 40, "ports are picked at random, so two servers started together rarely meet"
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_a_port_already_bound_on_the_host_is_not_offered():
    held = []
    try:
        for _ in range(200):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        assert all(free_port() not in taken for _ in range(500))
    finally:
        for s in held:
            s.close()
