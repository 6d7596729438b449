"""The ``submit`` scenario: PutJob calls through a node that leads none of the target shards.

Two nodes share the shards; the jobs are chosen so that every one of them
belongs to a shard the called node does not lead, so every call is forwarded:
caller -> forwarding node -> leader, three processes on the same machine.

The callers are ``CONCURRENCY`` coroutines on one ``grpc.aio`` channel, sending
requests serialized before the window (a fleet of clients would each pay their
own encoding, not the nodes'). The caller's CPU is still counted, apart from
the nodes': on a small machine it shares their cores.

Besides calls/s and latency, the unary row gives the CPU each process spent
per call over the measured window (``/proc/<pid>/stat``; the caller is this
process): the caller, the forwarding node, the leader, and the rest of the
machine (etcd, the database server, anything else running), so that a figure
says where its milliseconds went and how busy the machine was.

During the unary window a thread of this process asks the forwarding node's
health (grpc.health.v1 Check) every ``PROBE_EVERY_S``, on its API port and on
its ``--health-listen`` port: how long a probe waits while the API is at full
load, on the shared loop and on the port with threads of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardcron.client.channel import CHANNEL_OPTIONS, open_aio_channel
from shardcron.client.client import Client
from shardcron.dev.bench.harness import BenchEnv, CpuWindow, percentile
from shardcron.dev.testing.etcd_server import free_port
from shardcron.sharding import shard_for
from shardcron.spec.job import job_from_dict
from shardcron.wire.convert import put_job_request_bytes

CONCURRENCY = 16
WARMUP_CALLS = 100  # opens the channels (caller -> forwarder -> leader) before the window
PUT_JOB = "/shardcron.v1.Scheduler/PutJob"
CALL_TIMEOUT_S = 30.0
UNARY = f"unary PutJob ({CONCURRENCY} callers)"
PROBE_EVERY_S = 0.1
PROBE_TIMEOUT_S = 5.0

HEADERS = [
    "mode",
    "calls/s",
    "jobs/s",
    "p50 ms",
    "p99 ms",
    "errors",
    "CPU ms/call: caller",
    "forwarder",
    "leader",
    "rest of machine",
]


def run(env: BenchEnv, jobs: int, seconds: int) -> dict:
    health_ports = {}

    def own_health_port(node_id: str) -> list[str]:
        health_ports[node_id] = f"127.0.0.1:{free_port()}"
        return ["--health-listen", health_ports[node_id]]

    env.start_nodes(count=2, extra_args=own_health_port)
    leaders = env.cluster.wait_all_led(60)
    via = sorted(env.cluster.nodes)[0]
    leader = next(n for n in sorted(env.cluster.nodes) if n != via)
    foreign = {s for s, n in leaders.items() if n != via}
    warmup = min(WARMUP_CALLS, jobs)
    ids: list[str] = []
    i = 0
    while len(ids) < 2 * jobs + warmup:
        jid = f"sub-{i:07d}"
        if shard_for(jid, env.shards) in foreign:
            ids.append(jid)
        i += 1
    specs = [job_from_dict({"id": j, "every": "1h", "executor": {"kind": "noop"}}) for j in ids]
    requests = [put_job_request_bytes(s) for s in specs[: jobs + warmup]]
    address = env.cluster.nodes[via].address
    pids = env.pids()
    probes = HealthProbes({"API port (--listen)": address, "health port (--health-listen)": health_ports[via]})
    with probes:
        modes = {
            UNARY: asyncio.run(
                _unary(
                    address,
                    requests[:warmup],
                    requests[warmup:],
                    seconds,
                    {"forwarder": pids[via], "leader": pids[leader]},
                )
            )
        }
    client = Client([address], timeout_s=30)
    try:
        batch = specs[jobs + warmup :]
        t0 = time.perf_counter()
        results = client.put_jobs(batch)
        took = time.perf_counter() - t0
        failed = sum(1 for r in results if not r.ok)
        calls = -(-len(batch) // 1000)
        modes["batched PutJobs"] = {
            "calls_per_s": round(calls / took, 2),
            "jobs_per_s": round(len(batch) / took, 1),
            "p50_ms": _r(took * 1000 / calls),
            "p99_ms": _r(took * 1000 / calls),
            "errors": failed,
        }
    finally:
        client.close()
    return {
        "scenario": "submit",
        "via": via,
        "leader": leader,
        "forwarded": True,
        "jobs": jobs,
        "modes": modes,
        "health_probes": probes.figures(),
        "db": env.db,
    }


class HealthProbes:
    """Within ``with``: a thread calls Check on every address in turn, every ``PROBE_EVERY_S``."""

    def __init__(self, addresses: dict[str, str]) -> None:
        self._addresses = addresses
        self._took: dict[str, list[float]] = {name: [] for name in addresses}
        self._failed: dict[str, int] = dict.fromkeys(addresses, 0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._probe, name="health-probes", daemon=True)

    def __enter__(self) -> HealthProbes:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(PROBE_TIMEOUT_S * len(self._addresses) + 5)

    def figures(self) -> dict[str, dict]:
        out = {}
        for name, took in self._took.items():
            ms = sorted(took)
            out[name] = {
                "probes": len(ms) + self._failed[name],
                "failed": self._failed[name],
                "p99_ms": _r(percentile(ms, 99)),
                "max_ms": _r(ms[-1] if ms else None),
            }
        return out

    def _probe(self) -> None:
        channels = {name: grpc.insecure_channel(address) for name, address in self._addresses.items()}
        try:
            checks = {name: health_pb2_grpc.HealthStub(ch).Check for name, ch in channels.items()}
            while not self._done.wait(PROBE_EVERY_S):
                for name, check in checks.items():
                    started = time.perf_counter()
                    try:
                        check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT_S)
                        self._took[name].append((time.perf_counter() - started) * 1000)
                    except grpc.RpcError:
                        self._failed[name] += 1
        finally:
            for ch in channels.values():
                ch.close()


def health_lines(f: dict) -> list[str]:
    lines = []
    for name, p in (f.get("health_probes") or {}).items():
        lines.append(
            f"health Check on the forwarding node's {name} during the unary window: "
            f"{p['probes']} probes, p99 {p['p99_ms']} ms, max {p['max_ms']} ms, failed {p['failed']}"
        )
    return lines


async def _unary(address: str, warmup: list[bytes], requests: list[bytes], seconds: int, pids: dict[str, int]) -> dict:
    """``CONCURRENCY`` callers share ``requests`` (each sent once) until they run out or ``seconds`` pass."""
    async with open_aio_channel(address, None, CHANNEL_OPTIONS) as channel:
        put = channel.unary_unary(PUT_JOB, None, None)  # bytes in, bytes out: the caller neither builds nor parses

        async def caller(queue, deadline: float, out: list) -> None:
            for request in queue:  # one shared iterator: each request is sent by one caller
                if time.perf_counter() > deadline:
                    return
                s = time.perf_counter()
                try:
                    await put(request, timeout=CALL_TIMEOUT_S)
                    out.append(((time.perf_counter() - s) * 1000, True))
                except grpc.aio.AioRpcError:
                    out.append(((time.perf_counter() - s) * 1000, False))

        async def calls(batch: list[bytes], deadline: float) -> list:
            out: list = []
            queue = iter(batch)
            await asyncio.gather(*(caller(queue, deadline, out) for _ in range(CONCURRENCY)))
            return out

        await calls(warmup, float("inf"))
        window = CpuWindow.start(pids)
        t0 = time.perf_counter()
        outcomes = await calls(requests, t0 + seconds)
        took = time.perf_counter() - t0
        cpu = window.per_call_ms(len(outcomes))
    latencies = sorted(ms for ms, _ in outcomes)
    n = len(outcomes)
    return {
        "calls_per_s": round(n / took, 1),
        "jobs_per_s": round(n / took, 1),
        "p50_ms": _r(percentile(latencies, 50)),
        "p99_ms": _r(percentile(latencies, 99)),
        "errors": sum(1 for _, ok in outcomes if not ok),
        "cpu_ms_per_call": cpu,
    }


def render(f: dict) -> list[list]:
    rows = []
    for name, m in f["modes"].items():
        cpu = m.get("cpu_ms_per_call") or {}
        rows.append(
            [
                name,
                m["calls_per_s"],
                m["jobs_per_s"],
                m["p50_ms"],
                m["p99_ms"],
                m["errors"],
                *(cpu.get(k, "") for k in ("caller", "forwarder", "leader", "rest")),
            ]
        )
    return rows


def _r(v):
    return None if v is None else round(v, 2)
