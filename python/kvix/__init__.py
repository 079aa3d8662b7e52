"""kvix for Python routers: a client of kvindex's HTTP API (the API of NVIDIA
Dynamo's standalone KV indexer) and the block-hash contract through libkvix.

Standard library only. ``kvix.Client(url)`` queries and manages a running
``kvindex --listen`` (or ``--port``); ``kvix.block_hashes(tokens, block_size)``
hashes a prompt as engines and ``kvhash`` do (it loads libkvix.so on first
use). A router that sends each prompt to the engine holding its longest
cached prefix::

    import os
    import kvix

    index = kvix.Client(os.environ.get("KVIX_URL", "http://127.0.0.1:8090"), timeout=0.5)
    engines = {1: "http://gpu1:8000", 2: "http://gpu2:8000"}  # instance_id -> engine


    def route(tokens, model="llama"):
        # the engine holding the longest cached prefix of the prompt
        try:
            best = index.best_worker(tokens, model)
        except kvix.Unreachable:  # the index is down or slow: route without it
            best = None
        if best is None or best.worker not in engines:
            return engines[min(engines)]
        return engines[best.worker]

    # or hash here and ask by hash (the service then hashes nothing):
    # index.query_by_hash(kvix.block_hashes(tokens, 16).local, "llama").best()

Errors are kvix.KvixError: Unreachable (and its Timeout) when no answer
came, ServiceError (BadRequest, NotFound, Conflict) for an error status with
the service's message, ProtocolError for an answer of the wrong shape.
"""
from .client import (
    BadRequest,
    Client,
    Conflict,
    KvixError,
    Match,
    NotFound,
    Overlap,
    ProtocolError,
    ServiceError,
    Timeout,
    Unreachable,
)
from .hashing import HASH_SEED, BlockHashes, LibraryError, block_hashes, lora_seed

__version__ = "0.1.0"

__all__ = [
    "Client", "Overlap", "Match", "KvixError", "Unreachable", "Timeout", "ServiceError",
    "BadRequest", "NotFound", "Conflict", "ProtocolError",
    "block_hashes", "BlockHashes", "lora_seed", "LibraryError", "HASH_SEED",
]
