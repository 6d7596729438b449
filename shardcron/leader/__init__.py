"""What leading shards runs: the scheduling loop, the executor gate, the runner, the one writer of tick rows
(marks, claims, results, prunes), backfills and notifications."""
