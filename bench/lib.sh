# Shared by the bench parts (sourced, bash): a scratch folder and the
# background processes to kill when the part exits, and the median of a
# column of numbers.
#   tmp        a scratch folder, removed at exit
#   pids       add "$!" to it: killed at exit
#   median     the median of the numbers on stdin, one a line
# shellcheck shell=bash
tmp=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
