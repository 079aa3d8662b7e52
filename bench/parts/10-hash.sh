#!/usr/bin/env bash
# kvhash throughput: the library's hashing rate (bench_hash), then kvhash on
# >= 100 MB of generated token lines, as whitespace ints and as JSON arrays,
# against the floor of reading the file (cat, wc -l). Prints a markdown
# section; progress on stderr. Needs $BUILD (bin/kvhash, bench/bench_hash).
set -euo pipefail
BUILD=${BUILD:?BUILD must name the build directory}
KVHASH=$BUILD/bin/kvhash
BENCH=$BUILD/bench/bench_hash
RUNS=${KVIX_BENCH_RUNS:-5}
MB=${KVIX_BENCH_HASH_MB:-110}
for f in "$KVHASH" "$BENCH"; do
    [ -x "$f" ] || { echo "10-hash: $f is missing (make benches)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Prompts of 200 to 4000 tokens from a 152064-id vocabulary (Qwen2's), fixed seed.
echo "10-hash: generating $MB MB of token lines" >&2
awk -v mb="$MB" 'BEGIN {
    srand(20261122); bytes = 0
    while (bytes < mb * 1000000) {
        n = 200 + int(rand() * 3800); s = int(rand() * 152064)
        for (i = 1; i < n; i++) s = s " " int(rand() * 152064)
        print s; bytes += length(s) + 1
    }
}' >"$tmp/ws.txt"
sed 's/ /,/g; s/^/[/; s/$/]/' "$tmp/ws.txt" >"$tmp/json.txt"
tokens=$(wc -w <"$tmp/ws.txt")
lines=$(wc -l <"$tmp/ws.txt")

# median wall time of $RUNS runs of a command (output to /dev/null), in seconds
time_median() {
    local i t0 t1
    for ((i = 0; i < RUNS; i++)); do
        t0=$EPOCHREALTIME
        "$@" >/dev/null
        t1=$EPOCHREALTIME
        echo "$t0 $t1"
    done | awk '{ print $2 - $1 }' | sort -g | awk '{ v[NR] = $1 } END {
        print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

echo "10-hash: library rate" >&2
lib=$("$BENCH" 16 "$RUNS")
lib16=$(awk -F'|' '$2 ~ /kvix_hash_blocks/ && $3 + 0 == 16 { print $4 + 0 }' <<<"$lib")
lib512=$(awk -F'|' '$2 ~ /kvix_hash_blocks/ && $3 + 0 == 512 { print $4 + 0 }' <<<"$lib")

row() { # row LABEL FILE SECONDS [LIB_MTOKS]: a table row with rates and the parse estimate
    local size
    size=$(stat -c %s "$2")
    awk -v l="$1" -v s="$3" -v b="$size" -v t="$tokens" -v lib="${4:-}" 'BEGIN {
        est = "-"
        if (lib != "") est = sprintf("%.1f", (s - t / (lib * 1e6)) / t * 1e9)
        printf "| %s | %.3f | %.0f | %.0f | %.1f | %s |\n", l, s, t / s / 1e6, b / s / 1e6, s / t * 1e9, est
    }'
}

echo "10-hash: timing kvhash ($RUNS runs each)" >&2
{
    echo "## kvhash: hashing token lines"
    echo
    echo "Library hashing rate (\`bench_hash\`, 16 M random token ids in memory; ratio to one"
    echo "XXH3 pass over the same bytes in the same process):"
    echo
    echo "| what | block size | Mtokens/s | MB/s of token ids | ratio to XXH3 |"
    echo "|---|---|---|---|---|"
    echo "$lib"
    echo
    echo "\`kvhash\` on $(awk -v b="$(stat -c %s "$tmp/ws.txt")" 'BEGIN { printf "%.0f", b / 1e6 }') MB" \
        "of whitespace-separated token ids ($tokens tokens in $lines lines, 200 to 4000 per line," \
        "ids below 152064) and the same lines as JSON arrays; output to /dev/null. \"parse + output\""
    echo "is the time per token left once the library's hashing (row above) is taken out."
    echo
    echo "| run | seconds | Mtokens/s | MB/s of input | ns/token | parse + output ns/token |"
    echo "|---|---|---|---|---|---|"
    row "\`cat\` (floor: reading the file)" "$tmp/ws.txt" "$(time_median cat "$tmp/ws.txt")"
    row "\`wc -l\` (floor: finding the lines)" "$tmp/ws.txt" "$(time_median wc -l "$tmp/ws.txt")"
    row "whitespace ints, \`-b 16\`" "$tmp/ws.txt" "$(time_median "$KVHASH" -b 16 "$tmp/ws.txt")" "$lib16"
    row "whitespace ints, \`-b 512\`" "$tmp/ws.txt" "$(time_median "$KVHASH" -b 512 "$tmp/ws.txt")" "$lib512"
    row "JSON arrays, \`-b 16\`" "$tmp/json.txt" "$(time_median "$KVHASH" -b 16 "$tmp/json.txt")" "$lib16"
    row "JSON arrays, \`-b 512\`" "$tmp/json.txt" "$(time_median "$KVHASH" -b 512 "$tmp/json.txt")" "$lib512"
    row "whitespace ints, \`-b 16 --positional\`" "$tmp/ws.txt" \
        "$(time_median "$KVHASH" -b 16 --positional "$tmp/ws.txt")"
    row "whitespace ints, \`-b 16 --plain seq\`" "$tmp/ws.txt" \
        "$(time_median "$KVHASH" -b 16 --plain seq "$tmp/ws.txt")"
    row "whitespace ints on a pipe (\`cat \| kvhash -b 16\`)" "$tmp/ws.txt" \
        "$(time_median bash -c '"$1" "$2" | "$3" -b 16' _ cat "$tmp/ws.txt" "$KVHASH")"
}
