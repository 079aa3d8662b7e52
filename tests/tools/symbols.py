#!/usr/bin/env python3
"""Every global a kvix library archive defines is public or private by its name.

symbols.py ROOT BUILD: for each global symbol defined in BUILD/libkvix.a and
BUILD/libkvix-net.a (nm), it must be declared in an installed header
(ROOT/include/kvix/*.h) or carry the private prefix kvix__ (a name shared
between library files, never an embedder's to call). Prints each offender as
ARCHIVE: NAME (OBJECT) and exits 1; exits 0 when there is none.
"""
import glob
import os
import re
import subprocess
import sys

PRIVATE = 'kvix__'
ODR = '__odr_asan.'
ARCHIVES = ('libkvix.a', 'libkvix-net.a')


def public_names(root):
    names = set()
    for h in glob.glob(os.path.join(root, 'include', 'kvix', '*.h')):
        with open(h, encoding='utf-8') as f:
            names.update(re.findall(r'\b[A-Za-z_][A-Za-z0-9_]*\b', f.read()))
    return names


def globals_of(archive):
    out = subprocess.run(['nm', '-g', '--defined-only', archive], check=True,
                         capture_output=True, text=True).stdout
    obj = '?'
    for line in out.splitlines():
        if line.endswith(':'):
            obj = line[:-1]
            continue
        f = line.split()
        if len(f) == 3:
            yield f[2], obj


def main():
    root, build = sys.argv[1], sys.argv[2]
    public = public_names(root)
    bad = []
    for a in ARCHIVES:
        path = os.path.join(build, a)
        if not os.path.exists(path):
            print('%s: no such archive' % path)
            return 2
        for name, obj in globals_of(path):
            # AddressSanitizer adds __odr_asan.NAME beside a global NAME
            name = name[len(ODR):] if name.startswith(ODR) else name
            if name not in public and not name.startswith(PRIVATE):
                bad.append('%s: %s (%s)' % (a, name, obj))
    for b in sorted(set(bad)):
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
