"""A real JetStream consumer for the dispatch tests: records every message it receives, then acks it.

    python -m tests.support.workers.nats_consumer --url nats://127.0.0.1:4222 --stream S --subject "s.>" \
        --out msgs.jsonl

A durable push consumer on the stream, from its first message. Each message
becomes one JSON line in ``--out`` (subject, body, headers, the stream
sequence and the delivery count) written and flushed before the ack, so a
line is never missing for an acked message; a redelivery shows up as a second
line with the same ``stream_seq``. ``--ready`` is created once the consumer is
subscribed. Stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from pathlib import Path

import nats


async def consume(url: str, stream: str, subject: str, out: Path, ready: Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    nc = await nats.connect(url, name="shardcron-test-consumer")
    js = nc.jetstream()
    with out.open("a", encoding="utf-8") as f:

        async def record(msg) -> None:
            meta = msg.metadata
            f.write(
                json.dumps(
                    {
                        "subject": msg.subject,
                        "body": msg.data.decode("utf-8", "replace"),
                        "headers": dict(msg.headers or {}),
                        "stream_seq": meta.sequence.stream,
                        "num_delivered": meta.num_delivered,
                    }
                )
                + "\n"
            )
            f.flush()
            await msg.ack()

        # A push consumer: the server delivers each message as it is stored (a pull
        # consumer's fetch can leave a lingering request that swallows messages until ack_wait).
        await js.subscribe(subject, stream=stream, durable="recorder", cb=record, manual_ack=True)
        if ready is not None:
            ready.touch()
        await stop.wait()
    await nc.close()


def read_messages(path: str | Path) -> list[dict]:
    """The lines a consumer wrote so far (a partly written last line is left for the next read)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--subject", required=True, help="the subjects to consume, e.g. 's.>'")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--ready", type=Path)
    a = p.parse_args()
    asyncio.run(consume(a.url, a.stream, a.subject, a.out, a.ready))


if __name__ == "__main__":
    main()
