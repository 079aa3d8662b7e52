#!/usr/bin/python3
"""Independent simulation of kvreplay --mooncake, for cross-checking cmd/tools/mooncake.c.

Written from the documented rules (cmd/tools/mooncake.h), not from the C code:
workers with LRU-of-leaves prefix caches, splitmix64 routing, whole blocks only.

  mooncake_sim.py sim TRACE --workers N --capacity C --route random|best --seed S [--limit N]
      prints the final caches as 'worker engine local depth' lines (sorted like
      kvreplay --final-state), and the counters on stderr
  mooncake_sim.py apply EVENTS.ndjson
      applies the stored/removed events of a kvreplay log to per-worker sets,
      checking that every parent is held and every removal known; prints
      'worker engine' lines, sorted
"""
import argparse
import heapq
import json
import lzma
import struct
import sys

import xxhash

BS = 512
SEED = 1337
M64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


_local = {}


def local_hash(i):
    h = _local.get(i)
    if h is None:
        h = xxhash.xxh3_64_intdigest(struct.pack("<%dI" % BS, *([i] * BS)), seed=SEED)
        _local[i] = h
    return h


def seq_next(prev, local):
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", prev, local), seed=SEED)


def open_trace(path):
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic == b"\xfd7zXZ\x00":
        return lzma.open(path, "rt")
    return open(path, "rt")


class Worker:
    def __init__(self):
        self.blocks = {}  # engine -> [parent engine or None, children, stamp, local, depth]
        self.heap = []    # (stamp, engine) candidates, checked when popped

    def is_leaf_entry(self, stamp, eng):
        b = self.blocks.get(eng)
        return b is not None and b[1] == 0 and b[2] == stamp

    def evict(self):
        while True:
            stamp, eng = heapq.heappop(self.heap)
            if self.is_leaf_entry(stamp, eng):
                break
        parent = self.blocks.pop(eng)[0]
        if parent is not None:
            p = self.blocks[parent]
            p[1] -= 1
            if p[1] == 0:
                heapq.heappush(self.heap, (p[2], parent))
        return eng


def simulate(args):
    workers = [Worker() for _ in range(args.workers)]
    rng = args.seed
    clock = 0
    stats = dict(requests=0, skipped=0, stored_blocks=0, removed_blocks=0, hit_blocks=0,
                 stored_events=0, removed_events=0)
    played = 0
    with open_trace(args.trace) as f:
        for line in f:
            if not line.strip():
                continue
            if args.limit and played >= args.limit:
                break
            played += 1
            req = json.loads(line)
            ids = req["hash_ids"]
            full = min(req["input_length"] // BS, len(ids))
            if full == 0:
                stats["skipped"] += 1
                continue
            stats["requests"] += 1
            locals_ = [local_hash(i) for i in ids[:full]]
            engines = []
            for k, loc in enumerate(locals_):
                engines.append(loc if k == 0 else seq_next(engines[-1], loc))
            rng, draw = splitmix64(rng)
            if args.route == "random":
                wi = draw % args.workers
            else:
                overlaps = []
                for w in workers:
                    k = 0
                    while k < full and engines[k] in w.blocks:
                        k += 1
                    overlaps.append(k)
                best = max(overlaps)
                tied = [i for i, k in enumerate(overlaps) if k == best]
                wi = tied[draw % len(tied)]
            w = workers[wi]
            hit = 0
            while hit < full and engines[hit] in w.blocks:
                clock += 1
                b = w.blocks[engines[hit]]
                b[2] = clock
                if b[1] == 0:
                    heapq.heappush(w.heap, (clock, engines[hit]))
                hit += 1
            stats["hit_blocks"] += hit
            limit = min(full, args.capacity)
            nstore = max(0, limit - hit)
            if nstore == 0:
                continue
            need = len(w.blocks) + nstore - args.capacity
            if need > 0:
                for _ in range(need):
                    w.evict()
                stats["removed_blocks"] += need
                stats["removed_events"] += 1
            parent = engines[hit - 1] if hit else None
            for k in range(hit, limit):
                clock += 1
                if parent is not None:
                    w.blocks[parent][1] += 1
                w.blocks[engines[k]] = [parent, 0, clock, locals_[k], k]
                heapq.heappush(w.heap, (clock, engines[k]))
                parent = engines[k]
            stats["stored_blocks"] += nstore
            stats["stored_events"] += 1
    out = []
    for wi, w in enumerate(workers):
        for eng in sorted(w.blocks):
            b = w.blocks[eng]
            out.append("%d %016x %016x %d" % (wi, eng, b[3], b[4]))
    sys.stdout.write("".join(s + "\n" for s in out))
    print(" ".join("%s=%d" % kv for kv in sorted(stats.items())), file=sys.stderr)


def apply_events(args):
    held = {}
    bad = 0
    with open(args.events) as f:
        for n, line in enumerate(f, 1):
            r = json.loads(line)
            t = r.get("type")
            if t == "stored":
                s = held.setdefault(r["worker"], set())
                if r["parent"] is not None and int(r["parent"], 16) not in s:
                    print("line %d: unknown parent" % n, file=sys.stderr)
                    bad += 1
                for b in r["blocks"]:
                    s.add(int(b["seq"], 16))
            elif t == "removed":
                s = held.setdefault(r["worker"], set())
                for h in r["hashes"]:
                    if int(h, 16) not in s:
                        print("line %d: removing an unknown block" % n, file=sys.stderr)
                        bad += 1
                    s.discard(int(h, 16))
    for w in sorted(held):
        for h in sorted(held[w]):
            print("%d %016x" % (w, h))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sim")
    s.add_argument("trace")
    s.add_argument("--workers", type=int, default=256)
    s.add_argument("--capacity", type=int, default=16384)
    s.add_argument("--route", choices=["random", "best"], default="random")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--limit", type=int, default=0)
    a = sub.add_parser("apply")
    a.add_argument("events")
    args = ap.parse_args()
    if args.cmd == "sim":
        simulate(args)
        return 0
    return apply_events(args)


if __name__ == "__main__":
    sys.exit(main())
