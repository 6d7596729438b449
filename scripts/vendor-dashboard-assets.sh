#!/usr/bin/env bash
# Re-creates shardcron/dashboard/static/vendor/ from the npm registry at the pinned versions below, and
# checks every file against SHA256SUMS there. The files are committed and ship in the wheel: nothing is
# fetched at run time, and no page loads anything from another site.
#
#   scripts/vendor-dashboard-assets.sh           fetch, unpack, verify
#   scripts/vendor-dashboard-assets.sh --update  after bumping a version: fetch and write new sums
#
# Needs npm (only to bump or re-check the assets; building or running shardcron does not).
set -euo pipefail
cd "$(dirname "$0")/.."
HTMX=2.0.11       # htmx.org: server-rendered pages that swap fragments
HTMX_SSE=2.2.4    # htmx-ext-sse: the live shard grid, by server-sent events (for htmx 2)
UPLOT=1.6.32      # uPlot: small, fast time-series charts
out=shardcron/dashboard/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "htmx.org@$HTMX" "htmx-ext-sse@$HTMX_SSE" "uplot@$UPLOT" >/dev/null)
for tgz in "$work"/*.tgz; do
  mkdir -p "${tgz%.tgz}" && tar -xzf "$tgz" -C "${tgz%.tgz}"
done
mkdir -p "$out"
cp "$work/htmx.org-$HTMX/package/dist/htmx.min.js" "$out/htmx.min.js"
cp "$work/htmx.org-$HTMX/package/LICENSE" "$out/htmx.LICENSE"
cp "$work/htmx-ext-sse-$HTMX_SSE/package/dist/sse.min.js" "$out/sse.min.js"
cp "$work/htmx-ext-sse-$HTMX_SSE/package/LICENSE" "$out/htmx-ext-sse.LICENSE"
cp "$work/uplot-$UPLOT/package/dist/uPlot.iife.min.js" "$out/uPlot.iife.min.js"
cp "$work/uplot-$UPLOT/package/dist/uPlot.min.css" "$out/uPlot.min.css"
cp "$work/uplot-$UPLOT/package/LICENSE" "$out/uPlot.LICENSE"

files=(htmx.min.js htmx.LICENSE sse.min.js htmx-ext-sse.LICENSE uPlot.iife.min.js uPlot.min.css uPlot.LICENSE)
if [ "${1:-}" = "--update" ]; then
  (cd "$out" && sha256sum "${files[@]}" > SHA256SUMS)
  echo "wrote $out/SHA256SUMS"
fi
(cd "$out" && sha256sum --check --quiet SHA256SUMS)
echo "vendored assets match SHA256SUMS (htmx $HTMX, htmx-ext-sse $HTMX_SSE, uPlot $UPLOT)"
