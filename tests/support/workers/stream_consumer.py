"""A Redis Streams consumer for the dispatch tests, run as a process of its own.

``python -m tests.support.workers.stream_consumer URL STREAM GROUP RECORD_KEY``
creates the consumer group (from the stream's start), reads with XREADGROUP,
pushes each entry as one JSON line (``entry_id`` and its fields) onto the list
``RECORD_KEY``, then XACKs it. SIGTERM stops it between reads.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

import redis


def consume(url: str, stream: str, group: str, record_key: str, stop: threading.Event) -> None:
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):  # the group exists: a restarted consumer
            raise
    while not stop.is_set():
        for _, entries in client.xreadgroup(group, "consumer-1", {stream: ">"}, count=100, block=500) or []:
            for entry_id, fields in entries:
                client.rpush(record_key, json.dumps({"entry_id": entry_id, **fields}))
                client.xack(stream, group, entry_id)


def main(argv: list[str]) -> int:
    url, stream, group, record_key = argv
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"consuming {stream} as group {group}", flush=True)
    consume(url, stream, group, record_key, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
