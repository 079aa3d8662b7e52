#!/usr/bin/python3
"""Print the N-th .EX/.EE block of a man page's EXAMPLES section as plain text
(roff escapes undone), so that a test can build and run the code a page shows
and compare what it prints with the page's next block.

    man_blocks.py PAGE N       (N from 1)
"""
import re
import sys

ESCAPES = {r"\e": "\\", r"\-": "-", r"\(aq": "'", r"\(dq": '"', r"\(rs": "\\", r"\&": "",
           r"\(ga": "`", r"\(ti": "~", r"\(ha": "^"}


def unescape(line):
    out, i = [], 0
    while i < len(line):
        for k, v in ESCAPES.items():
            if line.startswith(k, i):
                out.append(v)
                i += len(k)
                break
        else:
            if line[i] == "\\":
                raise SystemExit("man_blocks.py: unknown escape at %r" % line[i:i + 6])
            out.append(line[i])
            i += 1
    return "".join(out)


def main():
    page, n = sys.argv[1], int(sys.argv[2])
    text = open(page, encoding="utf-8").read()
    m = re.search(r"^\.SH EXAMPLES?\n(.*?)(?=^\.SH |\Z)", text, re.M | re.S)
    if not m:
        raise SystemExit("man_blocks.py: %s has no EXAMPLES section" % page)
    blocks = re.findall(r"^\.EX\n(.*?)^\.EE$", m.group(1), re.M | re.S)
    if not 1 <= n <= len(blocks):
        raise SystemExit("man_blocks.py: %s has %d example blocks" % (page, len(blocks)))
    for line in blocks[n - 1].splitlines():
        print(unescape(line))


if __name__ == "__main__":
    main()
