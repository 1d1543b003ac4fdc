#!/usr/bin/env python3
"""callgrind_launch.py FILE LABEL [TOP] - libmsched's instructions per kernel launch in one
callgrind profile of tests/shim/engine_stress's `launches` mode (bench/shim/launch_instr_fake.sh).

The launch count is the number of calls of libmsched's cuLaunchKernel hook; its own cost is the
hook's inclusive instructions less the fake driver's cuLaunchKernel's (the launch itself, the
same with or without libmsched). Prints one line:
  LABEL: N launches, I instructions per launch in libmsched (hook H, driver D)
and, with TOP, writes the functions outside the program and the fake driver by self cost per
launch (libmsched's own, and the C library's, which include the fake
driver's lock calls) to that file.
"""
import re
import subprocess
import sys

LINE = re.compile(r"^\s*([\d,]+)\s+\([\s\d.]+%\)\s+(\*|<|>)?\s*(\S.*?)(?:\s+\((\d[\d,]*)x\))?\s*(\[.*\])?\s*$")


def annotate(path, *args):
    return subprocess.run(["callgrind_annotate", *args, path], check=True, capture_output=True,
                          text=True).stdout


def num(s):
    return int(s.replace(",", ""))


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    path, label = sys.argv[1], sys.argv[2]
    hook = driver = None
    for line in annotate(path, "--inclusive=yes").splitlines():
        m = LINE.match(line)
        if not m or not m.group(5):
            continue
        name, obj = m.group(3), m.group(5)
        if name.endswith("hook_launch.c:cuLaunchKernel") and "/msched/" in obj:
            hook = num(m.group(1))
        elif name.endswith(":cuLaunchKernel") and "/fakecuda/" in obj:
            driver = num(m.group(1))
    calls = None
    tree = annotate(path, "--inclusive=yes", "--tree=caller").splitlines()
    for i, line in enumerate(tree):
        m = LINE.match(line)
        if m and m.group(2) == "*" and m.group(3).endswith("hook_launch.c:cuLaunchKernel"):
            calls = 0
            for prev in reversed(tree[:i]):
                p = LINE.match(prev)
                if not p or p.group(2) != "<":
                    break
                calls += num(p.group(4) or "0")
            break
    if hook is None or driver is None or not calls:
        print(f"{label}: no launches found in {path}", file=sys.stderr)
        return 1
    per = (hook - driver) / calls
    print(f"{label}: {calls} launches, {per:.0f} instructions per launch in libmsched "
          f"(hook {hook / calls:.0f}, driver {driver / calls:.0f})")
    if len(sys.argv) == 4:
        rows = []
        for line in annotate(path, "--inclusive=no").splitlines():
            m = LINE.match(line)
            if not m or not m.group(5) or "fakecuda" in m.group(3) or "fakecuda" in m.group(5):
                continue
            if "engine_stress" in m.group(5) or "TOTALS" in line:
                continue
            rows.append((num(m.group(1)) / calls, m.group(3)))
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            f.write(f"# {label}: self instructions per launch, outside the program and the fake "
                    f"driver ({calls} launches)\n")
            for per_fn, name in sorted(rows, reverse=True)[:40]:
                f.write(f"{per_fn:8.1f}  {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
