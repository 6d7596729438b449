#!/usr/bin/env bash
# The seed's two fault tests, on the compose cluster (needs a Docker engine):
#   1. lease stall: `docker pause` the leader of shard 0 for 1.5 x TTL;
#   2. split brain: disconnect it from the network for 2 x TTL + 2 s.
# After each, `shardcron audit` must find exactly one row per slot.
# The same scenarios run in CI without Docker: tests/faults/ (network namespaces).
set -euo pipefail
cd "$(dirname "$0")"
COMPOSE="docker compose -f docker-compose.yml"
TTL=${TTL:-10}
NET=$($COMPOSE ps -q node-1 | xargs docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}')
run() { $COMPOSE exec -T node-1 shardcron "$@"; }
leader_of_shard0() { run shards --etcd etcd-1:2379 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["shards"][0]["leader"])'; }
audit() {
  local from=$1
  $COMPOSE run --rm --entrypoint shardcron migrate audit --from "$from" --to "$(($(date +%s) * 1000 - 5000))"
}

start=$(($(date +%s) * 1000))
leader=$(leader_of_shard0)
echo "lease stall: pausing $leader for $((TTL * 3 / 2))s"
docker pause "$($COMPOSE ps -q "$leader")"
sleep $((TTL * 3 / 2))
echo "shard 0 is now led by $(leader_of_shard0)"
docker unpause "$($COMPOSE ps -q "$leader")"

leader=$(leader_of_shard0)
echo "split brain: disconnecting $leader for $((TTL * 2 + 2))s"
docker network disconnect "$NET" "$($COMPOSE ps -q "$leader")"
sleep $((TTL * 2 + 2))
echo "shard 0 is now led by $(leader_of_shard0)"
docker network connect --alias "$leader" "$NET" "$($COMPOSE ps -q "$leader")"

sleep "$TTL"
audit "$start"
