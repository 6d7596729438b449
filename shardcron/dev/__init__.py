"""Tooling that ships with shardcron but is not the scheduler: the local dev
cluster (`make dev`), its HTTP sink, the benchmarks, and the test harness that
starts real etcd and node processes."""
