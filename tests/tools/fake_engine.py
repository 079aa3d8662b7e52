#!/usr/bin/python3
"""A fake inference engine speaking the exact KV-event wire of vLLM / SGLang
(see kvsub(1) and tests/fixtures/vllm), for kvsub's live tests. It knows its true cache
state, and so what a correct subscriber must end up holding.

  fake_engine.py publish --pub ENDPOINT [options]    run a scenario, publishing
  fake_engine.py compare EVENTS.ndjson EXPECT.json...  reduce kvsub's events to
        per-(worker, dp) block sets and compare them with what the engines expected
  fake_engine.py queries [--model M] [--tenant T] EXPECT.json...   query lines, one
        per cached chain (root to a leaf) of every engine
  fake_engine.py answers ANSWERS.ndjson EXPECT.json...   check an index's answers
        to those queries: each chain matched as far as the subscriber kept it

publish options:
  --worker ID            the worker id the subscriber registered (for EXPECT)
  --dps 0,1              data-parallel ranks multiplexed on this endpoint (batch field
                         dp), in turn; the seq counter is the socket's, shared by them
  --replay EP            the replay ROUTER (bound)
  --old-replay           answer replays as ["", seq, payload] (older vLLM, SGLang)
  --connect              connect the publisher (the subscriber binds)
  --style map|array|array6|sglang|bin   event encoding (default map)
  --batches N            batches per rank (default 40)
  --bs N                 block size (default 16)
  --drop S,...           do not send seq S (it stays in the replay buffer)
  --forget S,...         do not send seq S and keep it out of the replay buffer
  --restart-after N      after N rounds of batches (one per rank), restart: close and re-bind the
                         sockets, counters from 0, cache and replay buffer empty
  --restart-skip N       the first N batches after the restart are not sent (replayable)
  --epoch                topics carry SGLang's "\0sgl-kv-epoch=<id>", a new id per run
  --hybrid               a hybrid model (map and array styles): every span is stored by
                         three KV cache groups with the same hashes, group 0 sliding
                         window (its last block only: sparse), group 1 full attention
                         (the blocks EXPECT knows), group 2 Mamba; groups 0 and 2 evict
                         blocks group 1 still holds. A subscriber must end up with what
                         group 1 holds
  --seed N               scenario seed
  --expect FILE          write what a correct subscriber holds at the end
  --linger SEC           keep answering replays this long after the last batch (default 60:
                         tests stop the engine once they have what they wait for)
  --ready FILE           touch FILE once every subscriber joined (first time)
  --subscribers N        wait for N subscribers before the first batch (default 1; up to
                         60 s: a sanitizer build on a loaded machine starts slowly)
  --pause-at N:FILE[:S]  after N rounds, wait (up to 60 s) until FILE exists, then until S
                         subscriptions in all were seen (a subscriber that came back);
                         FILE.waiting is created when the pause is reached; repeatable
"""
import argparse
import io
import json
import random
import struct
import sys
import time

import msgpack
import xxhash
import zmq

END_SEQ = b"\xff" * 8


def local_hash(tokens, lora=None):
    seed = 1337
    if lora:
        seed = (1337 + xxhash.xxh3_64_intdigest(lora.encode(), seed=0)) & (2**64 - 1)
    return xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(tokens), *tokens), seed=seed)


