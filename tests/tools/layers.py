#!/usr/bin/python3
"""Check kvix's layering: lib/ in layers (lib/README.md), each file using only
its own layer and those below it, and no circle of calls or includes between
files. Reads the sources' #include lines and the objects' symbols (nm).

    tests/tools/layers.py ROOT BUILD

Prints each violation on a line of its own and exits 1 if there is any."""
import os
import re
import subprocess
import sys

# The layers, lowest first; a file's layer is its folder. cmd/tools is above
# them all (the tools' machinery), and the tools themselves above that.
LAYERS = ["core", "codec", "index", "snapshot", "net", "tools"]
# Where each installed header's module lives (a new header must be placed here).
PUBLIC = {
    "answer": "core", "buf": "core", "error": "core", "event": "core", "hash": "core",
    "stream": "codec", "tokens": "codec", "wire": "codec",
    "index": "index",
    "snapshot": "snapshot", "snapshot_diff": "snapshot", "snapshot_stats": "snapshot",
    "kvix": "snapshot",  # the umbrella header: every header of libkvix
    "enginesub": "net", "enginepub": "net", "natslog": "net", "peers": "net",
    "service": "net",
}


def layer_of(path):
    parts = path.split(os.sep)
    if parts[:2] == ["include", "kvix"]:
        return PUBLIC.get(parts[2][:-2])
    if parts[0] == "lib":
        return parts[1]
    if parts[:2] == ["cmd", "tools"]:
        return "tools"
    return None


def sources(root):
    out = []
    for top in ("include", "lib", os.path.join("cmd", "tools")):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def main():
    root, build = sys.argv[1], sys.argv[2]
    files = sources(root)
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    bad = []
    rank = {l: i for i, l in enumerate(LAYERS)}
    inc_graph = {}
    for f in files:
        lf = layer_of(f)
        if lf not in rank:
            bad.append(f"{f}: in no layer (lib/README.md lists them; tests/tools/layers.py's PUBLIC places installed headers)")
            continue
        inc_graph[f] = set()
        for n, line in enumerate(open(os.path.join(root, f), encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            name = m.group(1)
            if name.startswith("kvix/"):
                mod = name[5:-2]
                lt = PUBLIC.get(mod)
                if lt is None:
                    bad.append(f"{f}:{n}: includes {name}, whose layer tests/tools/layers.py does not know")
                    continue
                target = "include/" + name
                inc_graph[f].add(target)
            else:
                cands = by_name.get(os.path.basename(name), [])
                if len(cands) != 1:
                    bad.append(f"{f}:{n}: includes {name}: {len(cands)} files of that name")
                    continue
                target = cands[0]
                lt = layer_of(target)
                inc_graph[f].add(target)
            if rank[lt] > rank[lf]:
                bad.append(f"{f}:{n}: includes {name} of layer {lt}, above {lf}")
    # calls: every object's undefined kvix symbols must come from its layer or below
    defs, uses = {}, {}
    objs = []
    for f in files:
        if f.endswith(".c") and not f.startswith("include"):
            o = os.path.join(build, "obj", f[:-2] + ".o")
            if not os.path.exists(o):
                bad.append(f"{o}: not built")
                continue
            objs.append((f, o))
    for f, o in objs:
        nm = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        uses[f] = set()
        for line in nm.splitlines():
            p = line.split()
            if len(p) == 2 and p[0] == "U":
                uses[f].add(p[1])
            elif len(p) == 3 and p[1] in "TDBRV":
                defs.setdefault(p[2], f)
    call_graph = {f: set() for f, _ in objs}
    for f, syms in uses.items():
        for s in sorted(syms):
            g = defs.get(s)
            if g is None or g == f:
                continue
            call_graph[f].add(g)
            if rank[layer_of(g)] > rank[layer_of(f)]:
                bad.append(f"{f}: calls {s} of {g}, layer {layer_of(g)} above {layer_of(f)}")
    for what, graph in (("calls", call_graph), ("includes", inc_graph)):
        for cyc in circles(graph):
            bad.append(f"files whose {what} go round in a circle: " + ", ".join(cyc))
    for b in bad:
        print(b)
    return 1 if bad else 0


def circles(graph):
    """One circle per strongly connected component of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
