#!/usr/bin/python3
"""A /dump body (Dynamo's RouterEvents, as kvindex --listen answers GET /dump)
of N stored events of 4 blocks, over 8 workers of one partition (m:default,
block size 16), chains of 50 events: for peer recovery tests.

    make_dump.py N FILE"""
import sys


def main():
    n, path = int(sys.argv[1]), sys.argv[2]
    with open(path, "w") as out:
        out.write('{"m:default":{"block_size":16,"events":[')
        first, h = True, 1
        for w in range(1, 9):
            parent = None
            for i in range(n // 8):
                blocks = []
                for _ in range(4):
                    blocks.append('{"block_hash":%d,"tokens_hash":%d}' % (h + 10**12, h))
                    h += 1
                ph = "null" if parent is None or i % 50 == 0 else str(parent)
                out.write(("" if first else ",") +
                          '{"worker_id":%d,"storage_tier":"device","event":{"event_id":%d,'
                          '"dp_rank":0,"data":{"stored":{"parent_hash":%s,"blocks":[%s]}}}}'
                          % (w, i, ph, ",".join(blocks)))
                parent = h - 1 + 10**12
                first = False
        out.write("]}}")


if __name__ == "__main__":
    main()