class Rank:
    """One data-parallel rank: its seq counter, cache and replay buffer."""

    def __init__(self, dp, rng):
        self.dp = dp
        self.rng = rng
        self.seq = 0  # the seq of the batch being made (the socket's counter)
        self.last = -1  # seq of this rank's last batch
        self.cache = {}  # engine hash -> (parent, local)
        self.children = {}  # engine hash -> number of cached children
        self.loss_floor = -1  # blocks stored in batches <= this seq are lost to a subscriber
        self.stored_at = {}  # engine hash -> seq of the batch that stored it
        self.side = {0: set(), 2: set()}  # --hybrid: what groups 0 and 2 hold

    def restart(self):
        self.seq = 0
        self.last = -1
        self.side = {0: set(), 2: set()}
        self.cache.clear()
        self.children.clear()
        self.loss_floor = -1
        self.stored_at.clear()

    def new_hash(self):
        while True:
            h = self.rng.getrandbits(64)
            if h not in self.cache and h != 0:
                return h

    def leaves(self):
        return [h for h in self.cache if self.children.get(h, 0) == 0]

    def make_store(self, bs):
        """A stored event, applied to the cache."""
        parent = None
        if self.cache and self.rng.random() < 0.6:
            parent = self.rng.choice(sorted(self.cache))
        n = self.rng.randint(1, 4)
        hashes = [self.new_hash() for _ in range(n)]
        tokens = [self.rng.randrange(0, 50000) for _ in range(n * bs)]
        prev = parent
        for i, h in enumerate(hashes):
            blk = tokens[i * bs:(i + 1) * bs]
            self.cache[h] = (prev, local_hash(blk), blk)
            self.stored_at[h] = self.seq
            if prev is not None:
                self.children[prev] = self.children.get(prev, 0) + 1
            prev = h
        return ("stored", hashes, parent, tokens)

    def make_events(self, bs):
        """Some engine events; the cache changes as they say (every event made
        is applied: a caller must publish them all, or its expected state is
        not the subscriber's)."""
        events = []
        for _ in range(self.rng.randint(1, 3)):
            r = self.rng.random()
            if r < 0.65 or not self.cache:
                events.append(self.make_store(bs))
            elif r < 0.99:
                leaves = self.leaves()
                gone = self.rng.sample(leaves, min(len(leaves), self.rng.randint(1, 2)))
                for h in gone:
                    parent = self.cache.pop(h)[0]
                    self.stored_at.pop(h, None)
                    if parent is not None:
                        self.children[parent] -= 1
                events.append(("removed", gone))
            else:
                self.cache.clear()
                self.children.clear()
                self.stored_at.clear()
                events.append(("cleared",))
        return events


KINDS = {0: "sliding_window", 1: "full_attention", 2: "mamba"}


def hybridize(events, rank, bs):
    """--hybrid: the same events as a model of three KV cache groups sends
    them. Group 1 (full attention) carries the events made; group 0 (sliding
    window) and group 2 (Mamba) store the last block of each span and evict
    what they hold at random, blocks group 1 still holds among them."""
    out = []
    for e in events:
        if e[0] == "stored":
            _, hashes, parent, tokens = e
            out.append(("stored", hashes, parent, tokens, 1, bs))
            for g in (0, 2):
                out.append(("stored", hashes[-1:], parent if len(hashes) == 1 else hashes[-2],
                            tokens, g, bs))
                rank.side[g].add(hashes[-1])
        elif e[0] == "removed":
            out.append(("removed", e[1], 1))
        else:
            out.append(e)
            rank.side = {0: set(), 2: set()}
    for g in (0, 2):
        held = sorted(rank.side[g])
        if held and rank.rng.random() < 0.5:
            gone = rank.rng.sample(held, min(len(held), rank.rng.randint(1, 3)))
            rank.side[g] -= set(gone)
            out.append(("removed", gone, g))
    return out


def group_stored(hs, ph, tokens, group, bs, style):
    """A hybrid model's BlockStored of one group (vLLM 0.25 arrays, 0.26 maps)."""
    window = 128 if group == 0 else None
    if style == "array":
        return ["BlockStored", hs, ph, tokens, bs, None, "GPU", None, [None] * len(hs), group,
                KINDS[group], window]
    return {"type": "BlockStored", "block_hashes": hs, "parent_block_hash": ph,
            "token_ids": tokens, "block_size": bs, "lora_id": None, "medium": "GPU",
            "lora_name": None, "extra_keys": [None] * len(hs), "group_idx": group,
            "kv_cache_spec_kind": KINDS[group], "kv_cache_spec_sliding_window": window}


def enc_hash(h, style):
    if style == "sglang" and h >= 2**63:
        return h - 2**64
    if style == "bin":
        return bytes(24) + h.to_bytes(8, "big")
    return h


