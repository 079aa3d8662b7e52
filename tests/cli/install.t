# `make install` gives users two libraries to link (libkvix: what a router
# embeds; libkvix-net: the network layer), static and shared, with headers,
# kvix.pc and kvix-net.pc; and a second make finds every tool up to date.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

# The build under test, and the sanitizer it was made with (a program linked
# with an instrumented library needs the same flags).
build=$(cd "$KVIX_BIN/.." && pwd)
build=${build#"$ROOT"/}
san=() sanflags=""
case $build in
*/asan) san=(SANITIZE=address,undefined) sanflags="-fsanitize=address,undefined" ;;
*/tsan) san=(SANITIZE=thread) sanflags="-fsanitize=thread" ;;
esac
# one make at a time in a build directory (python.t installs from it too)
mk() { flock "$ROOT/$build/.install.lock" make --no-print-directory -s -C "$ROOT" BUILD="$build" "${san[@]}" "$@"; }

begin "a second make rebuilds nothing (objects are not deleted as intermediates)"
# a fresh build directory (-O0: quick), one tool: the first make writes the
# dependency files that name the tool's object, so a deleted object would be
# rebuilt, with the tool, by the next make (make demo after make)
fresh=(BUILD="$T/b" OPT=-O0)
run make --no-print-directory -s -C "$ROOT" "${fresh[@]}" "$T/b/bin/kvhash"
expect_rc 0
[ -f "$T/b/obj/cmd/kvhash.o" ] || fail "the tool's object was deleted"
run make --no-print-directory -C "$ROOT" "${fresh[@]}" -q "$T/b/bin/kvhash"
expect_rc 0
run make --no-print-directory -s -C "$ROOT" "${fresh[@]}" -n "$T/b/bin/kvhash"
assert_eq "$(cat out)" "" "make -n after make"
end

begin "make install puts libkvix, libkvix-net, their headers, .pc files and the section 7 pages in DESTDIR"
run mk install DESTDIR="$T/root" PREFIX=/usr
expect_rc 0
lib=$T/root/usr/lib
for f in libkvix.a libkvix.so.0.1.0 pkgconfig/kvix.pc \
    libkvix-net.a libkvix-net.so.0.1.0 pkgconfig/kvix-net.pc; do
    [ -f "$lib/$f" ] || fail "no $f installed"
done
assert_eq "$(readlink "$lib/libkvix.so.0")" libkvix.so.0.1.0 "soname link"
assert_eq "$(readlink "$lib/libkvix.so")" libkvix.so.0 "development link"
assert_eq "$(readlink "$lib/libkvix-net.so.0")" libkvix-net.so.0.1.0 "net soname link"
assert_eq "$(readlink "$lib/libkvix-net.so")" libkvix-net.so.0 "net development link"
readelf -d "$lib/libkvix.so.0.1.0" >dyn
assert_grep 'SONAME.*\[libkvix\.so\.0\]' dyn
# what a router embeds needs none of the network libraries
assert_no_grep 'NEEDED.*(zmq|nats|microhttpd|curl)' dyn
readelf -d "$lib/libkvix-net.so.0.1.0" >dyn_net
assert_grep 'SONAME.*\[libkvix-net\.so\.0\]' dyn_net
assert_grep 'NEEDED.*\[libkvix\.so\.0\]' dyn_net
for h in "$ROOT"/include/kvix/*.h; do
    cmp -s "$h" "$T/root/usr/include/kvix/$(basename "$h")" || fail "header $(basename "$h") not installed"
done
for p in "$ROOT"/man/*.[1357]; do
    s=${p##*.}
    [ -f "$T/root/usr/share/man/man$s/$(basename "$p")" ] || fail "$(basename "$p") not installed"
done
ls "$ROOT"/man/*.7 >/dev/null 2>&1 || fail "no section 7 page in man/"
# the shared libraries export exactly the functions the installed headers
# declare, each once: no dependency's symbol, no private kvix_ helper (hash
# maps, rcu, index internals: lib/*/*_int.h)
exports() { nm -D --defined-only "$1" | awk '$2 ~ /[TDBR]/ { print $3 }' | sort -u; }
exports "$lib/libkvix.so.0.1.0" >syms_kvix
exports "$lib/libkvix-net.so.0.1.0" >syms_net
sort syms_kvix syms_net >syms
sed -nE 's/^[A-Za-z_][A-Za-z0-9_ ]*[ *](kvix_[a-z0-9_]+)\(.*/\1/p' "$T"/root/usr/include/kvix/*.h |
    sort -u >declared
assert_grep '^kvix_index_new$' syms_kvix
assert_grep '^kvix_service_new$' syms_net
assert_no_grep '^[^k]' syms
assert_no_grep '^kvix_((hmap|rcu|ix|sj|mp|mpb|qhits)_|backend_(positional|radix|reference))' syms
uniq -d syms >twice
[ -s twice ] && fail "exported by both libraries: $(head -5 twice | tr '\n' ' ')"
comm -23 syms declared >undeclared
[ -s undeclared ] && fail "exported but in no installed header: $(head -5 undeclared | tr '\n' ' ')"
comm -13 syms declared >unexported
[ -s unexported ] && fail "declared but not exported: $(head -5 unexported | tr '\n' ' ')"
[ "$(wc -l <syms_kvix)" -gt 100 ] || fail "only $(wc -l <syms_kvix) symbols exported by libkvix"
# the umbrella header kvix/kvix.h includes every header whose functions
# libkvix exports, and none of libkvix-net's; it names the hash seed where a
# newcomer looks first
for h in "$T"/root/usr/include/kvix/*.h; do
    b=$(basename "$h")
    [ "$b" = kvix.h ] && continue
    sed -nE 's/^[A-Za-z_][A-Za-z0-9_ ]*[ *](kvix_[a-z0-9_]+)\(.*/\1/p' "$h" | sort -u >fns
    inc=0
    grep -q "^#include \"kvix/$b\"$" "$T/root/usr/include/kvix/kvix.h" && inc=1
    if [ -n "$(comm -12 fns syms_kvix)" ] && [ $inc = 0 ]; then fail "kvix/kvix.h does not include kvix/$b"; fi
    if [ -n "$(comm -12 fns syms_net)" ] && [ $inc = 1 ]; then fail "kvix/kvix.h includes libkvix-net's kvix/$b"; fi
