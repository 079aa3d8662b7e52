#!/usr/bin/env bash
# The index: every backend on a synthetic workload with realistic sharing
# (bench_index: system prompts, sticky conversations, per-worker LRU), through
# the library (one thread; two writer threads with a query thread) and through
# the backends alone, with the positional jump / bisection sweep. Prints a
# markdown section; progress on stderr. Needs $BUILD/bench/bench_index.
set -euo pipefail
BUILD=${BUILD:?BUILD must name the build directory}
BENCH=$BUILD/bench/bench_index
# 20k requests x 3 runs keeps `make bench` within its 10 minutes (100k x 5 took over 16 on
# this 2-core VM); KVIX_BENCH_INDEX_REQUESTS and KVIX_BENCH_RUNS scale it up.
RUNS=${KVIX_BENCH_RUNS:-3}
[ -x "$BENCH" ] || { echo "20-index: $BENCH is missing (make benches)" >&2; exit 1; }
echo "20-index: bench_index, $RUNS runs" >&2
"$BENCH" -r "$RUNS" -n "${KVIX_BENCH_INDEX_REQUESTS:-20000}"
