#!/usr/bin/env python3
"""summarize.py [--strict] DIR PROGRAM... - one JSON line per program from its accuracy probe
output, or with --strict from its strict coverage run (below).

DIR/<program>.jsonl holds one object per measured launch (shim/accuracy.c) and, when the
program exited normally, a summary object last. The totals are recomputed from the launch lines
(a program killed by its time limit has no summary); "late", "thrashing", "remote_maps",
"dropped" (records CUPTI dropped, -1: it could not tell) and "error" come from the summary.
"outside_bytes": bytes reported during the measurements but stamped outside their windows;
"evicted_bytes": what the driver reported moving to the host for the evictions before them.

Per program: launches measured, the share whose predicted chunks covered every byte the
driver reported faulting or migrating for them, the unbounded ones (reach unknown: the whole footprint predicted), the predicted
bytes, the touched bytes between the two bounds (faulted 4 KiB pages; faults plus migrated
bytes), and the over-prediction: predicted / touched, for both bounds. Where the launch lines
carry the eviction before each launch, also what each launch left resident on the GPU
(resident(), below): a measure of what was touched that does not rest on the reports.

--strict (STRICT=1 bench/accuracy/run_accuracy.sh): DIR/<program>.log (the program's output
with msched's verbose summary) and DIR/<program>.rc. Per program: "launches" (every one ran with
only its predicted memory mapped; from the shim's summary line, absent when the program was
killed before printing it), "evicted_chunks" (chunks strict mode evicted outside the
predictions), "result" (the program printed its result line), "fault" (an illegal-address
error appeared: a reach past the prediction), "error" (the last error line, if any), "rc" and
"timed_out" (stopped at its time limit: rc 124, not a failure by itself)."""
import re
import json
import os
import sys

GROUP = {"vecadd": "micro", "matmul": "micro", "hotspot": "A", "dwt2d": "A", "cfd": "A",
         "nn": "A", "resnet152": "B", "vgg19": "B", "inception_v3": "B",
         "densenet201": "B", "llama": "D"}


def summarize(path, program):
    n = covered = unbounded = pred = lo = hi = miss = outside = evicted = 0
    summary = {}
    kernels_missed = set()
    seq = []  # (pred, evicted) per launch, in order
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut by a killed process
            if r.get("summary"):
                summary = r
                continue
            n += 1
            covered += bool(r["covered"])
            unbounded += bool(r["unbounded"])
            pred += r["pred"]
            lo += r["touch_lo"]
            hi += r["touch_hi"]
            outside += r.get("before", 0) + r.get("after", 0)
            evicted += r.get("evicted", 0)
            miss += r["miss"]
            seq.append((r["pred"], r.get("evicted")))
            if not r["covered"]:
                kernels_missed.add(r["kernel"])
    if n and not lo and not hi:
        # Every launch touches memory: no report at all means the driver delivered none (the
        # probe could not see, and it could not send anything back to the host either).
        return {"workload": "accuracy", "group": GROUP.get(program, "?"), "program": program,
                "launches": 0, "error": f"no fault or migration report in {n} launches: "
                "nothing measured", "complete": bool(summary)}
    out = {"workload": "accuracy", "group": GROUP.get(program, "?"), "program": program, "launches": n,
           "covered": covered, "covered_pct": round(100.0 * covered / n, 2) if n else None,
           "unbounded": unbounded, "pred_bytes": pred, "touch_lo_bytes": lo,
           "touch_hi_bytes": hi, "miss_bytes": miss,
           "over_lo": round(pred / lo, 2) if lo else None,
           "over_hi": round(pred / hi, 2) if hi else None,
           "missed_kernels": sorted(kernels_missed)[:5], "outside_bytes": outside,
           "evicted_bytes": evicted, **resident(seq, summary),
           "late": summary.get("late"), "thrashing": summary.get("thrashing"),
           "remote_maps": summary.get("remote_maps"), "dropped": summary.get("dropped"),
           "error": summary.get("error"),
           "complete": bool(summary)}
    return out


def resident(seq, summary):
    """What each launch left on the GPU, from the eviction before the next one: the probe sends
    every region back before every measured launch, so that eviction moves to the host what the
    GPU held after the launch before it: what that launch brought in (faulted, migrated or
    prefetched by the driver, whether or not the driver reported those moves), plus anything
    copies or memsets between the two put there. An upper bound of what the launch touched, at
    the driver's migration granularity, independent of CUPTI's fault and migration reports.
    Over the launches followed by another: resident_bytes (the next evictions), resident_pred_bytes
    (their predictions), over_resident (the one over the other), beyond (launches that left more
    resident than predicted) and beyond_max_bytes (the largest such excess). Empty when the
    launch lines carry no eviction or the probe could not watch device-to-host moves."""
    if len(seq) < 2 or any(e is None for _, e in seq) or summary.get("dtoh_watched") is False:
        return {}
    res = sum(e for _, e in seq[1:])
    pred = sum(p for p, _ in seq[:-1])
    excess = [e - p for (p, _), (_, e) in zip(seq, seq[1:]) if e > p]
    return {"resident_bytes": res, "resident_pred_bytes": pred,
            "over_resident": round(pred / res, 2) if res else None,
            "beyond": len(excess), "beyond_max_bytes": max(excess, default=0)}


def summarize_strict(d, program):
    out = {"workload": "strict", "group": GROUP.get(program, "?"), "program": program}
    try:
        text = open(os.path.join(d, program + ".log"), errors="replace").read()
    except OSError:
        return dict(out, launches=0, error="no output")
    try:
        rc = int(open(os.path.join(d, program + ".rc")).read().strip())
    except (OSError, ValueError):
        rc = None
    launches = evicted = None
    result, fault, error = False, False, ""
    for line in text.splitlines():
        m = re.search(r"summary inits=\d+ launches=(\d+) ", line)
        if m:
            launches = int(m.group(1))
        m = re.search(r"strict: (\d+) chunks evicted", line)
        if m:
            evicted = int(m.group(1))
        if line.startswith("{"):
            try:
                r = json.loads(line)
                result = result or ("program" in r and "error" not in r)
            except ValueError:
                pass
        if re.search(r"illegal (memory access|address)|ILLEGAL_ADDRESS", line, re.I):
            fault = True
        if re.match(r"(\w+Error|msched\[\d+\]: .*(error|refused|failed))", line) or \
                re.search(r"illegal (memory access|address)", line, re.I):
            error = line.strip()[:200]
    return dict(out, rc=rc, timed_out=rc == 124, launches=launches, evicted_chunks=evicted,
                result=result, fault=fault, error=error)


def main():
    strict = len(sys.argv) > 1 and sys.argv[1] == "--strict"
    args = sys.argv[2:] if strict else sys.argv[1:]
    if len(args) < 2:
        sys.exit("usage: summarize.py [--strict] DIR PROGRAM...")
    d = args[0]
    for p in args[1:]:
        if strict:
            print(json.dumps(summarize_strict(d, p)))
            continue
        path = os.path.join(d, p + ".jsonl")
        if not os.path.exists(path):
            print(json.dumps({"workload": "accuracy", "group": GROUP.get(p, "?"), "program": p,
                              "launches": 0,
                              "error": "no output"}))
            continue
        print(json.dumps(summarize(path, p)))


if __name__ == "__main__":
    main()
