"""TickWatch.cancel() ends the watch whenever it is called, even as the watch opens its call."""

from __future__ import annotations

import threading

import grpc

from shardcron.client.client import Client
from shardcron.client.watch import TickWatch
from shardcron.v1 import scheduler_pb2 as pb


class Cancelled(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.CANCELLED

    def details(self):
        return "cancelled"


class BlockingCall:
    """A WatchTicks stream that delivers nothing until it is cancelled, as a quiet cluster's does."""

    def __init__(self):
        self.cancelled = threading.Event()

    def cancel(self):
        self.cancelled.set()

    def __iter__(self):
        if not self.cancelled.wait(30):
            raise AssertionError("the call was never cancelled: the watch would block for good")
        raise Cancelled()


def test_a_cancel_while_the_call_opens_ends_the_watch():
    # `shardcron dev`'s Ctrl-C right after "Streaming ticks" cancelled a watch whose call did not exist yet;
    # the call opened after that went on for good, and dev never stopped.
    client = Client(["127.0.0.1:1"])
    watch = TickWatch(client.nodes, pb.WatchTicksRequest())
    call = BlockingCall()

    class Stub:
        def WatchTicks(self, request):  # noqa: N802 - the generated stub's name
            watch.cancel()  # another thread's cancel, landing between the loop's check and the call's creation
            return call

    client.nodes.stub = lambda i: Stub()
    assert list(watch) == []
    assert call.cancelled.is_set()
