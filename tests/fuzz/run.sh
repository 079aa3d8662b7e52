#!/usr/bin/env bash
# Build and run the codec fuzz target with clang's libFuzzer, ASan and UBSan.
#   tests/fuzz/run.sh [SECONDS]     (default 60; `make fuzz` runs it)
# KVIX_FUZZ_OUT chooses the work folder (default build/fuzz).
# The corpus starts from the repository's event fixtures and grows in
# build/fuzz/corpus; crashes are left in build/fuzz as crash-* files.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-60}
out=${KVIX_FUZZ_OUT:-$root/build/fuzz}
command -v clang >/dev/null || { echo "fuzz: clang is needed (apt-get install clang)" >&2; exit 2; }
mkdir -p "$out/corpus"
# shellcheck disable=SC2046
clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$root/include" -I"$root/lib" $(pkg-config --cflags jansson msgpack libxxhash) \
    "$root/tests/fuzz/fuzz_stream.c" "$root"/lib/stream_*.c "$root/lib/event.c" \
    "$root/lib/buf.c" "$root/lib/error.c" "$root/lib/hash.c" "$root/lib/msgpack_bounded.c" \
    $(pkg-config --libs jansson msgpack libxxhash) -lm -o "$out/fuzz_stream"
# seeds: every fixture and golden line, one file each, and their msgpack forms
i=0
for f in "$root"/tests/fixtures/kvindex/*.ndjson "$root"/tests/cli/golden/kvindex_*; do
    while IFS= read -r line; do
        printf '%s' "$line" >"$out/corpus/seed-$i"
        i=$((i + 1))
    done <"$f"
done
# every input that once crashed a target is a seed for ever
cp "$root"/tests/fuzz/regressions/* "$out/corpus/"
cd "$out"
./fuzz_stream -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 corpus
