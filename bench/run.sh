#!/usr/bin/env bash
# Run the benchmark parts (bench/parts/*.sh, in name order) and assemble
# bench/RESULTS.md. Each part prints a markdown section on stdout and progress on
# stderr; it gets $BUILD (the build directory) and $ROOT.
#
#   bench/run.sh            run every part, rewrite RESULTS.md
#   bench/run.sh PATTERN    run the parts whose file name contains PATTERN; the
#                           other parts' sections are kept as the last run left them
#
# Each section in RESULTS.md starts with a marker line
#   <!-- bench part: NAME DATE -->
# which is how a partial run finds the sections it keeps. Inside a section, what
# the part printed sits between
#   <!-- generated: part NAME -->   and   <!-- end generated -->
# and a run replaces only that: text written by hand before or after it (notes,
# before/after figures) is kept, by a full run too. A section without these
# markers (written before they existed) is replaced whole, with a warning. A part
# that never ran has no section until it is run. BENCH_PARTS (a directory of
# parts) and BENCH_OUT (the results file) choose other places
# (tests/cli/bench_run.t).
#
# The file opens with bench/summary.md (BENCH_SUMMARY), written by hand: one
# screen of kvix against the alternatives, each figure naming the part it
# comes from. Dated lab notes go in bench/notes/, not in RESULTS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export ROOT
export BUILD=${BUILD:-$ROOT/build}
parts=${BENCH_PARTS:-$ROOT/bench/parts}
out=${BENCH_OUT:-$ROOT/bench/RESULTS.md}
summary=${BENCH_SUMMARY:-$ROOT/bench/summary.md}
pattern=${1:-}
today=$(date -u +%Y-%m-%d)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The sections of the previous results file, per part name: NAME.marker (its
# marker line), NAME.whole (the section), and when it has generated markers,
# NAME.pre and NAME.post (the hand-written text around them).
mkdir "$work/old"
if [ -f "$out" ]; then
    awk -v dir="$work/old" '
        /^<!-- bench part: [^ ]+ [^ ]+ -->$/ {
            name = $4; f = dir "/" name; state = "pre"
            print > (f ".marker"); printf "" > (f ".whole")
            printf "" > (f ".pre0"); printf "" > (f ".post0")
            next
        }
        name == "" { next }
        { print > (f ".whole") }
        state == "pre" && $0 == "<!-- generated: part " name " -->" { state = "gen"; next }
        state == "gen" && $0 == "<!-- end generated -->" { state = "post"; printf "" > (f ".gen"); next }
        state == "pre" { print > (f ".pre0") }
        state == "post" { print > (f ".post0") }
    ' "$out"
    for g in "$work"/old/*.gen; do
        [ -f "$g" ] || continue
        mv "${g%.gen}.pre0" "${g%.gen}.pre"
        mv "${g%.gen}.post0" "${g%.gen}.post"
    done
fi

selected=()
for part in "$parts"/*.sh; do
    [ -f "$part" ] || continue
    case $(basename "$part") in *${pattern}*) selected+=("$(basename "$part" .sh)") ;; esac
done
if [ ${#selected[@]} -eq 0 ]; then
    echo "bench: no part matches '$pattern' in $parts" >&2
    exit 2
fi

{
    echo "# kvix benchmark results"
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    if [ -n "$pattern" ]; then
        echo "Date: $today, \`bench/run.sh $pattern\` (${selected[*]}); the other sections are kept" \
            "from earlier runs, each dated in its \`bench part\` marker. Full run: \`make bench\`." \
            "Each figure is the median of several runs."
    else
        echo "Date: $today. Command: \`make bench\`. Each figure is the median of several runs."
    fi
    echo
    if [ -f "$summary" ]; then
        cat "$summary"
        echo
    fi
} >"$work/head"

: >"$work/body"
for part in "$parts"/*.sh; do
    [ -f "$part" ] || continue
    name=$(basename "$part" .sh)
    case " ${selected[*]} " in
    *" $name "*)
        echo "bench: $name" >&2
        bash "$part" >"$work/new"
        {
            echo "<!-- bench part: $name $today -->"
            if [ -f "$work/old/$name.pre" ]; then
                cat "$work/old/$name.pre"
            elif [ -f "$work/old/$name.whole" ]; then
                echo "bench: $name's section had no generated markers: replaced whole" >&2
            fi
            echo "<!-- generated: part $name -->"
            cat "$work/new"
            echo "<!-- end generated -->"
            if [ -f "$work/old/$name.post" ]; then cat "$work/old/$name.post"; else echo; fi
        } >>"$work/body"
        ;;
    *)
        [ -f "$work/old/$name.whole" ] || continue
        cat "$work/old/$name.marker" "$work/old/$name.whole" >>"$work/body"
        ;;
    esac
done
# Written at the end only: a part that fails leaves the previous file as it was.
cat "$work/head" "$work/body" >"$out"
echo "bench: wrote $out" >&2
