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
sed 's/^/{"model":"m","tokens":/; s/$/}/' "$tmp/json.txt" >"$tmp/query.txt"
tokens=$(wc -w <"$tmp/ws.txt")
lines=$(wc -l <"$tmp/ws.txt")

# Median wall time and median CPU time (user + sys of the command and its
# children) of $RUNS runs, output to /dev/null: "WALL CPU" in seconds. Rates
# are taken from CPU time, which other work on a shared machine disturbs far
# less than wall time.
time_median() {
    /usr/bin/python3 - "$RUNS" "$@" <<'PYEOF'
import resource, statistics, subprocess, sys, time
runs, cmd = int(sys.argv[1]), sys.argv[2:]
wall, cpu = [], []
for _ in range(runs):
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    wall.append(t1 - t0)
    cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
print(statistics.median(wall), statistics.median(cpu))
PYEOF
}

echo "10-hash: library rate" >&2
lib=$("$BENCH" 16 "$RUNS")
lib16=$(awk -F'|' '$2 ~ /kvix_hash_blocks/ && $3 + 0 == 16 { print $4 + 0 }' <<<"$lib")
lib512=$(awk -F'|' '$2 ~ /kvix_hash_blocks/ && $3 + 0 == 512 { print $4 + 0 }' <<<"$lib")

row() { # row LABEL FILE "WALL CPU" [LIB_MTOKS]: a table row; rates from CPU time
    local size
    size=$(stat -c %s "$2")
    awk -v l="$1" -v w="${3% *}" -v s="${3#* }" -v b="$size" -v t="$tokens" -v lib="${4:-}" 'BEGIN {
        est = "-"
        if (lib != "") est = sprintf("%.1f", (s - t / (lib * 1e6)) / t * 1e9)
        printf "| %s | %.3f | %.3f | %.0f | %.0f | %.1f | %s |\n", l, w, s, t / s / 1e6, b / s / 1e6,
            s / t * 1e9, est
    }'
}

echo "10-hash: timing kvhash ($RUNS runs each)" >&2
{
    echo "## kvhash: hashing token lines"
    echo
    echo "Library hashing rate (\`bench_hash\`, 16 M random token ids in memory, per CPU second;"
    echo "ratio to one XXH3 pass over the same bytes in the same process):"
    echo
    echo "| what | block size | Mtokens/s | MB/s of token ids | ratio to XXH3 |"
    echo "|---|---|---|---|---|"
    echo "$lib"
    echo
    echo "\`kvhash\` on $(awk -v b="$(stat -c %s "$tmp/ws.txt")" 'BEGIN { printf "%.0f", b / 1e6 }') MB" \
        "of whitespace-separated token ids ($tokens tokens in $lines lines, 200 to 4000 per line," \
        "ids below 152064), the same lines as JSON arrays and as query objects; output to /dev/null."
    echo "\"parse + output\" is the time per token left once the library's hashing (row above) is"
    echo "taken out. Rates are per CPU second (user + sys, median of $RUNS runs); on a pipe the CPU"
    echo "time includes \`cat\`'s."
    echo
    echo "| run | wall s | CPU s | Mtokens/s | MB/s of input | ns/token | parse + output ns/token |"
    echo "|---|---|---|---|---|---|---|"
    row "\`cat\` (floor: reading the file)" "$tmp/ws.txt" "$(time_median cat "$tmp/ws.txt")"
    row "\`wc -l\` (floor: finding the lines)" "$tmp/ws.txt" "$(time_median wc -l "$tmp/ws.txt")"
    row "whitespace ints, \`-b 16\`" "$tmp/ws.txt" "$(time_median "$KVHASH" -b 16 "$tmp/ws.txt")" "$lib16"
    row "whitespace ints, \`-b 512\`" "$tmp/ws.txt" "$(time_median "$KVHASH" -b 512 "$tmp/ws.txt")" "$lib512"
    row "JSON arrays, \`-b 16\`" "$tmp/json.txt" "$(time_median "$KVHASH" -b 16 "$tmp/json.txt")" "$lib16"
    row "JSON arrays, \`-b 512\`" "$tmp/json.txt" "$(time_median "$KVHASH" -b 512 "$tmp/json.txt")" "$lib512"
    row "query objects \`{\"model\":\"m\",\"tokens\":[...]}\` (jansson), \`-b 16\`" "$tmp/query.txt" \
        "$(time_median "$KVHASH" -b 16 "$tmp/query.txt")" "$lib16"
    row "whitespace ints, \`-b 16 --positional\`" "$tmp/ws.txt" \
        "$(time_median "$KVHASH" -b 16 --positional "$tmp/ws.txt")"
    row "whitespace ints, \`-b 16 --plain seq\`" "$tmp/ws.txt" \
        "$(time_median "$KVHASH" -b 16 --plain seq "$tmp/ws.txt")"
    row "whitespace ints on a pipe (\`cat \| kvhash -b 16\`)" "$tmp/ws.txt" \
        "$(time_median bash -c '"$1" "$2" | "$3" -b 16' _ cat "$tmp/ws.txt" "$KVHASH")"
}
