#!/usr/bin/env bash
# .ci/deps (make deps, the first step of make check and make demo) waits for
# apt's locks instead of failing at once when another apt or dpkg holds them.
# apt-get, dpkg-query and id are stand-ins on PATH: the real ones are never run.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

# fakes DIR LOCKED-RUNS: stand-ins in DIR. dpkg-query says every package but
# jq is installed; apt-get fails LOCKED-RUNS times as a held lock does, then
# succeeds, logging each call to DIR/calls
fakes() {
    mkdir -p "$1"
    cat >"$1/dpkg-query" <<'EOF'
#!/bin/sh
for last; do :; done
[ "$last" = jq ] && exit 1
printf 'install ok installed'
EOF
    cat >"$1/id" <<'EOF'
#!/bin/sh
echo 0
EOF
    cat >"$1/apt-get" <<EOF
#!/bin/sh
echo "\$*" >>"$1/calls"
n=\$(wc -l <"$1/calls")
if [ "\$n" -le $2 ]; then
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
    exit 100
fi
[ -n "\${FAIL_OTHER:-}" ] && { echo "E: Unable to locate package jq" >&2; exit 100; }
exit 0
EOF
    chmod +x "$1"/*
}

begin ".ci/deps: a held apt lock is waited for, then the missing package installed"
fakes "$T/bin" 2
PATH=$T/bin:$PATH KVIX_APT_RETRY=0.05 run sh "$ROOT/.ci/deps"
expect_rc 0
assert_grep 'kvix: installing jq' err
assert_eq "$(grep -c 'apt is busy' err)" 2 "waits reported"
assert_eq "$(sed -n 3p "$T/bin/calls")" "-o DPkg::Lock::Timeout=600 update -qq" "update once the lock is free"
assert_grep '^-o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends +jq$' "$T/bin/calls"
end

begin ".ci/deps: past KVIX_APT_WAIT it gives up; another failure is not waited for"
fakes "$T/bin" 1000
PATH=$T/bin:$PATH KVIX_APT_WAIT=0 KVIX_APT_RETRY=0.05 run sh "$ROOT/.ci/deps"
[ "$rc" != 0 ] || fail "succeeded with the lock held"
assert_grep 'Could not get lock' err
assert_eq "$(wc -l <"$T/bin/calls")" 1 "no retry past the deadline"
rm -f "$T/bin/calls"
fakes "$T/bin" 0
PATH=$T/bin:$PATH FAIL_OTHER=1 KVIX_APT_RETRY=0.05 run sh "$ROOT/.ci/deps"
[ "$rc" != 0 ] || fail "succeeded when apt-get failed"
assert_grep 'Unable to locate package' err
assert_no_grep 'apt is busy' err
end
