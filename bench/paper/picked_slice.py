#!/usr/bin/env python3
"""picked_slice.py WORKLOAD PRESSURE OPTS FILE... - the slice an adaptive opt run picked.

A part b of bench/paper.sh runs its systems at the slice part a's adaptive opt picked. This
prints that slice as the run wrote it ("1868ms"): from the last daemon window record of the
files that is workload WORKLOAD's (micro also when the field is absent) at PRESSURE, of system
opt, with a slice "adaptive:<ms>" and with ADAPTIVE_OPTS equal to OPTS ("" for the daemon's
defaults). Exit 1, printing nothing, when no file holds one; files that do not exist are
skipped, and a malformed line is an error (exit 2, naming the file and line)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "micro"))
import summarize_sweep as ss  # noqa: E402


def picked(workload, pressure, opts, paths):
    found = None
    try:
        located = ss.read_located([p for p in paths if os.path.exists(p)])
    except ss.InputError as e:
        print(f"picked_slice.py: {e}", file=sys.stderr)
        sys.exit(2)
    for _, _, r in located:
        s = str(r.get("slice", ""))
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
