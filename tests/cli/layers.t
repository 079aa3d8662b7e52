#!/usr/bin/env bash
# lib/ in layers (lib/README.md): each file's includes and calls stay in its
# layer or go below it, and no files call or include each other in a circle.
# tests/tools/layers.py reads the sources' includes and the build's objects;
# here it passes on the tree, and fails on small trees broken on purpose.
. "$(dirname "$0")/lib.sh"

build=$(cd "$KVIX_BIN/.." && pwd)
layers() { run /usr/bin/python3 "$ROOT/tests/tools/layers.py" "$@"; }

begin "the tree keeps its layers: no upward include or call, no circle"
layers "$ROOT" "$build"
expect_rc 0
[ -s out ] && sed 's/^/#     /' out | head -10
end

# A tree of two layers, its objects compiled here: core/a.c and net/n.c, and
# whatever a case adds.
tree() {
    rm -rf tree && mkdir -p tree/include/kvix tree/lib/core tree/lib/net tree/build
    printf '#include "kvix/error.h"\nint kvix_a(void);\nint kvix_a(void) { return 1; }\n' \
        >tree/lib/core/a.c
    printf 'int kvix_a(void);\nint kvix_n(void);\nint kvix_n(void) { return kvix_a(); }\n' \
        >tree/lib/net/n.c
    : >tree/include/kvix/error.h
}
objects() {
    local f o
    for f in tree/lib/*/*.c; do
        o=tree/build/obj/${f#tree/}
        o=${o%.c}.o
        mkdir -p "$(dirname "$o")"
        cc -c -Itree/include -o "$o" "$f" 2>cc.err || fail "cc $f: $(head -1 cc.err)"
    done
}

begin "a sound small tree passes"
tree
objects
layers tree tree/build
expect_rc 0
end

begin "an include of a layer above fails"
tree
printf '#include "kvix/service.h"\n' >>tree/lib/core/a.c
: >tree/include/kvix/service.h
objects
layers tree tree/build
expect_rc 1
assert_grep 'lib/core/a.c:4: includes kvix/service.h of layer net, above core' out
end

begin "a call into a layer above fails"
tree
printf 'int kvix_n(void);\nint kvix_a2(void);\nint kvix_a2(void) { return kvix_n(); }\n' \
    >tree/lib/core/b.c
objects
layers tree tree/build
expect_rc 1
assert_grep 'lib/core/b.c: calls kvix_n of lib/net/n.c, layer net above core' out
end

begin "two files that call each other fail, in one layer too"
tree
printf 'int kvix_n(void);\nint kvix_m(void);\nint kvix_m(void) { return kvix_n(); }\n' \
    >tree/lib/net/m.c
printf 'int kvix_m(void);\nint kvix_n2(void);\nint kvix_n2(void) { return kvix_m(); }\n' \
    >>tree/lib/net/n.c
objects
layers tree tree/build
expect_rc 1
assert_grep 'calls go round in a circle: lib/net/m.c, lib/net/n.c' out
end

begin "a file outside every layer fails"
tree
mkdir -p tree/lib/misc && printf 'int kvix_x(void);\n' >tree/lib/misc/x.h
objects
layers tree tree/build
expect_rc 1
assert_grep 'lib/misc/x.h: in no layer' out
end
