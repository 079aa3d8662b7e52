# Each tool's option table is the single source of its --help, its man page's
# OPTIONS section and its completions: completions/gen.sh --check fails when
# any of them drifted. The completions are also checked for what they do.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

tools=()
for bin in "$KVIX_BIN"/kv*; do
    [ -f "$bin" ] && [ -x "$bin" ] && tools+=("$(basename "$bin")")
done

begin "there are tools to check"
[ "${#tools[@]}" -ge 1 ] || fail "no kv* tools in $KVIX_BIN"
end

# the long options of a tool, one per line, from its option table
list_longs() { "$1" --list-options | awk -F'\t' '$1 != "operands" { print $2 }'; }

for tool in "${tools[@]}"; do
    begin "$tool: --help, man OPTIONS and completions match the option table"
    mkdir bin && ln -s "$KVIX_BIN/$tool" "bin/$tool"
    run "$ROOT/completions/gen.sh" --check "$T/bin"
    expect_rc 0
    sed 's/^/#   /' err | head -20
    run "$tool" --list-options
    expect_rc 0
    list_longs "$tool" >longs
    [ -s longs ] || fail "no options listed"
    "$tool" --help >help
    while read -r l; do
        grep -qE -- "(^|[ ,])$l( |$)" help || fail "--help does not show $l"
    done <longs
    end

    begin "$tool: the bash completion is valid bash and completes every option"
    f=$ROOT/completions/$tool.bash
    list_longs "$tool" >longs
    if [ ! -f "$f" ]; then
        fail "no $f"
    else
        bash -n "$f" 2>err || fail "bash -n: $(cat err)"
        # complete "--" and the argument of every option with fixed words
        got=$(bash -c '. "$1"; COMP_WORDS=("$2" --); COMP_CWORD=1; "_$2"; printf "%s\n" "${COMPREPLY[@]}"' \
            _ "$f" "$tool" | sort)
        assert_eq "$got" "$(grep -- '^--' longs | sort)" "completions of --"
        "$tool" --list-options | awk -F'\t' '$1 != "operands" && $4 ~ /\|/ { print $2 "\t" $4 }' >words
        while IFS=$'\t' read -r l w; do
            got=$(bash -c '. "$1"; COMP_WORDS=("$2" "$3" ""); COMP_CWORD=2; "_$2"; echo "${COMPREPLY[*]}"' \
                _ "$f" "$tool" "$l")
            assert_eq "$got" "${w//|/ }" "completions after $l"
        done <words
    fi
    end

    begin "$tool: zsh and fish completions name every option"
    list_longs "$tool" >longs
    for f in "$ROOT/completions/_$tool" "$ROOT/completions/$tool.fish"; do
        [ -f "$f" ] || fail "no $f"
    done
    if [ -f "$ROOT/completions/_$tool" ] && [ -f "$ROOT/completions/$tool.fish" ]; then
        assert_eq "$(head -n 1 "$ROOT/completions/_$tool")" "#compdef $tool" "zsh header"
        # fish: every line is a complete command for this tool, quotes balanced
        assert_eq "$(grep -v '^#' "$ROOT/completions/$tool.fish" | grep -cv "^complete -c $tool ")" 0 \
            "fish lines that are not 'complete -c $tool'"
        while read -r l; do
            grep -qF -- "$l" "$ROOT/completions/_$tool" || fail "zsh completion lacks $l"
            grep -qE -- "-l ${l#--}( |$)" "$ROOT/completions/$tool.fish" || fail "fish completion lacks $l"
        done <longs
        # each fish line is one word list when its quotes are removed the way fish would
        while read -r line; do
            eval "set -- $line" 2>/dev/null || fail "unbalanced quotes in fish line: $line"
        done < <(grep -v '^#' "$ROOT/completions/$tool.fish" | sed "s/\\\\'/'\"'\"'/g")
    fi
    end

    for sh in zsh fish; do
        command -v "$sh" >/dev/null || continue
        begin "$tool: $sh parses its completion"
        case $sh in
        zsh) zsh -n "$ROOT/completions/_$tool" 2>err || fail "zsh -n: $(cat err)" ;;
        fish) fish -n "$ROOT/completions/$tool.fish" 2>err || fail "fish -n: $(cat err)" ;;
        esac
        end
    done
done

begin "gen.sh --check notices drift in a completion and in a man page"
mkdir -p repo/completions repo/man bin
cp "$ROOT/completions/gen.sh" repo/completions/
cp "$ROOT"/completions/kvhash* "$ROOT/completions/_kvhash" repo/completions/
cp "$ROOT/man/kvhash.1" repo/man/
ln -s "$KVIX_BIN/kvhash" bin/kvhash
run repo/completions/gen.sh --check "$T/bin"
expect_rc 0
sed -i 's/--decimal/--decimals/' repo/completions/kvhash.bash
run repo/completions/gen.sh --check "$T/bin"
expect_rc 1
assert_grep "completions/kvhash.bash differs" err
cp "$ROOT/completions/kvhash.bash" repo/completions/
sed -i 's/^tokens per block/blocks per token/' repo/man/kvhash.1
run repo/completions/gen.sh --check "$T/bin"
expect_rc 1
assert_grep "man/kvhash.1 differs" err
# and without --check it repairs them
run repo/completions/gen.sh "$T/bin"
expect_rc 0
cmp -s repo/man/kvhash.1 "$ROOT/man/kvhash.1" || fail "gen.sh did not restore the man page"
end