done
grep -q 'KVIX_HASH_SEED (1337)' "$T/root/usr/include/kvix/kvix.h" || fail "kvix/kvix.h does not name the hash seed"
end

begin "kvix(3)'s example builds against the installed copy with pkg-config --cflags --libs kvix and prints what the page says"
run mk install DESTDIR="$T/root" PREFIX=/usr
expect_rc 0
# the program and its output, as the page shows them
"$PY" "$ROOT/tests/tools/man_blocks.py" "$ROOT/man/kvix.3" 1 >embed.c || fail "no example in kvix(3)"
"$PY" "$ROOT/tests/tools/man_blocks.py" "$ROOT/man/kvix.3" 2 >want || fail "no output in kvix(3)"
grep -q '^#include <kvix/kvix.h>$' embed.c || fail "the example does not include the umbrella header"
export PKG_CONFIG_PATH=$T/root/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$T/root
run pkg-config --modversion kvix
assert_eq "$(cat out)" 0.1.0 "kvix.pc version"
flags=$(pkg-config --cflags --libs kvix) || fail "pkg-config --cflags --libs kvix failed"
# shellcheck disable=SC2086
cc $sanflags -Wall -Wextra -Werror -o embed embed.c $flags 2>cc.err || { fail "shared build failed"; cat cc.err; }
readelf -d embed >dyn
grep -q 'NEEDED.*\[libkvix\.so\.0\]' dyn || fail "embed does not need libkvix.so.0"
grep -qE 'NEEDED.*(kvix-net|zmq|nats|microhttpd|curl)' dyn && fail "embed needs a network library"
LD_LIBRARY_PATH=$T/root/usr/lib run ./embed
expect_rc 0
cmp -s out want || { fail "the shared build prints other than the page"; diff want out | head -5 | sed 's/^/#     /'; }
# the static library, with the dependencies kvix.pc names (Requires.private;
# not --static: libzmq's own .pc names static archives Debian does not ship)
deps=$(pkg-config --print-requires-private kvix | awk '{ print $1 }')
[ -n "$deps" ] || fail "kvix.pc requires nothing"
# shellcheck disable=SC2086
static="$(pkg-config --libs $deps) -pthread -lm"
# shellcheck disable=SC2086
cc $sanflags -o embed_static embed.c $(pkg-config --cflags kvix) \
    "$T/root/usr/lib/libkvix.a" $static 2>cc.err || { fail "static build failed"; cat cc.err; }
readelf -d embed_static | grep -q 'NEEDED.*libkvix' && fail "embed_static needs libkvix.so"
run ./embed_static
expect_rc 0
cmp -s out want || { fail "the static build prints other than the page"; diff want out | head -5 | sed 's/^/#     /'; }
grep -q 'KVIX_HASH_SEED' "$ROOT/man/kvix.3" || fail "kvix(3) does not name the hash seed"
end

begin "a program on the network layer builds with pkg-config --cflags --libs kvix-net"
run mk install DESTDIR="$T/root" PREFIX=/usr
expect_rc 0
export PKG_CONFIG_PATH=$T/root/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$T/root
cat >feeder.c <<'C'
#include <stdio.h>
#include "kvix/enginesub.h"
#include "kvix/hash.h"
int main(void)
{
    kvix_enginesub_spec sp;
    kvix_err err;
    kvix_enginesub_spec_init(&sp);
    if (kvix_enginesub_spec_parse(&sp, "7:1=tcp://gpu1:5558", &err))
        return 1;
    uint32_t t[4] = {0, 1, 2, 3};
    printf("%llu %u %s %llu\n", (unsigned long long)sp.worker, sp.dp, sp.endpoint,
           (unsigned long long)kvix_hash_local(t, 4, KVIX_HASH_SEED));
    return 0;
}
C
flags=$(pkg-config --cflags --libs kvix-net) || fail "pkg-config --cflags --libs kvix-net failed"
# shellcheck disable=SC2086
cc $sanflags -o feeder feeder.c $flags 2>cc.err || { fail "build failed"; cat cc.err; }
readelf -d feeder >dyn
grep -q 'NEEDED.*\[libkvix-net\.so\.0\]' dyn || fail "feeder does not need libkvix-net.so.0"
LD_LIBRARY_PATH=$T/root/usr/lib run ./feeder
expect_rc 0
assert_eq "$(cat out)" "7 1 tcp://gpu1:5558 9143094415614847814" "spec and hash"
end
