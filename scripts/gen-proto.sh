#!/usr/bin/env bash
# Regenerates shardcron/v1/ from protos/shardcron/v1/*.proto (`make proto`).
#
#   scripts/gen-proto.sh          write into the repository
#   scripts/gen-proto.sh DIR      write into DIR instead (DIR/shardcron/v1/...):
#                                 the freshness test compares that with the committed code
#
# Needs grpcio-tools (the dev extra pins the version whose output is committed).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.}"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
mkdir -p "$out/shardcron/v1"
# Generated files only: a stale one (a proto that was removed) must not linger.
rm -f "$out"/shardcron/v1/*_pb2.py "$out"/shardcron/v1/*_pb2_grpc.py "$out"/shardcron/v1/*_pb2.pyi
"$py" -m grpc_tools.protoc -I protos \
  --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" \
  protos/shardcron/v1/*.proto
cat > "$out/shardcron/v1/__init__.py" <<'PY'
"""Generated from protos/shardcron/v1/ by scripts/gen-proto.sh; never edited by hand.

Only ``shardcron.wire``, ``shardcron.api`` and ``shardcron.client`` import these modules.
"""
PY
