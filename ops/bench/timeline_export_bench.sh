#!/usr/bin/env bash
# `analyze --timeline` speed and memory: a synthetic TP=8 job of 8 and of 64 ranks (400 steps;
# ~13 k events per rank) written as Kineto JSON files and read back, exported to .json.gz and to
# .json by build/ops/bench/timeline_export_bench (one process per run; the export reads the
# files again to pass their events through). RANKS="16 64" picks other sizes. Prints one JSON line per run: MB/s of
# uncompressed JSON per second of wall time and per second of the process's CPU time, and the
# memory the export adds on top of the job and its analysis (VmHWM during the export minus
# VmRSS before it). Target: >= 100 MB/s for 64 ranks; memory added independent of the ranks.
#
# usage: ops/bench/timeline_export_bench.sh [STEPS]   (builds the target if missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/ops/bench/timeline_export_bench
[[ -x "$bin" ]] || BUBBLEWATCH_SKIP_APT=1 ops/build --target timeline_export_bench >&2
steps="${1:-400}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ranks in ${RANKS:-8 64}; do
  for ext in json.gz json; do
    "$bin" --ranks "$ranks" --steps "$steps" --out "$tmp/job$ranks.$ext"
    rm -f "$tmp/job$ranks.$ext"
  done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
