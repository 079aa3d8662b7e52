"""Block hashes of token lists, through libkvix (ctypes): the hash contract of
kvix and NVIDIA Dynamo's KV router, byte-equal to what ``kvhash`` prints.

The library is loaded on first use, by its soname (``LIBRARY``); a program
that only talks HTTP never needs it.
"""
import array
import ctypes
import os

__all__ = ["BlockHashes", "block_hashes", "lora_seed", "LibraryError", "HASH_SEED"]

# The shared library that holds the hash functions, by soname: the one place
# to change when the library is split or its soname moves.
LIBRARY = "libkvix.so.0"
# Where `make install` put the library (written there by the install): tried
# when the dynamic linker does not find LIBRARY by itself (a prefix such as
# /usr/local/lib before ldconfig has run).
_INSTALL_LIBDIR = None

HASH_SEED = 1337  # the contract's seed of the local hash without LoRA
BLOCK_SIZE_MAX = 65536
NAME_MAX = 255  # bytes of a LoRA name (UTF-8)
PSH_POS_LIMIT = 1 << 31
PLH_POS_LIMIT = 1 << 24
_U64 = (1 << 64) - 1


class LibraryError(OSError):
    """libkvix could not be loaded (not installed, or not where the linker looks)."""


class _U128(ctypes.Structure):
    _fields_ = [("hi", ctypes.c_uint64), ("lo", ctypes.c_uint64)]


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    names = [os.environ["KVIX_LIBRARY"]] if os.environ.get("KVIX_LIBRARY") else [LIBRARY]
    if _INSTALL_LIBDIR and not os.environ.get("KVIX_LIBRARY"):
        names.append(os.path.join(_INSTALL_LIBDIR, LIBRARY))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    else:
        raise LibraryError(
            "kvix: cannot load libkvix: tried %s; install it (make install) or set "
            "KVIX_LIBRARY to its path" % "; ".join(tried)
        )
    u64, p64 = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)
    lib.kvix_hash_lora_seed.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.kvix_hash_lora_seed.restype = u64
    lib.kvix_hash_blocks.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, u64, p64, p64,
    ]
    lib.kvix_hash_blocks.restype = ctypes.c_size_t
    for f in (lib.kvix_hash_psh, lib.kvix_hash_plh):
        f.argtypes = [u64, u64, u64, ctypes.POINTER(_U128), ctypes.c_void_p]
        f.restype = ctypes.c_int
    _lib = lib
    return lib


def lora_seed(name=None):
    """Seed of the local hash for a LoRA adapter name (None or "": no LoRA, 1337)."""
    if not name:
        return HASH_SEED
    b = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    if len(b) > NAME_MAX:
        raise ValueError("kvix: LoRA name longer than %d bytes" % NAME_MAX)
    return _load().kvix_hash_lora_seed(b, len(b))


def _hex(v, digits):
    return "%0*x" % (digits, v)


class BlockHashes:
    """The hashes of a token list's whole blocks, in order (ints): ``local``
    (content), ``seq`` (rolling sequence: the engine's block hash), and with
    positional=True ``psh`` and ``plh`` (128-bit); ``partial`` is the count
    of trailing tokens that make no whole block."""

    __slots__ = ("local", "seq", "psh", "plh", "partial")

    def __init__(self, local, seq, psh, plh, partial):
        self.local, self.seq, self.psh, self.plh, self.partial = local, seq, psh, plh, partial

    def __repr__(self):
        return "BlockHashes(local=%r, seq=%r, partial=%d)" % (self.local, self.seq, self.partial)

    def __eq__(self, other):
        return isinstance(other, BlockHashes) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    def to_json(self, decimal=False):
        """The line ``kvhash -b N [--positional] [--decimal]`` prints for these
        tokens (without its newline), byte for byte."""

        def arr(vals, digits):
            if decimal:
                return "[" + ",".join("%d" % v for v in vals) + "]"
            return "[" + ",".join('"%s"' % _hex(v, digits) for v in vals) + "]"

        parts = ['"local":' + arr(self.local, 16), '"seq":' + arr(self.seq, 16)]
        if self.psh is not None:
            parts += ['"psh":' + arr(self.psh, 32), '"plh":' + arr(self.plh, 32)]
        if self.partial:
            parts.append('"partial":%d' % self.partial)
        return "{" + ",".join(parts) + "}"


def _tokens(tokens):
    if isinstance(tokens, array.array) and tokens.typecode in "IL" and tokens.itemsize == 4:
        return tokens
    a = array.array("I")
    if a.itemsize != 4:  # pragma: no cover - every Linux ABI kvix runs on
        a = array.array("L")
    try:
        a.extend(tokens)
    except (OverflowError, TypeError) as e:
        bad = next((t for t in tokens if not isinstance(t, int) or not 0 <= t <= 0xFFFFFFFF), None)
        raise ValueError(
            "kvix: token %r is not an integer from 0 to 4294967295 (%s)" % (bad, e)
        ) from None
    return a


def block_hashes(tokens, block_size, lora=None, positional=False):
    """Hash the whole blocks of ``tokens`` (ints from 0 to 2^32-1) with
    ``block_size`` tokens each (1 to 65536), seeded by the LoRA adapter name
    ``lora`` (None: none). A trailing partial block is not hashed (its size is
    ``partial``). With positional=True, also the positional sequence and
    lineage hashes. Returns a BlockHashes; raises ValueError on a bad
    argument and LibraryError when libkvix cannot be loaded."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or not (
        1 <= block_size <= BLOCK_SIZE_MAX
    ):
        raise ValueError("kvix: block size %r is not an integer from 1 to %d" % (block_size, BLOCK_SIZE_MAX))
    toks = _tokens(tokens)
    lib = _load()
    seed = lora_seed(lora)
    n = len(toks)
    nb = n // block_size
    local = (ctypes.c_uint64 * max(nb, 1))()
    seq = (ctypes.c_uint64 * max(nb, 1))()
    addr = toks.buffer_info()[0] if n else None
    got = lib.kvix_hash_blocks(addr, n, block_size, seed, local, seq)
    assert got == nb
    psh = plh = None
    if positional:
        if nb > PLH_POS_LIMIT:
            raise ValueError(
                "kvix: position %d too deep for a positional lineage hash (limit %d)"
                % (PLH_POS_LIMIT, PLH_POS_LIMIT)
            )
        psh, plh = [], []
        out = _U128()
        for i in range(nb):
            if lib.kvix_hash_psh(seq[i], i, local[i], ctypes.byref(out), None) < 0:
                raise ValueError("kvix: position %d too deep for a positional sequence hash" % i)
            psh.append(out.hi << 64 | out.lo)
            if lib.kvix_hash_plh(seq[i], seq[i - 1] if i else 0, i, ctypes.byref(out), None) < 0:
                raise ValueError("kvix: position %d too deep for a positional lineage hash" % i)
            plh.append(out.hi << 64 | out.lo)
    return BlockHashes(list(local[:nb]), list(seq[:nb]), psh, plh, n % block_size)
