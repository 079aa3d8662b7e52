#!/usr/bin/python3
"""Random kvix event histories for round-trip tests (kvdump | kvindex).

    random_history.py N SEED DIR   writes DIR/h0.ndjson .. DIR/h{N-1}.ndjson

Each history: up to 40 events over 1-3 partitions (block size 2 or 4), 4
workers and 2 ranks: stored chains (some under a parent the worker holds),
removals of held and of unknown hashes, clears with and without an eid.
What a round trip must keep shows up often: pairs that hold only their eid
(every block removed, or cleared with an eid), partitions whose every pair
holds nothing, ranks that come and go. Deterministic for a seed."""
import json
import os
import random
import sys


def history(seed):
    r = random.Random(seed)
    out, held, eid = [], {}, {}
    models = ["m%d" % i for i in range(r.randint(1, 3))]
    bs = {m: r.choice([2, 4]) for m in models}
    nh = 1
    for _ in range(r.randint(1, 40)):
        m, w, dp = r.choice(models), r.randint(1, 4), r.randint(0, 1)
        k = (m, w, dp)
        e = eid[k] = eid.get(k, -1) + 1
        t = r.random()
        if t < 0.5:
            parent = r.choice(held[k]) if held.get(k) and r.random() < 0.5 else None
            blocks = []
            for _ in range(r.randint(1, 3)):
                blocks.append({"local": "%x" % nh, "seq": "%x" % (nh + 1000000)})
                nh += 1
            ev = {"type": "stored", "worker": w, "dp": dp, "model": m, "bs": bs[m], "eid": e,
                  "parent": parent, "blocks": blocks}
            held.setdefault(k, []).extend(b["seq"] for b in blocks)
        elif t < 0.85:
            have = held.get(k, [])
            hs = r.sample(have, min(len(have), r.randint(0, 2))) if have else []
            if not hs:  # a hash the worker does not hold
                hs = ["%x" % (10**9 + nh)]
                nh += 1
            for h in hs:
                if h in have:
                    have.remove(h)
            ev = {"type": "removed", "worker": w, "dp": dp, "model": m, "eid": e, "hashes": hs}
        else:
            held[k] = []
            ev = {"type": "cleared", "worker": w, "dp": dp, "model": m, "eid": e}
            if r.random() < 0.3:
                del ev["eid"]
        out.append(json.dumps(ev))
    return "\n".join(out) + "\n"


def main():
    n, seed, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    for i in range(n):
        with open(os.path.join(d, "h%d.ndjson" % i), "w") as f:
            f.write(history(seed + i))


if __name__ == "__main__":
    main()
