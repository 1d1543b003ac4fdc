#!/usr/bin/env python3
"""check_layers.py - the shim's files form layers: no cycle among them, nothing below reaches up.

Checks (docs/architecture.md, "Layers"):
  1. The include and call graph of shim/ has no cycle among its files. Nodes are files. Edges:
     `#include "shim/X.h"` in a shim file (file -> shim/X.h), and every symbol an object file of
     the shim uses that another shim object defines (shim/a.c -> shim/b.c, from `nm`; the
     preload build's `dlsym` override is the C library's function to everyone else and is left
     out). A header includes only headers, so a cycle is either headers including each other
     or .c files calling each other in a loop; a .c file including the header whose functions
     it defines is its contract, not a dependency on another file.
  2. Nothing in gpu/ includes a shim/ file, and no source of the fake driver is a shim/ file.

Usage: check_layers.py --objdir BUILD/pic/shim [--fake-src "SRC..."]
  (without --fake-src, the fake driver's sources are read from FAKE_SRC in shim/shim.mk)
Exit status 0 when the layers hold; 1 with each cycle or upward arrow on stderr.
"""

import argparse
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
IGNORED_SYMBOLS = {"dlsym"}


def include_edges(files):
    edges = set()
    for f in files:
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            if inc.startswith("shim/") and inc != f:
                edges.add((f, inc, "includes"))
    return edges


def link_edges(objdir):
    defined, used = {}, {}
    for name in sorted(os.listdir(objdir)):
        if not name.endswith(".o"):
            continue
        mod = "shim/" + name[:-2] + ".c"
        out = subprocess.run(["nm", os.path.join(objdir, name)], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used.setdefault(mod, set()).add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRVW":
                defined[parts[2]] = mod
    edges = set()
    for mod, syms in used.items():
        for s in syms:
            if s in IGNORED_SYMBOLS:
                continue
            to = defined.get(s)
            if to and to != mod:
                edges.add((mod, to, "calls " + s))
    return edges


def cycles(edges):
    graph = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
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
            strong(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objdir", required=True)
    ap.add_argument("--fake-src")
    a = ap.parse_args()
    if a.fake_src is None:
        with open("shim/shim.mk", encoding="utf-8") as fh:
            mk = fh.read().replace("\\\n", " ")
        m = re.search(r"^FAKE_SRC\s*:?=(.*)$", mk, re.M)
        if not m:
            print("shim/shim.mk has no FAKE_SRC", file=sys.stderr)
            return 1
        a.fake_src = m.group(1)
    bad = 0
    shim_files = sorted("shim/" + f for f in os.listdir("shim") if f.endswith((".c", ".h")))
    edges = include_edges(shim_files) | link_edges(a.objdir)
    for comp in cycles(edges):
        bad += 1
        members = set(comp)
        why = sorted("%s -> %s (%s)" % e for e in edges if e[0] in members and e[1] in members)
        print("cycle among %s:\n  %s" % (", ".join(comp), "\n  ".join(why)), file=sys.stderr)
    for root, _, names in os.walk("gpu"):
        for n in sorted(names):
            if not n.endswith((".c", ".h", ".cu")):
                continue
            p = os.path.join(root, n)
            with open(p, encoding="utf-8") as fh:
                for inc in INCLUDE.findall(fh.read()):
                    if inc.startswith("shim/"):
                        bad += 1
                        print("%s includes %s: gpu/ is below the shim" % (p, inc), file=sys.stderr)
    for src in a.fake_src.split():
        if src.startswith("shim/"):
            bad += 1
            print("the fake driver is built from %s: gpu/ is below the shim" % src,
                  file=sys.stderr)
    if bad:
        return 1
    print("layers: %d shim files, %d edges, no cycle; gpu/ reaches nothing of shim/" %
          (len({e[0] for e in edges} | {e[1] for e in edges}), len(edges)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
