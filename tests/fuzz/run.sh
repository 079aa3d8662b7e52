#!/usr/bin/env bash
# Build and run the fuzz targets with clang's libFuzzer, ASan and UBSan.
#   tests/fuzz/run.sh [SECONDS] [TARGET...]    (`make fuzz` runs it)
# SECONDS is per target (default 60). Targets (tests/fuzz/fuzz_NAME.c):
#   stream    record codecs and the reader (NDJSON, msgpack)
#   wire      the engines' wire decoder (vLLM / SGLang msgpack batches)
#   snapshot  the snapshot reader, rebuilding events, loading into an index
#   tokens    kvhash's token lines (kvix_tokens_parse)
#   query     records applied to the three backends side by side, answers compared
# All of them when none is named. KVIX_FUZZ_OUT chooses the work folder
# (default build/fuzz). Each corpus starts from the repository's fixtures,
# tests/fuzz/seeds/NAME and tests/fuzz/regressions/NAME, and grows in
# OUT/corpus/NAME; a finding is left in OUT as crash-*, leak-*, oom-* or
# timeout-*, and the script exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(stream wire snapshot tokens query)
out=${KVIX_FUZZ_OUT:-$root/build/fuzz}
command -v clang >/dev/null || { echo "fuzz: clang is needed (apt-get install clang)" >&2; exit 2; }
for t in "${targets[@]}"; do
    [ -f "$root/tests/fuzz/fuzz_$t.c" ] || { echo "fuzz: no target '$t'" >&2; exit 2; }
done

# The library once, instrumented for coverage (fuzzer-no-link) and the
# sanitizers; each target links the objects it needs from the archive.
pkgs="libxxhash jansson msgpack libzmq liburcu liblzma libzstd zlib libnats libmicrohttpd libcurl"
# libkvix's layers (the Makefile's KVIX_DIRS): the network layer and the tools'
# machinery are nothing a target reaches.
layers=(core codec index index/backends snapshot)
flags=(-std=gnu11 -pthread -g -O1 -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=all -I"$root/include")
for l in "${layers[@]}"; do flags+=(-I"$root/lib/$l"); done
# shellcheck disable=SC2207
pkg_cflags=($(pkg-config --cflags $pkgs))
# shellcheck disable=SC2207
pkg_libs=($(pkg-config --libs $pkgs))
# KVIX_FUZZ_OBJ: where the library's objects are kept (default OUT/obj): a
# folder shared by several runs builds them once (tests/cli/fuzz.t).
obj=${KVIX_FUZZ_OBJ:-$out/obj}
mkdir -p "$out" "$obj"

# An object is made again when its source or a header it included (its .d,
# from -MMD) is newer than it.
stale() {
    local o=$1 d
    [ -f "$o" ] && [ -f "${o%.o}.d" ] || return 0
    for d in $(awk '{ for (i = 1; i <= NF; i++) if ($i != "\\" && $i !~ /:$/) print $i }' "${o%.o}.d"); do
        [ "$d" -nt "$o" ] && return 0
    done
    return 1
}

# Every file of libkvix: a file added later is built without anyone
# remembering a list.
objs=()
for f in $(for l in "${layers[@]}"; do echo "$root/lib/$l"/*.c; done); do
    s=$(basename "$f" .c)
    o="$obj/$s.o"
    objs+=("$o")
    if stale "$o"; then
        echo "clang ${f#"$root"/}"
        rm -f "$o" # a compile that fails leaves none behind, not an old one
        # written under a name of its own, then moved: a run beside this one
        # never links half an object
        (clang "${flags[@]}" "${pkg_cflags[@]}" -MMD -MP -MF "$o.d.$$" -MT "$o" -c -o "$o.$$" "$f" &&
            mv "$o.d.$$" "${o%.o}.d" && mv "$o.$$" "$o") &
        # two at a time: the machine is shared
        [ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n
    fi
done
wait
for o in "${objs[@]}"; do
    [ -f "$o" ] || { echo "fuzz: $o was not built" >&2; exit 1; }
done
rm -f "$out/libkvix-fuzz.a"
ar rcs "$out/libkvix-fuzz.a" "${objs[@]}"

seed_lines() { # every line of the files given, one seed file each
    local dst=$1 i=0 f line
    shift
    for f in "$@"; do
        while IFS= read -r line; do
            printf '%s' "$line" >"$dst/line-$(basename "$f")-$i"
            i=$((i + 1))
        done <"$f"
    done
}

status=0
for t in "${targets[@]}"; do
    clang "${flags[@]/fuzzer-no-link/fuzzer}" "${pkg_cflags[@]}" "$root/tests/fuzz/fuzz_$t.c" \
        "$out/libkvix-fuzz.a" "${pkg_libs[@]}" -lm -o "$out/fuzz_$t"
    c="$out/corpus/$t"
    mkdir -p "$c"
    case $t in
    stream)
        seed_lines "$c" "$root"/tests/fixtures/kvindex/*.ndjson "$root"/tests/cli/golden/kvindex_* ;;
    wire)
        cp "$root"/tests/fixtures/vllm/*.bin "$c/" ;;
    tokens)
        ;; # tests/fuzz/seeds/tokens
    query)
        cp "$root"/tests/fixtures/kvindex/*.ndjson "$c/"
        # the bundled demo's first events (msgpack, cut mid-record: fine)
        xz -dc "$root/tests/fixtures/demo/events.msgpack.xz" 2>/dev/null | head -c 8000 \
            >"$c/demo-head.msgpack" || true ;;
    esac
    for d in seeds regressions; do
        if [ -d "$root/tests/fuzz/$d/$t" ]; then
            cp "$root/tests/fuzz/$d/$t"/* "$c/"
        fi
    done
    echo "fuzz: $t for $secs s on $(find "$c" -type f | wc -l) inputs"
    (cd "$out" && "./fuzz_$t" -max_total_time="$secs" -max_len=65536 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 "$c") || status=1
done
exit $status
