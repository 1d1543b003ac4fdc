#!/usr/bin/env python3
"""summarize_sweep.py SWEEP.jsonl... - tables for the section 7.1 sweep (bench/micro/run_sweep.sh).

Normalized throughput of a system at a pressure: the mean over the four processes of its tasks
per second divided by the same process's tasks per second in the `ref` run (all four at once,
no msched, no budget) of that pressure.

Ideal (for `opt` runs): the daemon's own OPT plan moved IN bytes in and OUT bytes out during the
steady-state window of W seconds; moving them at the link's measured speed would take
t = max(IN / 53.5 GB/s, OUT / 55.1 GB/s, (IN + OUT) / 93.4 GB/s) (populate, evict and swap rates of
tests/gpu/migrate_bench.c, bench/results/gpu/2026-12-02-engine-migrate_bench.jsonl), so the ideal
normalized throughput is 1 - t / W: switching costs nothing but OPT's bytes at the link's speed.
Where the same pressure also has a `slice` run (time slicing under a budget above the total: no
memory moves), a stricter ideal is that run's throughput times (1 - t / W): time slicing as it
is, plus OPT's bytes at the link's speed.
Prints a Markdown table (and --json: one JSON object per pressure). --workload NAME selects the
records of one workload (default micro; records without the field are micro)."""
import json
import sys

POP, EVI, SWAP = 53.5e9, 55.1e9, 93.4e9
PAPER = {100: 99.41, 150: 73.0, 200: 60.0, 300: 43.0}  # section 7.1, approximate read-offs


def main(paths):
    as_json = "--json" in paths
    workload = "micro"
    if "--workload" in paths:
        k = paths.index("--workload")
        workload = paths[k + 1]
        del paths[k:k + 2]
    paths = [p for p in paths if p != "--json"]
    procs, wins = {}, {}
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            if r.get("workload", "micro") != workload:
                continue
            key = (r["pressure"], r["system"])
            if "proc" in r:
                procs.setdefault(key, {})[r["proc"]] = r
            else:
                wins[key] = r
    paper = PAPER if workload == "micro" else {}
    pressures = sorted({k[0] for k in procs})
    systems = [s for s in ("slice", "opt", "lru", "whole", "demand") if any(k[1] == s for k in procs)]
    rows = []
    for p in pressures:
        ref = procs.get((p, "ref"), {})
        row = {"pressure": p}
        for s in systems:
            got = procs.get((p, s))
            if not got or not ref:
                continue
            ratios = []
            for i, r in got.items():
                base = ref.get(i, {}).get("tasks_per_s")
                if r.get("tasks_per_s") and base:
                    ratios.append(r["tasks_per_s"] / base)
                else:
                    ratios.append(0.0)  # failed or missing: counts as nothing done
            row[s] = 100 * sum(ratios) / 4
            w = wins.get((p, s), {})
            d = w.get("daemon", {})
            if d.get("msched_switches_total"):
                row[s + "_switch_ms"] = 1000 * d["msched_switch_seconds_total"] / d["msched_switches_total"]
            if s == "opt" and w:
                i_b, o_b = d.get("msched_populated_bytes_total", 0), d.get("msched_evicted_bytes_total", 0)
                t = max(i_b / POP, o_b / EVI, (i_b + o_b) / SWAP)
                row["ideal"] = 100 * max(0.0, 1 - t / w["window_s"])
                row["opt_gib_moved"] = (i_b + o_b) / 2**30
                row["link_s"] = t
                row["window_s"] = w["window_s"]
        rows.append(row)
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    for r in rows:
        if r.get("slice") is not None and r.get("ideal") is not None:
            r["ideal_slice"] = r["slice"] * r["ideal"] / 100
    head = ["pressure"] + [s for s in systems] + ["Ideal", "opt / Ideal", "Ideal x slice",
                                                  "opt / (Ideal x slice)", "paper", "opt / whole",
                                                  "opt / demand", "opt switch (ms)"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for r in rows:
        f = lambda v: "-" if v is None else f"{v:.1f}"
        cells = [f"{r['pressure']} %"] + [f(r.get(s)) for s in systems]
        ideal, opt = r.get("ideal"), r.get("opt")
        cells.append(f(ideal))
        cells.append(f"{100 * opt / ideal:.0f} %" if ideal and opt is not None else "-")
        isl = r.get("ideal_slice")
        cells.append(f(isl))
        cells.append(f"{100 * opt / isl:.0f} %" if isl and opt is not None else "-")
        cells.append(f(paper.get(r["pressure"])))
        for b in ("whole", "demand"):
            v = r.get(b)
            cells.append(f"{opt / v:.1f}x" if v and opt is not None else "-")
        cells.append(f(r.get("opt_switch_ms")))
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
