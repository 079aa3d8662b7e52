#!/usr/bin/env bash
# The library archives export, besides the installed API, only names that say
# they are private: every global of libkvix.a and libkvix-net.a is declared in
# include/kvix/ or starts with kvix__ (tests/tools/symbols.py). Passes on the
# tree; fails on small archives broken on purpose.
. "$(dirname "$0")/lib.sh"

build=$(cd "$KVIX_BIN/.." && pwd)
symbols() { run /usr/bin/python3 "$ROOT/tests/tools/symbols.py" "$@"; }

begin "every global of libkvix.a and libkvix-net.a is public or kvix__"
symbols "$ROOT" "$build"
expect_rc 0
[ -s out ] && sed 's/^/#     /' out | head -10
end

# A tree with one public header and two archives made here from C text.
archives() { # archives 'C TEXT OF libkvix.a' 'C TEXT OF libkvix-net.a'
    rm -rf tree && mkdir -p tree/include/kvix tree/build
    printf 'int kvix_thing_get(void);\n' >tree/include/kvix/thing.h
    printf '%s\n' "$1" >a.c
    printf '%s\n' "$2" >n.c
    cc -c -o a.o a.c 2>cc.err && cc -c -o n.o n.c 2>>cc.err || fail "cc: $(head -1 cc.err)"
    ar rcs tree/build/libkvix.a a.o && ar rcs tree/build/libkvix-net.a n.o
}

begin "public and kvix__ names pass; statics are nobody's business"
archives 'int kvix_thing_get(void) { return 1; } int kvix__thing_helper(void) { return 2; }' \
    'static int helper(void) { return 3; } int kvix__net_helper(void) { return helper(); }'
symbols tree tree/build
expect_rc 0
end

begin "a private name without the prefix fails, named with its archive"
archives 'int kvix_thing_get(void) { return 1; } int kvix_thing_helper(void) { return 2; }' \
    'int esub_poll(void) { return 3; }'
symbols tree tree/build
expect_rc 1
assert_grep '^libkvix.a: kvix_thing_helper ' out
assert_grep '^libkvix-net.a: esub_poll ' out
assert_no_grep 'kvix_thing_get' out
end
