#!/usr/bin/env bash
# Run every benchmark part (bench/parts/*.sh, in name order) and assemble
# bench/RESULTS.md. Each part prints a markdown section on stdout and progress on
# stderr; it gets $BUILD (the build directory) and $ROOT. One part may be
# chosen: bench/run.sh PATTERN.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export ROOT
export BUILD=${BUILD:-$ROOT/build}
out=$ROOT/bench/RESULTS.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
    echo "# kvix benchmark results"
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "Date: $(date -u +%Y-%m-%d). Command: \`make bench\`. Each figure is the median of several runs."
    echo
} >"$tmp"
for part in "$ROOT"/bench/parts/*.sh; do
    [ -f "$part" ] || continue
    case $(basename "$part") in *${1:-}*) ;; *) continue ;; esac
    echo "bench: $(basename "$part")" >&2
    bash "$part" >>"$tmp"
    echo >>"$tmp"
done
cp "$tmp" "$out"
echo "bench: wrote $out" >&2
