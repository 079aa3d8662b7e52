# kvhash against an independent python implementation of contract section 1
# (tests/tools/hash_ref.py): thousands of random sequences, block sizes, LoRA
# names, input shapes and output options from fixed seeds.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

n=$(awk -v s="${KVIX_TEST_SCALE:-1}" 'BEGIN { n = int(4000 * s); print (n < 1000 ? 1000 : n) }')
for seed in 20261122 7; do
    begin "kvhash matches the python reference ($n sequences, seed $seed)"
    run "$PY" "$ROOT/tests/tools/hash_ref.py" --kvhash "$KVIX_BIN/kvhash" --seed "$seed" --sequences "$n"
    expect_rc 0
    assert_grep "^$n sequences in [0-9]+ batches, 0 batches failed$"
    grep '^ ' out | head -6 | sed 's/^/#   /'
    grep '^mismatch' out | head -3 | sed 's/^/#   /'
    end
done

begin "the reference itself reproduces the contract's vectors"
run "$PY" - "$ROOT/tests/tools" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import hash_ref as h
s = h.SEED
l = [h.local_hash(list(range(i, i + 4)), s) for i in (1, 5, 9)]
assert l == [14643705804678351452, 16777012769546811212, 483935686894639516], l
q = [l[0], h.seq_next(l[0], l[1])]
q.append(h.seq_next(q[1], l[2]))
assert q == [14643705804678351452, 4945711292740353085, 12583592247330656132], q
assert h.local_hash([0, 1, 2, 3], h.lora_seed("adapter-a")) == 6665157333201000639
assert h.local_hash([0, 1], s) == 10918435022357402928
a, b = 0x1234567890abcdef, 0xfedcba9876543210
assert [format(h.psh(a, p, b), "032x") for p in (100, 1000, 100000, 20000000)] == [
    "191cba98765432101234567890abcdef", "40fa3a98765432101234567890abcdef",
    "8061a818765432101234567890abcdef", "c0989680765432101234567890abcdef"]
assert format(h.plh(a, b, 100), "032x") == "1936e5d4c3b2a1908234567890abcdef"
assert format(h.plh(a, b, 255), "032x") == "3ff6e5d4c3b2a1908034567890abcdef"
assert format(h.plh(0xabcdef0123456789, a, 256), "032x") == "40401a2b3c4855e6f7cdef0123456789"
assert format(h.plh(a, 0, 0), "032x") == "00000000000000000234567890abcdef"
print("vectors ok")
PYEOF
expect_rc 0
assert_eq "$(cat out)" "vectors ok" "reference vectors"
end
