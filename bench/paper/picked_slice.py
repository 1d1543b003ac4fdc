#!/usr/bin/env python3
"""picked_slice.py WORKLOAD PRESSURE OPTS FILE... - the slice an adaptive opt run picked.

A part b of bench/paper.sh runs its systems at the slice part a's adaptive opt picked. This
prints that slice as the run wrote it ("1868ms"): from the last daemon window record of the
files that is workload WORKLOAD's (micro also when the field is absent) at PRESSURE, of system
opt, with a slice "adaptive:<ms>" and with ADAPTIVE_OPTS equal to OPTS ("" for the daemon's
defaults). Exit 1, printing nothing, when no file holds one; files that do not exist are
skipped, and a malformed line is an error (exit 2, naming the file and line)."""
import json
import sys


def picked(workload, pressure, opts, paths):
    found = None
    for path in paths:
        try:
            f = open(path, encoding="utf-8")
        except FileNotFoundError:
            continue
        with f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except ValueError as e:
                    raise SystemExit(f"picked_slice.py: {path}:{n}: malformed JSON ({e})") from None
                s = str(r.get("slice", "")) if isinstance(r, dict) else ""
                if (r.get("workload", "micro") == workload and r.get("pressure") == pressure
                        and r.get("system") == "opt" and "window_s" in r
                        and s.startswith("adaptive:") and r.get("adaptive_opts", "") == opts):
                    found = s.split(":", 1)[1]
    return found


def main(argv):
    if len(argv) < 4:
        sys.exit("usage: picked_slice.py WORKLOAD PRESSURE OPTS FILE...")
    try:
        pressure = float(argv[1])
    except ValueError:
        sys.exit(f"picked_slice.py: pressure '{argv[1]}' is not a number")
    got = picked(argv[0], pressure, argv[2], argv[3:])
    if got is None:
        return 1
    print(got)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
