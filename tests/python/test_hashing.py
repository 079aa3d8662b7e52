"""kvix.block_hashes (libkvix through ctypes) against kvhash: byte-equal lines
for random prompts, block sizes, LoRA names, hex and decimal, with and
without the positional hashes; bad arguments refused with ValueError."""
import json
import os
import random
import subprocess
import unittest

import kvix
import kvix.hashing


def kvhash(lines, *args):
    r = subprocess.run(["kvhash"] + list(args), input="".join(l + "\n" for l in lines),
                       capture_output=True, text=True, check=True)
    return r.stdout.splitlines()


def cases(seed, n):
    rng = random.Random(seed)
    loras = [None, "adapter-a", "ünïcødé-lora", "x" * 255]
    out = []
    for i in range(n):
        bs = rng.choice([1, 2, 3, 4, 16, 64, 512])
        ntok = rng.choice([0, 1, bs - 1, bs, bs + 1, 3 * bs, rng.randrange(0, 40 * bs + 1)])
        top = rng.choice([10, 1 << 16, (1 << 32) - 1])
        toks = [rng.randint(0, top) for _ in range(ntok)]
        if toks and i % 7 == 0:
            toks[-1] = (1 << 32) - 1
        out.append((toks, bs, loras[i % len(loras)]))
    return out


class HashesEqualKvhash(unittest.TestCase):
    def check(self, flags, positional, decimal):
        cs = cases(1234 + 7 * positional + decimal, 300)
        by_bs = {}
        for i, (toks, bs, lora) in enumerate(cs):
            by_bs.setdefault(bs, []).append(i)
        for bs, idx in by_bs.items():
            lines = []
            for i in idx:
                toks, _, lora = cs[i]
                obj = {"tokens": toks}
                if lora:
                    obj["lora"] = lora
                lines.append(json.dumps(obj))
            want = kvhash(lines, "-b", str(bs), *flags)
            self.assertEqual(len(want), len(idx))
            for i, w in zip(idx, want):
                toks, _, lora = cs[i]
                got = kvix.block_hashes(toks, bs, lora=lora, positional=positional)
                self.assertEqual(got.to_json(decimal=decimal), w,
                                 "bs %d lora %r tokens %r" % (bs, lora, toks[:8]))

    def test_hex(self):
        self.check([], False, False)

    def test_decimal(self):
        self.check(["--decimal"], False, True)

    def test_positional_hex(self):
        self.check(["--positional"], True, False)

    def test_positional_decimal(self):
        self.check(["--positional", "--decimal"], True, True)

    def test_readme_values(self):
        # README: kvhash -b 4 of 1..9, and of 0..3 with --lora adapter-a
        h = kvix.block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
        self.assertEqual(h.local, [0xcb38e4d7fb2dca5c, 0xe8d3ec39b907b74c])
        self.assertEqual(h.seq, [0xcb38e4d7fb2dca5c, 0x44a2b2379d6d3c3d])
        self.assertEqual(h.partial, 1)
        self.assertEqual(kvix.block_hashes([0, 1, 2, 3], 4, lora="adapter-a").local,
                         [6665157333201000639])
        self.assertEqual(kvix.lora_seed(None), kvix.HASH_SEED)
        self.assertEqual(kvix.lora_seed(""), 1337)

    def test_tokens_as_array_and_tuple(self):
        import array
        toks = list(range(100))
        want = kvix.block_hashes(toks, 16)
        self.assertEqual(kvix.block_hashes(tuple(toks), 16), want)
        self.assertEqual(kvix.block_hashes(array.array("I", toks), 16), want)
        self.assertEqual(kvix.block_hashes(iter(toks), 16), want)


class BadArguments(unittest.TestCase):
    def test_tokens_out_of_range(self):
        for bad in ([1, -1], [1 << 32], [1.5], ["7"], [None]):
            with self.assertRaisesRegex(ValueError, r"not an integer from 0 to 4294967295"):
                kvix.block_hashes(bad, 4)

    def test_block_size(self):
        for bs in (0, -1, 65537, 1.0, True, "16", None):
            with self.assertRaisesRegex(ValueError, r"block size .* from 1 to 65536"):
                kvix.block_hashes([1, 2, 3, 4], bs)

    def test_lora_too_long(self):
        with self.assertRaisesRegex(ValueError, r"LoRA name longer than 255 bytes"):
            kvix.block_hashes([1], 1, lora="é" * 128)

    def test_library_missing(self):
        saved = kvix.hashing._lib
        os.environ["KVIX_LIBRARY"] = "/nonexistent/libkvix.so.0"
        kvix.hashing._lib = None
        try:
            with self.assertRaisesRegex(kvix.LibraryError,
                                        r"cannot load libkvix: tried /nonexistent/libkvix.so.0"):
                kvix.block_hashes([1], 1)
        finally:
            del os.environ["KVIX_LIBRARY"]
            kvix.hashing._lib = saved

    def test_soname_is_the_installed_one(self):
        # python.t reads the SONAME of the installed library that holds
        # kvix_hash_blocks (readelf): the name the package loads is that one
        self.assertEqual(kvix.hashing.LIBRARY, os.environ["KVIX_EXPECT_SONAME"])
