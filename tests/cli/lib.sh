# kvix CLI test harness, sourced by every tests/cli/*.t (bash).
#
#   begin "name"        start a test in a fresh scratch directory ($T, also the cwd)
#   run CMD...          run CMD with stdout in ./out, stderr in ./err, status in $rc
#   expect_rc N         the last run exited with N
#   golden NAME [FILE]  FILE (default ./out) equals tests/cli/golden/NAME
#                       (UPDATE_GOLDEN=1 rewrites the golden file)
#   assert_eq A B MSG   assert_grep RE [FILE]   assert_no_grep RE [FILE]
#   fail MSG            record a failure
#   end                 print "ok - name" or "not ok - name"
# Tools come from $KVIX_BIN (put first on PATH); fixtures are in $FIXTURES.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${KVIX_BIN:?KVIX_BIN must name the directory of the tools under test}"
PATH=$KVIX_BIN:$PATH
# Debian's python3 has python3-zmq, -msgpack and -xxhash; another python3 on PATH may not.
PY=/usr/bin/python3
GOLDEN=$ROOT/tests/cli/golden
FIXTURES=$ROOT/tests/fixtures
_t_name=""
_t_fail=0

begin() {
    _t_name=$1
    _t_fail=0
    T=$(mktemp -d "${TMPDIR:-/tmp}/kvix-cli.XXXXXX")
    cd "$T" || exit 1
}

fail() {
    echo "#   $_t_name: $*"
    _t_fail=1
}

run() {
    "$@" >out 2>err
    rc=$?
}

expect_rc() {
    if [ "$rc" != "$1" ]; then
        fail "exit status $rc, expected $1"
        sed 's/^/#     stderr: /' err 2>/dev/null | head -5
    fi
}

golden() {
    local g=$GOLDEN/$1 f=${2:-out}
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
        mkdir -p "$GOLDEN"
        cp "$f" "$g"
    fi
    if [ ! -f "$g" ]; then
        fail "no golden file $1"
    elif ! diff -u "$g" "$f" >golden.diff; then
        fail "$f differs from golden $1"
        sed 's/^/#     /' golden.diff | head -20
    fi
}

assert_eq() {
    [ "$1" = "$2" ] || fail "${3:-values differ}: '$1' != '$2'"
}

assert_grep() {
    grep -qE -- "$1" "${2:-out}" || fail "no match for /$1/ in ${2:-out}"
}

assert_no_grep() {
    ! grep -qE -- "$1" "${2:-out}" || fail "unexpected match for /$1/ in ${2:-out}"
}

end() {
    cd / || exit 1
    if [ "$_t_fail" = 0 ]; then
        echo "ok - $_t_name"
        rm -rf "$T"
    else
        echo "not ok - $_t_name (scratch: $T)"
    fi
}