def encode(events, dp, style, ts):
    out = []
    for e in events:
        if e[0] == "stored":
            _, hashes, parent, tokens = e[:4]
            hs = [enc_hash(h, style) for h in hashes]
            ph = None if parent is None else enc_hash(parent, style)
            bs = len(tokens) // len(hashes)
            if len(e) > 4:  # --hybrid: (..., group, bs); groups 0 and 2 skip blocks
                out.append(group_stored(hs, ph, tokens, e[4], e[5], style))
                continue
            if style == "array6":
                out.append(["BlockStored", hs, ph, tokens, bs, None])
            elif style == "sglang":
                out.append(["BlockStored", hs, ph, tokens, bs, None, "GPU"])
            elif style == "array":
                out.append(["BlockStored", hs, ph, tokens, bs, None, "GPU", None,
                            [None] * len(hs), 0, "full_attention", None])
            else:
                out.append({"type": "BlockStored", "block_hashes": hs, "parent_block_hash": ph,
                            "token_ids": tokens, "block_size": bs, "lora_id": None,
                            "medium": "GPU", "lora_name": None, "extra_keys": [None] * len(hs),
                            "group_idx": 0, "kv_cache_spec_kind": "full_attention"})
        elif e[0] == "removed":
            hs = [enc_hash(h, style) for h in e[1]]
            group = e[2] if len(e) > 2 else 0
            if style == "array":
                out.append(["BlockRemoved", hs, "GPU", group])
            elif style.startswith("array") or style == "sglang":
                out.append(["BlockRemoved", hs, "GPU"])
            else:
                out.append({"type": "BlockRemoved", "block_hashes": hs, "medium": "GPU",
                            "group_idx": group})
        else:
            if style.startswith("array") or style == "sglang":
                out.append(["AllBlocksCleared"])
            else:
                out.append({"type": "AllBlocksCleared"})
    batch = [ts, out] if style == "array6" else [ts, out, dp]
    return msgpack.packb(batch, use_bin_type=True)


def parse_seqs(s):
    return {int(item) for item in filter(None, (s or "").split(","))}


class Engine:
    def __init__(self, a):
        self.a = a
        self.ctx = zmq.Context()
        self.rng = random.Random(a.seed)
        self.ranks = [Rank(int(d), self.rng) for d in a.dps.split(",")]
        self.replay_eps = [a.replay] if a.replay else []
        self.seq = 0  # one counter per publisher socket, whatever the ranks
        self.buffer = []  # (seq, payload)
        self.pub = None
        self.routers = []
        self.subscribed = 0
        self.new_topic()
        self.open()

    def new_topic(self):
        # SGLang names the engine run in the topic: "...\0sgl-kv-epoch=<uuid>"
        self.topic = b""
        if self.a.epoch:
            self.topic = b"kv\0sgl-kv-epoch=%016x" % self.rng.getrandbits(64)

    def open(self):
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 100000)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscriber's subscription counts
        if self.a.connect:
            self.pub.connect(self.a.pub)
        else:
            self.pub.bind(self.a.pub)
        self.routers = []
        for ep in self.replay_eps:
            r = self.ctx.socket(zmq.ROUTER)
            r.setsockopt(zmq.LINGER, 0)
            r.bind(ep)
            self.routers.append(r)
        self.subscribed = 0

    def close(self):
        self.pub.close(0)
        for r in self.routers:
            r.close(0)

    def service(self, timeout_ms=0):
        poller = zmq.Poller()
        poller.register(self.pub, zmq.POLLIN)
        for r in self.routers:
            poller.register(r, zmq.POLLIN)
        for sock, _ in poller.poll(timeout_ms):
            if sock is self.pub:
                while True:
                    try:
                        m = self.pub.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if m[:1] == b"\x01":
                        self.subscribed += 1
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                ident, start = frames[0], int.from_bytes(frames[-1], "big")
                for seq, payload in self.buffer:
                    if seq >= start:
                        s8 = seq.to_bytes(8, "big")
                        if self.a.old_replay:
                            sock.send_multipart([ident, b"", s8, payload])
                        else:
                            sock.send_multipart([ident, b"", b"", s8, payload])
                if self.a.old_replay:
                    sock.send_multipart([ident, b"", END_SEQ, b""])
                else:
                    sock.send_multipart([ident, b"", b"", END_SEQ, b""])

    def wait_subscriber(self, n=1):
        deadline = time.monotonic() + 60
        while self.subscribed < n:
            if time.monotonic() > deadline:
                sys.exit("fake_engine: no subscriber joined")
            self.service(50)
        time.sleep(0.05)

    def publish(self, rank, events, final=False):
        payload = encode(events, rank.dp, self.a.style, time.time())
        seq = self.seq
        self.seq += 1
        rank.last = seq
        key = seq
        if key not in self.forget:
            self.buffer.append((seq, payload))
            del self.buffer[:-self.a.buffer]
        if key in self.drop or key in self.forget:
            lost = key in self.forget or not self.routers
            if lost:
                # A subscriber clears every rank of the endpoint when it sees
                # the gap (at seq + 1).
                for r in self.ranks:
                    r.loss_floor = seq
            return
        self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])

    def run(self):
        a = self.a
        self.drop, self.forget = parse_seqs(a.drop), parse_seqs(a.forget)
        self.wait_subscriber(a.subscribers)
        if a.ready:
            open(a.ready, "w").close()
        restarted = False
        for i in range(a.batches):
            if a.restart_after and i == a.restart_after and not restarted:
                restarted = True
                self.close()
                for r in self.ranks:
                    r.restart()
                self.seq = 0
                self.buffer.clear()
                # the first batches of the new run go unseen (still in its replay buffer)
                self.drop = set(range(a.restart_skip))
                self.forget = set()
                self.new_topic()
                time.sleep(0.3)
                self.open()
                self.wait_subscriber(a.subscribers)  # every subscriber back, not the first
            for spec in a.pause_at or []:
                if i == int(spec.split(":")[0]):
                    self.pause(*spec.split(":")[1:])
            for r in self.ranks:
                r.seq = self.seq
                evs = r.make_events(a.bs)
                # The last batch always stores (wait_final waits for a stored
                # event of it). A store is added, not the batch made again: the
                # events of a discarded batch were already applied to the cache,
                # so the expected state held changes nobody published.
                if i == a.batches - 1 and not any(e[0] == "stored" for e in evs):
                    evs.append(r.make_store(a.bs))
                if a.hybrid:
                    evs = hybridize(evs, r, a.bs)
                self.publish(r, evs)
            self.service(0)
            time.sleep(0.002)
        self.write_expect()
        deadline = time.monotonic() + a.linger
        while time.monotonic() < deadline:
            self.service(50)
        self.close()

    def pause(self, path, subs="0"):
        # PATH.waiting says the pause is reached: every batch before it is out
        open(path + ".waiting", "w").close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.service(50)
            try:
                open(path).close()
                break
            except OSError:
                pass
        while self.subscribed < int(subs) and time.monotonic() < deadline:
            self.service(50)
        time.sleep(0.05)

    def write_expect(self):
        blocks, final, chains = [], [], []
        for r in self.ranks:
            final.append([self.a.worker, r.dp, r.last])
            held = {h for h in r.cache if r.stored_at.get(h, -1) > r.loss_floor}
            for h in held:
                blocks.append([self.a.worker, r.dp, "%016x" % h, "%016x" % r.cache[h][1]])
            # Query chains, root to leaf: an index holds the leading blocks a
            # subscriber kept (it cannot place a block whose parent it lost).
            for i, leaf in enumerate(sorted(r.leaves())[:20]):
                path, h = [], leaf
                while h is not None:
                    path.append(h)
                    h = r.cache[h][0]
                path.reverse()
                m = 0
                while m < len(path) and path[m] in held:
                    m += 1
                tokens = [t for h in path for t in r.cache[h][2]]
                chains.append({"id": "%d-%d-%d" % (self.a.worker, r.dp, i), "worker": self.a.worker,
                               "dp": r.dp, "tokens": tokens, "blocks": len(path), "held": m,
                               "bs": self.a.bs})
        if self.a.expect:
            with open(self.a.expect, "w") as f:
                json.dump({"blocks": sorted(blocks), "final": final, "chains": chains}, f)


