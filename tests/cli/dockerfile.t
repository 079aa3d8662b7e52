#!/usr/bin/env bash
# The Dockerfile and the systemd unit, checked as far as this machine can
# without a Docker engine (the image itself is never built here): the image's
# Debian release is this machine's, its packages come from .ci/deps (the list
# make check proves), its build and CMD steps name make targets that exist,
# host build outputs stay out of its context; the unit `make install` writes
# has its PREFIX's paths, passes `systemd-analyze verify`, and its ExecStart
# command line starts this kvindex.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
D=$ROOT/Dockerfile

begin "Dockerfile: Debian's release of this machine, packages from .ci/deps, steps that exist"
[ -f "$D" ] || fail "no Dockerfile"
# instructions, continuation lines joined
sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$D" | grep -vE '^\s*(#|$)' >instr
awk '{ print $1 }' instr | sort -u >kinds
bad=$(grep -vxE 'FROM|ENV|COPY|RUN|WORKDIR|EXPOSE|CMD' kinds)
[ -z "$bad" ] || fail "unexpected instructions: $bad"
from=$(awk '$1 == "FROM" { print $2 }' instr)
. /etc/os-release
assert_eq "$from" "debian:$VERSION_CODENAME" "base image (.ci/deps's packages are proved on this release)"
# the packages: .ci/deps, copied before the sources, run before the build
n_deps=$(grep -n '^COPY \.ci/deps ' instr | cut -d: -f1)
n_run=$(grep -n '^RUN sh /tmp/kvix-deps' instr | cut -d: -f1)
n_src=$(grep -n '^COPY \. \.' instr | cut -d: -f1)
[ -n "$n_deps" ] && [ -n "$n_run" ] && [ -n "$n_src" ] && [ "$n_deps" -lt "$n_run" ] &&
    [ "$n_run" -lt "$n_src" ] || fail "the image does not install .ci/deps's packages before copying the sources"
assert_no_grep 'apt-get install' instr
# every package .ci/deps names is one apt knows here
pkgs=$(sed -n '/^pkgs="/,/"$/p' "$ROOT/.ci/deps" | tr -d '"' | sed 's/^pkgs=//')
for p in $pkgs; do
    apt-cache show "$p" >/dev/null 2>&1 || dpkg-query -W "$p" >/dev/null 2>&1 || fail "apt knows no package $p"
done
# the build steps and the CMD are make targets of this tree (dry runs)
grep '^RUN make' instr | sed 's/^RUN //' | tr '&' '\n' | grep -oE 'make [^&]*' >makes
[ -s makes ] || fail "the image runs no make"
while read -r m; do
    args=$(sed -e 's/^make //' -e 's/-j"\$(nproc)"//' <<<"$m")
    # shellcheck disable=SC2086
    make -n -s -C "$ROOT" $args >/dev/null 2>mk.err || fail "'$m' is no make command of this tree: $(head -2 mk.err)"
done <makes
grep -qx 'CMD \["make", "demo"\]' instr || fail "the image does not run the demo"
make -n -s -C "$ROOT" demo >/dev/null 2>&1 || fail "no make demo"
# the port it exposes is the one kvindex serves at as Dynamo's indexer
port=$(awk '$1 == "EXPOSE" { print $2 }' instr)
kvindex --help | grep -q "default $port)" || fail "EXPOSE $port is not kvindex's default port"
# host build outputs never enter the context: the image builds its own
grep -qx 'build/' "$ROOT/.dockerignore" || fail ".dockerignore keeps build/ in the context"
end

begin "make install writes the systemd unit with its PREFIX's paths; systemd-analyze verify passes"
build=$(cd "$KVIX_BIN/.." && pwd)
build=${build#"$ROOT"/}
san=()
case $build in */asan) san=(SANITIZE=address,undefined) ;; */tsan) san=(SANITIZE=thread) ;; esac
mk() { flock "$ROOT/$build/.install.lock" make --no-print-directory -s -C "$ROOT" BUILD="$build" "${san[@]}" "$@"; }
run mk install DESTDIR="$T/root" PREFIX=/usr
expect_rc 0
u=$T/root/usr/lib/systemd/system/kvindex.service
[ -f "$u" ] || fail "no unit in /usr/lib/systemd/system"
assert_grep '^ExecStart=/usr/bin/kvindex .*--workers-file /etc/kvix/engines' "$u"
assert_no_grep '@[A-Z]+@' "$u"
# installed under a prefix of its own (no DESTDIR), its paths are real here
run mk install PREFIX="$T/p"
expect_rc 0
u=$T/p/lib/systemd/system/kvindex.service
assert_grep "^ExecStart=$T/p/bin/kvindex " "$u"
assert_grep "--workers-file $T/p/etc/kvix/engines" "$u"
run systemd-analyze verify "$u"
expect_rc 0
[ -s err ] && { fail "systemd-analyze verify said something"; sed 's/^/#     /' err | head -5; }
# its command line starts this kvindex (a state directory and an engines file
# of the test's own)
mkdir -p "$T/p/etc/kvix" state
echo "1=ipc://$T/e1" >"$T/p/etc/kvix/engines"
cmd=$(sed -n 's/^ExecStart=//p' "$u" | sed -e "s|/var/lib/kvix|$T/state|g" -e "s|:8090|:0|")
# shellcheck disable=SC2086
timeout --foreground 60 $cmd </dev/null >kv.out 2>kv.err &
PIDS="$PIDS $!"
URL=$(listening kv.err) || fail "the unit's kvindex never listened: $(head -3 kv.err)"
[ -n "$URL" ] && assert_eq "$(curl -s "$URL/workers")" "[{\"instance_id\":1,\"endpoints\":{\"0\":\"ipc://$T/e1\"}}]" "the unit's kvindex serves its engines file"
end
