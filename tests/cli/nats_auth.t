#!/usr/bin/env bash
# kvsub --nats and kvindex --nats against a real nats-server that wants
# credentials: a user and password, a token, TLS with client certificates
# (a CA, a server and a client certificate made by openssl here). With them
# the stream is published and consumed whole (kvindex's index equals that of
# kvsub's own log); without them the tools say why the server refused them.
# Every wait is a bounded poll.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
FE=$ROOT/tests/tools/fake_engine.py
. "$(dirname "$0")/procs.sh"
. "$(dirname "$0")/nats.sh"

secret() { printf '%s\n' "$2" >"$1" && chmod 600 "$1"; } # secret FILE TEXT

# through URL STREAM CRED-ARGS...: a fake engine's 30 batches published by
# kvsub --nats with the credentials, then consumed by kvindex --nats
# --until-caught-up with them; the two indexes compared
through() {
    local url=$1 stream=$2
    shift 2
    timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --batches 30 --expect exp.json \
        --seed 3 --linger 1 2>engine.err &
    local epid=$!
    timeout --foreground 120 kvsub -w "1=ipc://$T/pub" --nats "$url" --stream "$stream" \
        --subject "s$stream" "$@" >events.ndjson 2>kvsub.err &
    local spid=$!
    PIDS="$PIDS $epid $spid"
    for i in $(seq 600); do
        "$PY" "$FE" final events.ndjson exp.json 2>/dev/null && break
        sleep 0.1
    done
    kill -TERM "$spid"
    wait "$spid"
    assert_eq "$?" 0 "kvsub's exit status (every batch acknowledged)"
    assert_grep "created stream $stream" kvsub.err
    wait "$epid"
    run timeout --foreground 60 kvindex --nats "$url" --stream "$stream" --until-caught-up \
        -s nats.kvix "$@"
    expect_rc 0
    kvindex --quiet -s log.kvix <events.ndjson || fail "indexing kvsub's log"
    run kvdump --diff log.kvix nats.kvix
    expect_rc 0
}

# refused URL CRED-ARGS...: kvindex --nats and kvsub --nats without (or with
# wrong) credentials exit at once (6), saying why the server refused them,
# rather than wait for a server that will never let them in
refused() {
    local url=$1
    shift
    run timeout --foreground 60 kvindex --nats "$url" --stream X --until-caught-up -s r.kvix "$@"
    expect_rc 6
    cp err r.err
    run timeout --foreground 60 kvsub -w "1=ipc://$T/nobody" --nats "$url" --stream X "$@"
    expect_rc 6
    cat err >>r.err
}

begin "kvsub and kvindex --nats with a user and password"
NATS_ARGS="--user kv --pass s3cret" nats_start
secret pw s3cret
through "$NURL" UP --nats-user kv --nats-password-file pw
refused "$NURL"
assert_eq "$(grep -c "nats: $NURL: Authorization Violation" r.err)" 2 "refusals said"
secret bad nope
refused "$NURL" --nats-user kv --nats-password-file bad
assert_grep 'Authorization Violation' r.err
end

begin "kvsub and kvindex --nats with a token"
NATS_ARGS="--auth T0ken-1" nats_start
secret tok T0ken-1
through "$NURL" TK --nats-token-file tok
refused "$NURL"
assert_grep 'Authorization Violation' r.err
# a credentials file nats.c cannot take: said at once, not waited on
printf 'garbage\n' >g.creds
refused "$NURL" --nats-creds g.creds
assert_eq "$(grep -c "nats: $NURL: no nkey user seed found in 'g.creds'" r.err)" 2 "refusals said"
end

begin "kvsub and kvindex --nats over TLS, the client verified by its certificate too"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 2 -subj /CN=kvix-test-ca \
    2>/dev/null || fail "openssl: the CA"
for who in server client; do
    openssl req "${ec[@]}" -keyout "$who.key" -out "$who.csr" -subj "/CN=$who" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >ext
    openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext -out "$who.pem" 2>/dev/null || fail "openssl: the $who's certificate"
done
NATS_ARGS="--tlsverify --tlscert server.pem --tlskey server.key --tlscacert ca.pem" nats_start
TURL=tls://127.0.0.1:$NPORT
through "$TURL" TL --nats-tls-ca ca.pem --nats-tls-cert client.pem --nats-tls-key client.key
# a server certificate the system's CAs do not vouch for
refused "$TURL"
assert_eq "$(grep -c "nats: $TURL: SSL handshake error: .*unable to get local issuer" r.err)" 2 \
    "refusals said"
run kvindex --nats "$TURL" --nats-tls-cert client.pem
expect_rc 2
assert_grep 'go together' err
run kvindex --nats-tls-ca ca.pem
expect_rc 2
assert_grep 'go with --nats' err
run kvindex --nats "$TURL" --stream X --nats-tls-ca nosuch.pem -s r.kvix </dev/null
expect_rc 3
assert_grep 'cannot read nosuch.pem' err
run kvsub -w "1=ipc://$T/nobody" --nats "$TURL" --nats-creds nosuch.creds </dev/null
expect_rc 3
end
