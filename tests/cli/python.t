#!/usr/bin/env bash
# The python package (python/kvix): installed by `make install` where Debian's
# python3 finds it, importable with nothing but the standard library; its
# tests (tests/python) run against the installed copy and the build's tools:
# block hashes byte-equal to kvhash, the HTTP client against a real kvindex,
# the router example of its docstring.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

build=$(cd "$KVIX_BIN/.." && pwd)
build=${build#"$ROOT"/}
san=()
preload=""
case $build in
*/asan)
    san=(SANITIZE=address,undefined)
    # libkvix built with ASan is loaded into an uninstrumented python3: the
    # runtime must come first (python's own allocations are not kvix's: no
    # leak report)
    preload=$(cc -print-file-name=libasan.so)
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    ;;
*/tsan) san=(SANITIZE=thread) preload=$(cc -print-file-name=libtsan.so) ;;
esac
# one make at a time in a build directory (install.t installs from it too)
mk() { flock "$ROOT/$build/.install.lock" make --no-print-directory -s -C "$ROOT" BUILD="$build" "${san[@]}" "$@"; }

begin "make install puts the package where Debian's python3 finds it, for /usr and /usr/local"
run mk install DESTDIR="$T/usr" PREFIX=/usr
expect_rc 0
run mk install DESTDIR="$T/local" PREFIX=/usr/local
expect_rc 0
pyver=$($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])')
for d in /usr/lib/python3/dist-packages "/usr/local/lib/python$pyver/dist-packages"; do
    $PY -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$d" || fail "$d is not on python3's path"
done
for f in __init__.py client.py hashing.py; do
    [ -f "$T/usr/usr/lib/python3/dist-packages/kvix/$f" ] || fail "no kvix/$f for PREFIX=/usr"
    [ -f "$T/local/usr/local/lib/python$pyver/dist-packages/kvix/$f" ] || fail "no kvix/$f for PREFIX=/usr/local"
done
# the installed copy knows where its library went (found even before ldconfig ran)
assert_grep '^_INSTALL_LIBDIR = "/usr/local/lib"$' "$T/local/usr/local/lib/python$pyver/dist-packages/kvix/hashing.py"
# python3 -c 'import kvix' with only the standard library (python3 -S -E: no
# site packages, nothing from the environment but PYTHONPATH's copy)
PYTHONPATH=$T/usr/usr/lib/python3/dist-packages run $PY -I -c 'import sys; sys.path.insert(0, sys.argv[1]); import kvix; print(kvix.__version__, kvix.Client("http://127.0.0.1:1"))' "$T/usr/usr/lib/python3/dist-packages"
expect_rc 0
assert_eq "$(cat out)" "0.1.0 Client('http://127.0.0.1:1', timeout=2)" "import kvix"
# nothing outside the standard library is imported
run $PY -I -c '
import sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
import kvix, kvix.client, kvix.hashing
std = sys.stdlib_module_names
bad = sorted(m for m in set(sys.modules) - before if m.split(".")[0] not in std and m.split(".")[0] != "kvix")
print(bad)' "$T/usr/usr/lib/python3/dist-packages"
assert_eq "$(cat out)" "[]" "modules imported from outside the standard library"
uninst=$T/usr/usr/lib/python3/dist-packages/kvix
run mk uninstall DESTDIR="$T/usr" PREFIX=/usr
[ -e "$uninst" ] && fail "make uninstall left $uninst"
end

# the tests, against the copy installed for /usr (libkvix from its libdir);
# they print their own "ok - python: ..." lines
begin "python tests: the package and libkvix installed for them"
run mk install DESTDIR="$T/root" PREFIX=/usr
expect_rc 0
soname=$(readelf -d "$T/root/usr/lib/libkvix.so.0.1.0" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
nm -D --defined-only "$T/root/usr/lib/$soname" | grep -q ' T kvix_hash_blocks$' ||
    fail "$soname does not hold kvix_hash_blocks"
PYTHONPATH=$T/root/usr/lib/python3/dist-packages:$ROOT/tests/python \
    LD_LIBRARY_PATH=$T/root/usr/lib LD_PRELOAD=$preload KVIX_EXPECT_SONAME=$soname \
    $PY "$ROOT/tests/python/run.py" test_hashing test_client >py.out 2>py.err
py_rc=$?
cat py.out
[ "$py_rc" = 0 ] || { fail "python tests exited with $py_rc"; sed 's/^/#     /' py.err | tail -20; }
end
