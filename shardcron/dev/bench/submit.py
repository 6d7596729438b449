"""The ``submit`` scenario: PutJob calls through a node that leads none of the target shards.

Two nodes share the shards; the jobs are chosen so that every one of them
belongs to a shard the called node does not lead, so every call is forwarded.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from shardcron.dev.bench.harness import BenchEnv, percentile
from shardcron.api.client import ApiError, Client
from shardcron.jobspec import job_from_dict
from shardcron.sharding import shard_for

CONCURRENCY = 16


def run(env: BenchEnv, jobs: int, seconds: int) -> dict:
    env.start_nodes(count=2)
    leaders = env.cluster.wait_all_led(60)
    via = sorted(env.cluster.nodes)[0]
    foreign = {s for s, n in leaders.items() if n != via}
    ids, i = [], 0
    while len(ids) < 2 * jobs:
        jid = f"sub-{i:07d}"
        if shard_for(jid, env.shards) in foreign:
            ids.append(jid)
        i += 1
    specs = [job_from_dict({"id": j, "every": "1h", "executor": {"kind": "noop"}}) for j in ids]
    client = Client([env.cluster.nodes[via].address], timeout_s=30)
    modes = {}
    try:
        deadline = time.perf_counter() + seconds

        def put(spec) -> tuple[float, bool]:
            if time.perf_counter() > deadline:
                return -1.0, True
            s = time.perf_counter()
            try:
                client.put_job(spec)
                return (time.perf_counter() - s) * 1000, True
            except ApiError:
                return (time.perf_counter() - s) * 1000, False

        t0 = time.perf_counter()
        with ThreadPoolExecutor(CONCURRENCY) as pool:  # several callers at once, as a fleet of clients would
            outcomes = [o for o in pool.map(put, specs[:jobs]) if o[0] >= 0]
        took = time.perf_counter() - t0
        latencies = [ms for ms, _ in outcomes]
        errors = sum(1 for _, ok in outcomes if not ok)
        n = len(outcomes)
        latencies.sort()
        modes[f"unary PutJob ({CONCURRENCY} callers)"] = {"calls_per_s": round(n / took, 1), "jobs_per_s": round(n / took, 1),
                                 "p50_ms": _r(percentile(latencies, 50)), "p99_ms": _r(percentile(latencies, 99)),
                                 "errors": errors}
        batch = specs[jobs:]
        t0 = time.perf_counter()
        results = client.put_jobs(batch)
        took = time.perf_counter() - t0
        failed = sum(1 for r in results if not r.ok)
        calls = -(-len(batch) // 1000)
        modes["batched PutJobs"] = {"calls_per_s": round(calls / took, 2), "jobs_per_s": round(len(batch) / took, 1),
                                    "p50_ms": _r(took * 1000 / calls), "p99_ms": _r(took * 1000 / calls),
                                    "errors": failed}
    finally:
        client.close()
    return {"scenario": "submit", "via": via, "forwarded": True, "jobs": jobs, "modes": modes, "db": env.db}


def _r(v):
    return None if v is None else round(v, 2)
