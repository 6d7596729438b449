"""A real AMQP consumer for the dispatch tests: records every delivery it gets, then acks it.

    python -m tests.support.workers.amqp_consumer --url amqp://guest:guest@127.0.0.1:5672/ \\
        --queue Q --out msgs.jsonl --dedupe-prefix sc-test:abc: [--ready q.ready]

Each delivery becomes one JSON line in ``--out``: the message id, the tick it
carries (read from its headers), the body, whether the broker flagged it as a
redelivery, and the verdict of ``shardcron.consumer.RedisDeduper`` (``admitted``
is true for the one delivery of a slot a real consumer would act on). The line
is written and flushed before the ack, so an acked delivery always has its
line. The queue is declared (non-durable, not auto-deleted: the test deletes
it) before ``--ready`` is created. Stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from pathlib import Path

import aio_pika

from shardcron.consumer import RedisDeduper, TickInfo, Verdict


async def consume(url: str, queue_name: str, out: Path, deduper: RedisDeduper, ready: Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    connection = await aio_pika.connect(url, client_properties={"connection_name": "shardcron-test-consumer"})
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=16)
    queue = await channel.declare_queue(queue_name, durable=False, auto_delete=False)
    with out.open("a", encoding="utf-8") as f:

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in (message.headers or {}).items()}
            tick = TickInfo.from_mapping(headers)
            verdict = await asyncio.to_thread(deduper.admit, tick)
            f.write(
                json.dumps(
                    {
                        "message_id": message.message_id,
                        "job": tick.job_id,
                        "slot": tick.scheduled_at_ms,
                        "fence": tick.fence,
                        "attempt": tick.attempt,
                        "node": tick.node_id,
                        "admitted": verdict is Verdict.FIRST,
                        "verdict": verdict.value,
                        "redelivered": bool(message.redelivered),
                        "body": message.body.decode("utf-8", "replace"),
                        "headers": headers,
                    }
                )
                + "\n"
            )
            f.flush()
            await message.ack()

        await queue.consume(on_message)
        if ready is not None:
            ready.touch()
        await stop.wait()
    await connection.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--dedupe-redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--dedupe-prefix", required=True)
    p.add_argument("--ready", type=Path)
    a = p.parse_args()
    deduper = RedisDeduper(a.dedupe_redis, prefix=a.dedupe_prefix, ttl_s=3600)
    asyncio.run(consume(a.url, a.queue, a.out, deduper, a.ready))


if __name__ == "__main__":
    main()
