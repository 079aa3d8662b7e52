#!/usr/bin/python3
"""Property test of kvhash against an independent implementation of the
contract's section 1 (local hash with LoRA seed, rolling sequence hash,
PositionalSequenceHash, PositionalLineageHash), written from the contract
with python's xxhash module, sharing no code with libkvix.

Random token sequences, block sizes, LoRA names, input shapes (whitespace
ints with odd spacing and leading zeros, JSON arrays, JSON objects with
"tokens", "lora" and "id", per-block token arrays) and output options are
drawn from a fixed seed; every batch is run through kvhash and its output
compared byte for byte with the output this script expects.

    hash_ref.py [--kvhash PATH] [--seed N] [--sequences N]

Prints one line per failing batch and a summary; exits 1 on any mismatch."""
import argparse
import json
import random
import subprocess
import sys

import xxhash

SEED = 1337
M64 = (1 << 64) - 1


def xxh3(data, seed):
    return xxhash.xxh3_64_intdigest(data, seed=seed)


def lora_seed(name):
    if not name:
        return SEED
    return (SEED + xxh3(name.encode(), 0)) & M64


def local_hash(block, seed):
    return xxh3(b"".join(t.to_bytes(4, "little") for t in block), seed)


def seq_next(prev, local):
    return xxh3(prev.to_bytes(8, "little") + local.to_bytes(8, "little"), SEED)


def psh(seq, pos, local):
    for mode, (limit, p, r) in enumerate([(1 << 8, 8, 54), (1 << 16, 16, 46),
                                          (1 << 24, 24, 38), (1 << 31, 31, 31)]):
        if pos < limit:
            hi = mode << 62 | (pos & ((1 << p) - 1)) << r | (local & ((1 << r) - 1))
            return hi << 64 | seq
    raise ValueError("position too deep")


PLH_MODES = [(8, 59), (16, 55), (24, 51)]  # (P, M = N)


def plh_mode(pos):
    for mode, (p, _) in enumerate(PLH_MODES):
        if pos < 1 << p:
            return mode
    return None


def plh(cur, parent, pos):
    mode = plh_mode(pos)
    if mode is None:
        raise ValueError("position too deep")
    p, m = PLH_MODES[mode]
    n = m
    nxt = plh_mode(pos + 1)
    ncur = min(n, PLH_MODES[nxt][1]) if nxt is not None else n
    return (mode << 126 | (pos & ((1 << p) - 1)) << (m + n)
            | (parent & ((1 << m) - 1)) << n | (cur & ((1 << ncur) - 1)))


def expected(tokens, bs, seed, opts, ident):
    """The line kvhash should print for one sequence."""
    nb = len(tokens) // bs
    locs, seqs = [], []
    for i in range(nb):
        loc = local_hash(tokens[i * bs:(i + 1) * bs], seed)
        locs.append(loc)
        seqs.append(loc if i == 0 else seq_next(seqs[-1], loc))
    pshs = [psh(seqs[i], i, locs[i]) for i in range(nb)]
    plhs = [plh(seqs[i], seqs[i - 1] if i else 0, i) for i in range(nb)]

    def fmt(v, width):
        return str(v) if opts["decimal"] else format(v, "0%dx" % width)

    fields = {"local": [fmt(v, 16) for v in locs], "seq": [fmt(v, 16) for v in seqs],
              "psh": [fmt(v, 32) for v in pshs], "plh": [fmt(v, 32) for v in plhs]}
    if opts["plain"]:
        return " ".join(fields[opts["plain"]])
    parts = []
    if ident is not None:
        parts.append('"id":' + json.dumps(ident, separators=(",", ":")))
    names = ["local", "seq"] + (["psh", "plh"] if opts["positional"] else [])
    for name in names:
        # JSON: hex hashes are strings, decimal ones integers (contract section 2)
        q = "" if opts["decimal"] else '"'
        parts.append('"%s":[%s]' % (name, ",".join(q + v + q for v in fields[name])))
    if len(tokens) % bs:
        parts.append('"partial":%d' % (len(tokens) % bs))
    return "{" + ",".join(parts) + "}"


def rand_token(rng):
    kind = rng.random()
    if kind < 0.6:
        return rng.randrange(152064)           # a real vocabulary
    if kind < 0.8:
        return rng.randrange(10 ** rng.randrange(1, 11)) & 0xFFFFFFFF  # every digit count
    if kind < 0.9:
        return rng.choice([0, 1, 9, 10, 9999999, 10000000, 99999999, 4294967295])
    return rng.randrange(1 << 32)


