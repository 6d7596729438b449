"""Many WatchTicks streams from one process: ``python -m tests.support.watchers ADDRESS COUNT JOB_ID [--all]``.

Opens COUNT streams on a few grpc.aio channels, each watching JOB_ID (or every
job with --all), and reports on stdout, one line at a time:
  ``opened N``    all N streams are in place (the node sent their headers);
  ``refused CODE DETAILS``  a stream ended with a status instead;
  ``ticks K``     K streams have seen at least two distinct slots of JOB_ID (printed as K grows).
It runs until stdin closes.
"""

from __future__ import annotations

import asyncio
import sys

import grpc

from shardcron.v1 import scheduler_pb2 as pb
from shardcron.v1 import scheduler_pb2_grpc as pb_grpc

STREAMS_PER_CHANNEL = 250
SLOTS_WANTED = 2


async def main(address: str, count: int, job_id: str, all_jobs: bool) -> None:
    channels = [
        grpc.aio.insecure_channel(address) for _ in range((count + STREAMS_PER_CHANNEL - 1) // STREAMS_PER_CHANNEL)
    ]
    opened = 0
    done = 0
    events_of: list[int] = [0] * count  # events per stream, for the summary
    headers_of: list = [None] * count
    request = pb.WatchTicksRequest() if all_jobs else pb.WatchTicksRequest(job_id=job_id)

    async def watch(i: int) -> None:
        nonlocal opened, done
        call = pb_grpc.SchedulerStub(channels[i % len(channels)]).WatchTicks(request)
        slots: set[int] = set()
        try:
            headers_of[i] = await call.initial_metadata()
            opened += 1
            if opened == count:
                print(f"opened {count}", flush=True)
            async for event in call:
                events_of[i] += 1
                if event.tick.job_id == job_id:
                    slots.add(event.tick.scheduled_at_ms)
                    if len(slots) == SLOTS_WANTED:
                        done += 1
                        print(f"ticks {done}", flush=True)
        except grpc.aio.AioRpcError as e:
            if e.code() is not grpc.StatusCode.CANCELLED:
                print(f"refused {e.code().name} {e.details()}", flush=True)
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - reported to the test as a failure
            print(f"refused {type(e).__name__} {e}", flush=True)
            return
        print(f"refused stream {i} ended without a status after {len(slots)} slots", flush=True)

    tasks = [asyncio.create_task(watch(i)) for i in range(count)]
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the test closes our stdin
    short = sorted((n, i) for i, n in enumerate(events_of))[:5]
    print(f"summary fewest events (count, stream): {short} {[headers_of[i] for _, i in short[:2]]}", flush=True)
    for t in tasks:
        t.cancel()
    for ch in channels:
        await ch.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], "--all" in sys.argv[4:]))
