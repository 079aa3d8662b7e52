# The one exit-code table: kvhash's codes, the table in cmd/tools/cli.h, README.md
# and every man page's EXIT STATUS section agree; --help and --version exit 0
# and an unknown option exits 2 for every tool.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

begin "kvhash: 0 ok, 1 rejected lines, 2 usage, 3 unreadable file, 5 --strict"
printf '1 2\n' >good
printf '1 2\nx\n3 4\n' >bad
run kvhash -b 2 good
expect_rc 0
run kvhash -b 2 bad
expect_rc 1
assert_eq "$(grep -vc error out)" 2 "lines hashed around the rejected one"
assert_eq "$(sed -n 2p out)" "{\"error\":\"token 'x' is not a number\"}" "the rejected line's own line"
run kvhash good
expect_rc 2
run kvhash -b 2 good missing
expect_rc 3
assert_eq "$(wc -l <out)" 1 "the readable file is still hashed"
mkdir dir
run kvhash -b 2 dir
expect_rc 3
assert_grep "^kvhash: error reading dir: " err
run kvhash -b 2 --strict bad
expect_rc 5
assert_eq "$(grep -vc error out)" 1 "lines before the stop"
# precedence: --strict over i/o over rejected lines
run kvhash -b 2 --strict missing bad
expect_rc 5
run kvhash -b 2 bad missing
expect_rc 3
end

# The README table: "| code | meaning |" rows after "## Exit status".
readme_table() {
    awk '/^## Exit status/ { on = 1; next } /^## / { on = 0 } on && /^\| [0-9]+ \|/' "$ROOT/README.md" |
        sed -E 's/^\| ([0-9]+) \| (.*) \|$/\1 \2/; s/`//g'
}

# A man page's EXIT STATUS entries: ".TP / .B N / text", ".IP N / text" or
# the rows "N<tab>text" of a tbl table; font escapes and \- undone.
man_table() {
    awk '
        /^\.SH/ { on = ($0 ~ /^\.SH "?EXIT STATUS"?$/); next }
        !on { next }
        /^\.TS/ { flush(); ts = 1; fmt = 1; next }
        /^\.TE/ { ts = 0; next }
        ts && fmt { if ($0 ~ /\.$/) fmt = 0; next }
        ts { i = index($0, "\t"); if (i) print substr($0, 1, i - 1) " " substr($0, i + 1); next }
        /^\.(TP|PP|P|LP)$/ { flush(); next }
        /^\.B [0-9]+$/ { flush(); code = $2; next }
        /^\.IP [0-9]+/ { flush(); code = $2; next }
        /^\.[A-Za-z]/ { next }
        code != "" { text = text (text == "" ? "" : " ") $0 }
        function flush() { if (code != "") print code " " text; code = ""; text = "" }
        END { flush() }' "$1" | sed -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' -e 's/\\(aq/'"'"'/g'
}

begin "cmd/tools/cli.h, README.md and --help list the same exit codes"
readme_table >readme
[ "$(wc -l <readme)" -ge 7 ] || fail "README exit-status table not found"
sed -nE 's/^ *KVIX_EXIT_[A-Z]+ = ([0-9]+),.*/\1/p' "$ROOT/cmd/tools/cli.h" >header
assert_eq "$(tr '\n' ' ' <header)" "$(cut -d' ' -f1 readme | tr '\n' ' ')" "codes in cli.h and README"
# kvindex can return every code
kvindex --help >help
while read -r code _; do
    grep -qE "(^|[ ,])$code [a-z]" help || fail "--help does not mention exit status $code"
done <readme
end

begin "--help lists only the exit codes each tool can return"
# tool, the codes it can return (kvhash reads no snapshot and no compressed
# input, kvdump has no --strict, kvsub neither, only kvindex --nats loses a
# stream position)
while read -r tool codes; do
    "$tool" --help | sed -n '/^exit status:/,$p' | tr '\n' ' ' >ex
    got=$(grep -oE '(^|[:,] )[0-9] [a-z]' ex | grep -oE '[0-9]' | tr -d '\n')
    assert_eq "$got" "$codes" "$tool exit codes in --help"
done <<'EOF2'
kvhash 012356
kvindex 01234567
kvdump 012346
kvreplay 0123456
kvsub 012346
EOF2
end

begin "--help gives the allowed values of each option that takes a word"
kvindex --help >help
assert_grep '--backend NAME .*\(positional, radix or reference\)' help
assert_grep '--format FMT .*\(auto, ndjson or msgpack\)' help
kvhash --help >help
assert_grep '--plain FIELD .*local, seq, psh or plh' help
# an undocumented alias is gone: -f takes the names --help gives
run kvindex -f json </dev/null
expect_rc 2
assert_grep "bad format for -f: 'json' \(expected auto, ndjson or msgpack\)" err
end

for page in "$ROOT"/man/*.1 "$ROOT"/man/kvix.7; do
    [ -f "$page" ] || continue
    begin "$(basename "$page"): EXIT STATUS is README's table"
    readme_table >readme.tbl
    man_table "$page" >man.tbl
    if ! diff -u readme.tbl man.tbl >d; then
        fail "EXIT STATUS of $(basename "$page") differs from README.md"
        sed 's/^/#     /' d | head -20
    fi
    end
done

for bin in "$KVIX_BIN"/kv*; do
    [ -f "$bin" ] && [ -x "$bin" ] || continue
    tool=$(basename "$bin")
    begin "$tool: --help and --version exit 0, an unknown option exits 2"
    run "$tool" --help
    expect_rc 0
    assert_grep "^usage: $tool "
    [ -s err ] && fail "--help wrote to stderr"
    run "$tool" --version
    expect_rc 0
    assert_grep "^$tool \(kvix\) "
    run "$tool" --no-such-option-anywhere
    expect_rc 2
    assert_grep "try '$tool --help'" err
    end
done
