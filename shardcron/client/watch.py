"""``TickWatch``: tick results as they are written, following the cluster from node to node."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc

from shardcron.client.errors import api_error
from shardcron.client.targets import Targets
from shardcron.model import Tick
from shardcron.v1 import scheduler_pb2 as pb
from shardcron.wire.tick_convert import tick_from_proto


class TickWatch:
    """An iterator of ``Tick``s from WatchTicks that follows the cluster: when the node it
    listens to goes away, it reconnects to the next target. ``dropped`` counts the events
    the servers dropped because this watcher was too slow."""

    def __init__(self, nodes: Targets, request: pb.WatchTicksRequest):
        self._nodes = nodes
        self._request = request
        self._cancelled = threading.Event()
        self._call: Any = None
        self.dropped = 0

    def cancel(self) -> None:
        self._cancelled.set()
        call = self._call
        if call is not None:
            call.cancel()

    def __iter__(self) -> Iterator[Tick]:
        nodes = self._nodes
        failures = 0
        while not self._cancelled.is_set():
            i = nodes.order()[failures % len(nodes.targets)]
            call = self._call = nodes.stub(i).WatchTicks(self._request)
            if self._cancelled.is_set():  # cancel() ran after the loop's check and saw no call to cancel
                call.cancel()
            try:
                for ev in call:
                    failures = 0
                    nodes.preferred = i
                    self.dropped += ev.dropped
                    yield tick_from_proto(ev.tick)
            except grpc.RpcError as e:
                if self._cancelled.is_set() or e.code() is grpc.StatusCode.CANCELLED:
                    return
                if e.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise api_error(e.code(), e.details() or "") from None
            failures += 1
            self._cancelled.wait(min(0.1 * failures, 2.0))


__all__ = ["TickWatch"]