def load_events(path):
    """kvsub's output: NDJSON, or a stream of msgpack maps (-f msgpack)."""
    data = open(path, "rb").read()
    out = []
    if not data or data[:1] in b"{[ \t\r\n":
        for line in data.decode().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line still being written
        return out
    try:
        for ev in msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False):
            out.append(ev)
    except ValueError:
        pass  # a record still being written
    return out


def hx(v):
    """A hash as NDJSON writes it (msgpack output carries integers)."""
    return v if isinstance(v, str) else "%016x" % v


def reduce_events(path):
    """Per-(worker, dp) block sets. Stored events that carry their tokens
    (--tokens) must have the local hashes of those tokens."""
    state, kinds = {}, {}
    full = ("full_attention", "mla_attention", "sink_full_attention")
    for ev in load_events(path):
        s = state.setdefault((ev["worker"], ev.get("dp", 0)), {})
        k = kinds.setdefault((ev["worker"], ev.get("dp", 0)), {0: "full_attention"})
        if "group" in ev:  # kvix-events(5): only the full kinds are held
            if ev["type"] == "stored" and ev.get("kind"):
                k[ev["group"]] = ev["kind"]
            if k.get(ev["group"]) not in full:
                continue
        if ev["type"] == "stored":
            toks = ev.get("tokens")
            for i, b in enumerate(ev["blocks"]):
                s[hx(b["seq"])] = hx(b["local"])
                if toks is not None and "%016x" % local_hash(toks[i], ev.get("lora")) != hx(b["local"]):
                    s[hx(b["seq"])] = "local-hash-differs-from-its-tokens"
        elif ev["type"] == "removed":
            for h in ev["hashes"]:
                s.pop(hx(h), None)
        elif ev["type"] == "cleared":
            s.clear()
    return sorted([w, d, h, l] for (w, d), s in state.items() for h, l in s.items())


