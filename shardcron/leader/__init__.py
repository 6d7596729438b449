"""What leading shards runs: the scheduling loop, the executor gate, the runner, the writers of marks and results, the pruner, backfills and notifications."""
