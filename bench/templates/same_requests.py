#!/usr/bin/env python3
"""same_requests.py SWEEP.jsonl... - did every process generate the tokens its native twin did?

For sweeps of programs that print "request_digests" (bench/workloads/llama_onebuf.py: each timed
request's own digest; request N is the same in every run of the same options), each process
record of a daemon system is compared with the `ref` record of the same workload, pressure and
process index, request by request over the requests both completed. Prints one line per
process:
  SAME <workload> <pressure> <system> proc <i>: <k> requests
  DIFF <workload> <pressure> <system> proc <i>: request <j> <digest> against <ref digest>
  NONE <workload> <pressure> <system> proc <i>: <why> (no digests, no ref, nothing in common)
and exits 1 when any line is DIFF or NONE (2 on unreadable input), else 0.
"""
import json
import sys


def load(paths):
    recs = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: {e}") from None
    return recs


def compare(recs):
    """The report's lines, in the order the records came."""
    procs = [r for r in recs if "proc" in r and "system" in r]
    ref = {(r.get("workload", "micro"), r.get("pressure"), r["proc"]): r
           for r in procs if r["system"] == "ref"}
    lines = []
    for r in procs:
        if r["system"] == "ref":
            continue
        key = (r.get("workload", "micro"), r.get("pressure"), r["proc"])
        head = f"{key[0]} {key[1]} {r['system']} proc {key[2]}"
        base = ref.get(key)
        mine = r.get("request_digests")
        if base is None:
            lines.append(f"NONE {head}: no ref record")
            continue
        theirs = base.get("request_digests")
        if not mine or not theirs:
            why = r.get("error") or base.get("error") or "no request digests"
            lines.append(f"NONE {head}: {why}")
            continue
        k = min(len(mine), len(theirs))
        bad = next((j for j in range(k) if mine[j] != theirs[j]), None)
        if bad is None:
            lines.append(f"SAME {head}: {k} requests")
        else:
            lines.append(f"DIFF {head}: request {bad + 1} {mine[bad]} against {theirs[bad]}")
    return lines


def main(args):
    if not args or "-h" in args or "--help" in args:
        print(__doc__)
        return 0 if args else 2
    try:
        lines = compare(load(args))
    except (OSError, ValueError) as e:
        print(f"same_requests.py: {e}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 1 if any(not line.startswith("SAME") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