def compare(a):
    want = []
    for path in a.expect:
        want += [list(b) for b in json.load(open(path))["blocks"]]
    want.sort()
    got = reduce_events(a.events)
    if got == want:
        print("same: %d blocks" % len(got))
        return 0
    gs, ws = set(map(tuple, got)), set(map(tuple, want))
    for b in sorted(ws - gs)[:10]:
        print("missing", *b)
    for b in sorted(gs - ws)[:10]:
        print("extra", *b)
    print("differ: %d blocks held, %d expected" % (len(got), len(want)))
    return 1


def final(a):
    seen = {(e["worker"], e.get("dp", 0), e["eid"]) for e in load_events(a.events) if "eid" in e}
    for path in a.expect:
        try:
            x = json.load(open(path))
        except (OSError, ValueError):
            return 1
        if any(tuple(k) not in seen for k in x["final"]):
            return 1
    return 0


def queries(a):
    for path in a.expect:
        for c in json.load(open(path))["chains"]:
            q = {"type": "query", "id": c["id"], "model": a.model, "tenant": a.tenant,
                 "tokens": c["tokens"]}
            if a.msgpack:
                sys.stdout.buffer.write(msgpack.packb(q))
            else:
                print(json.dumps(q))
    return 0


def answers(a):
    got = {}
    for line in open(a.answers):
        try:
            x = json.loads(line)
        except ValueError:
            continue
        if "scores" in x:
            got[x.get("id")] = x
    bad = 0
    n = 0
    for path in a.expect:
        for c in json.load(open(path))["chains"]:
            n += 1
            want = []
            if c["held"]:
                want = [{"worker": c["worker"], "dp": c["dp"], "blocks": c["held"],
                         "tokens": c["held"] * c["bs"]}]
            x = got.get(c["id"])
            if x is None:
                print("no answer to query", c["id"])
                bad = 1
                continue
            have = [{k: s[k] for k in ("worker", "dp", "blocks", "tokens")} for s in x["scores"]]
            if x.get("blocks") != c["blocks"] or have != want:
                print("query %s: %s, want blocks %d scores %s" % (c["id"], line_of(x), c["blocks"], want))
                bad = 1
    print("%s: %d answers checked" % ("differ" if bad else "same", n))
    return bad


def line_of(x):
    return json.dumps(x, separators=(",", ":"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("publish")
    pp.add_argument("--pub", required=True)
    pp.add_argument("--worker", type=int, default=1)
    pp.add_argument("--dps", default="0")
    pp.add_argument("--replay")
    pp.add_argument("--old-replay", action="store_true")
    pp.add_argument("--connect", action="store_true")
    pp.add_argument("--style", default="map", choices=["map", "array", "array6", "sglang", "bin"])
    pp.add_argument("--batches", type=int, default=40)
    pp.add_argument("--bs", type=int, default=16)
    pp.add_argument("--drop")
    pp.add_argument("--forget")
    pp.add_argument("--restart-after", type=int, default=0)
    pp.add_argument("--restart-skip", type=int, default=0)
    pp.add_argument("--epoch", action="store_true")
    pp.add_argument("--hybrid", action="store_true")
    pp.add_argument("--buffer", type=int, default=10000)
    pp.add_argument("--seed", type=int, default=1)
    pp.add_argument("--expect")
    pp.add_argument("--linger", type=float, default=60)
    pp.add_argument("--ready")
    pp.add_argument("--subscribers", type=int, default=1)
    pp.add_argument("--pause-at", action="append")
    pc = sub.add_parser("compare")
    pc.add_argument("events")
    pc.add_argument("expect", nargs="+")
    pf = sub.add_parser("final")
    pf.add_argument("events")
    pf.add_argument("expect", nargs="+")
    pq = sub.add_parser("queries")
    pq.add_argument("--model", default="default")
    pq.add_argument("--tenant", default="default")
    pq.add_argument("--msgpack", action="store_true")
    pq.add_argument("expect", nargs="+")
    pa = sub.add_parser("answers")
    pa.add_argument("answers")
    pa.add_argument("expect", nargs="+")
    a = p.parse_args()
    if a.cmd == "publish":
        Engine(a).run()
        return 0
    return {"compare": compare, "queries": queries, "answers": answers, "final": final}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