def ws(rng):
    return rng.choice([" ", " ", " ", "  ", "\t", " \t "])


def render(rng, tokens, bs, lora, ident):
    """One input line for tokens; returns (line, lora name the line carries or None)."""
    shape = rng.random()
    if lora is not None or ident is not None or shape < 0.1:
        obj = {}
        if ident is not None:
            obj["id"] = ident
        if shape < 0.05 and tokens and bs > 1:
            obj["tokens"] = [tokens[i:i + bs] for i in range(0, len(tokens), bs)]
        else:
            obj["tokens"] = tokens
        if lora is not None:
            obj["lora"] = lora
        items = list(obj.items())
        rng.shuffle(items)
        return json.dumps(dict(items), separators=rng.choice([(",", ":"), (", ", ": ")]))
    if shape < 0.45:
        sep = rng.choice([",", ", ", " , "])
        return rng.choice(["", " "]) + "[" + sep.join(map(str, tokens)) + "]"
    out = [rng.choice(["", " ", "\t"])]
    for i, t in enumerate(tokens):
        if i:
            out.append(ws(rng))
        out.append("0" * rng.choice([0] * 9 + [1, 3]) + str(t))
    out.append(rng.choice(["", "", " ", "\r"]))
    return "".join(out)


def batch(rng, n):
    bs = rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 16, 32, 64, 512])
    opts = {"positional": rng.random() < 0.4, "decimal": rng.random() < 0.3,
            "plain": rng.choice([None] * 4 + ["local", "seq", "psh", "plh"])}
    default_lora = rng.choice([None, None, "adapter-a", "x", "lora/\u00e9t\u00e9-7"])
    args = ["-b", str(bs)]
    if default_lora is not None:
        args += ["--lora", default_lora]
    if opts["positional"]:
        args.append("--positional")
    if opts["decimal"]:
        args.append("--decimal")
    if opts["plain"]:
        args += ["--plain", opts["plain"]]
    lines, want = [], []
    for _ in range(n):
        r = rng.random()
        if r < 0.02 and bs <= 2:
            length = rng.randrange(250, 700) * bs      # crosses position 255/256
        elif r < 0.03 and bs == 1:
            length = rng.randrange(65530, 65600)       # crosses position 65535/65536
        else:
            length = rng.randrange(0, 6 * bs + 3)
        tokens = [rand_token(rng) for _ in range(length)]
        line_lora = rng.choice([None] * 6 + ["", "adapter-a", "b" * 40])
        ident = rng.choice([None] * 8 + [rng.randrange(1000), "q-%d" % rng.randrange(99)])
        lines.append(render(rng, tokens, bs, line_lora, ident))
        name = line_lora if line_lora is not None else default_lora
        want.append(expected(tokens, bs, lora_seed(name), opts,
                             None if opts["plain"] else ident))
    return args, lines, want


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvhash", default="kvhash")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--sequences", type=int, default=3000)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    done = failed = batches = 0
    while done < a.sequences:
        n = min(rng.randrange(1, 120), a.sequences - done)
        args, lines, want = batch(rng, n)
        data = ("\n".join(lines) + "\n").encode()
        p = subprocess.run([a.kvhash] + args, input=data, capture_output=True)
        got = p.stdout.decode(errors="replace").split("\n")[:-1]
        batches += 1
        done += n
        if p.returncode != 0 or got != want:
            failed += 1
            first = next((i for i in range(max(len(got), len(want)))
                          if i >= len(got) or i >= len(want) or got[i] != want[i]), None)
            print("mismatch: kvhash %s (seed %d, batch %d): rc %d, line %s; stderr: %s"
                  % (" ".join(args), a.seed, batches, p.returncode,
                     None if first is None else first + 1, p.stderr.decode()[:200]))
            if first is not None:
                print("  input: %.200s" % lines[first] if first < len(lines) else "")
                print("  want:  %.200s" % (want[first] if first < len(want) else "(none)"))
                print("  got:   %.200s" % (got[first] if first < len(got) else "(none)"))
            if failed >= 5:
                break
    print("%d sequences in %d batches, %d batches failed" % (done, batches, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
