#!/usr/bin/env python3
"""summarize_sweep.py SWEEP.jsonl... - tables for the section 7.1 sweep (bench/micro/run_sweep.sh).

Normalized throughput of a system at a pressure: the mean over the four processes (three for
workload L) of its tasks per second divided by the same process's tasks per second in the `ref`
run (all of them at once, no msched, no budget) of that pressure. Per daemon system the bytes
each switch moved (populated plus evicted over the window's switches) are <system>_gib_per_switch;
with an `alloc` run (allocation granularity) the table sets opt's beside it.

Ideal (for `opt` runs): the daemon's own OPT plan moved IN bytes in and OUT bytes out during the
steady-state window of W seconds; moving them at the link's measured speed would take
t = max(IN / 53.5 GB/s, OUT / 55.1 GB/s, (IN + OUT) / 93.4 GB/s) (populate, evict and swap rates of
tests/gpu/migrate_bench.c, bench/results/gpu/2026-12-02-engine-migrate_bench.jsonl), so the ideal
normalized throughput is 1 - t / W: switching costs nothing but OPT's bytes at the link's speed.
Where the same pressure also has a `slice` run (time slicing under a budget above the total: no
memory moves), a stricter ideal is that run's throughput times (1 - t / W): time slicing as it
is, plus OPT's bytes at the link's speed.
Slice sets: runs of one pressure measured at different slice lengths are not compared with each
other. Each run (a file's records of one workload and pressure) belongs to the set its daemon
windows' "slice" names: "adaptive" when one of them is "adaptive:<ms>" (the opt run of
SLICE=adaptive; "adaptive (OPTS)" when that window records ADAPTIVE_OPTS, the daemon options
it ran with, so a policy run with options never mixes with the default's) or when its slice is
the one such an adaptive opt run picked at that workload and pressure, written the same way, in
a file without `ref` or `opt` of its own (a part b run later at "1700ms"; it joins that opt
run's set), else the slice as written ("1s"); "" when no window says. A row is one (pressure,
set); its `ref` is the set's own, else one of the same pressure (the unknown set's, then the
adaptive set's, then the first by name).
Prints a Markdown table (and --json: one JSON object per row). --workload NAME selects the
records of one workload (default micro; records without the field are micro).

Design: the computation is a library for bench/paper/make_page.py (which builds the evaluation
page from the same records) and this file's command line is a thin layer over it:
  read_records(paths)          the JSON lines of the files (read_located: with file and line); a
                               malformed line is an InputError naming the file and line
  slice_sets(located)          tags each sweep record with its run's slice set ("_set")
  group(records, workload)     per ((pressure, set), system): the process records by process
                               index, and the daemon's window record (the last of each wins)
  systems_of(records, workload) the daemon systems measured, in table order
  link_seconds(in, out)        the time the link needs for those bytes (the Ideal's t)
  compute_rows(records, workload) one dict per (pressure, set), ordered by pressure with the
                               adaptive set first: pressure, set, slice_label, normalized
                               throughput per system, <system>_switch_ms, and for opt: ideal,
                               opt_gib_moved, link_s, window_s, then ideal_slice where slice was
                               measured
  preferred(rows)              per pressure the row the targets rate: the adaptive set's when it
                               has opt, else the first with opt
A failed or missing process counts as nothing done (a ratio of 0 over the four)."""
import json
import sys

POP, EVI, SWAP = 53.5e9, 55.1e9, 93.4e9
PAPER = {100: 99.41, 150: 73.0, 200: 60.0, 300: 43.0}  # section 7.1, approximate read-offs
SYSTEMS = ("slice", "opt", "alloc", "lru", "whole", "demand")  # the daemon systems, in table order
NPROCS = 4  # processes per sweep run (nprocs: per workload)


def nprocs(workload):
    """Processes per run of the workload: three Llamas for L, else four (run_sweep.sh)."""
    return 3 if workload == "L" else NPROCS


class InputError(Exception):
    """Bad input: the message names the file and line."""


def read_located(paths):
    """(path, line number, object) for every JSON line of the files, in order; blank lines are
    skipped."""
    out = []
    for path in paths:
        try:
            f = open(path, encoding="utf-8")
        except OSError as e:
            raise InputError(f"{path}: {e.strerror}") from None
        with f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except ValueError as e:
                    raise InputError(f"{path}:{n}: malformed JSON ({e})") from None
                if not isinstance(r, dict):
                    raise InputError(f"{path}:{n}: expected a JSON object")
                out.append((path, n, r))
    return out


def read_records(paths):
    """All JSON objects of the files, in order."""
    return [r for _, _, r in read_located(paths)]


def _ms(slice_text):
    """A slice as written ("1659ms", "2s") in milliseconds, or None."""
    t = str(slice_text)
    try:
        if t.endswith("ms"):
            return float(t[:-2])
        if t.endswith("s"):
            return 1000 * float(t[:-1])
    except ValueError:
        pass
    return None


def slice_sets(located):
    """Tag every sweep record (one with a pressure and a system) of (path, line, record) triples
    with "_set", its run's slice set (see the module's docstring)."""
    runs, picked, whole = {}, {}, set()
    for path, _, r in located:
        if "pressure" not in r or "system" not in r:
            continue
        key = (path, r.get("workload", "micro"), r["pressure"])
        runs.setdefault(key, [])
        if r["system"] in ("ref", "opt"):
            whole.add(key)  # a run of its own, not a part b
        if "proc" not in r and "slice" in r:
            t = str(r["slice"])
            st = adaptive_set(r)
            runs[key].append((t, st))
            if st:
                picked.setdefault(key[1:], {})[t.split(":", 1)[1]] = st
    sets = {}
    for key, slices in runs.items():
        mine = picked.get(key[1:], {}) if key not in whole else {}
        own = [st for _, st in slices if st] + [mine[t] for t, _ in slices if t in mine]
        if own:
            sets[key] = own[0]
        else:
            sets[key] = min(t for t, _ in slices) if slices else ""
    for path, _, r in located:
        if "pressure" in r and "system" in r:
            r["_set"] = sets[(path, r.get("workload", "micro"), r["pressure"])]


def adaptive_set(window):
    """The set an adaptive opt run's window record opens: "adaptive", or "adaptive (OPTS)" when
    it ran with ADAPTIVE_OPTS; None for any other record."""
    if not str(window.get("slice", "")).startswith("adaptive:"):
        return None
    opts = window.get("adaptive_opts")
    return f"adaptive ({opts})" if opts else "adaptive"


def is_adaptive(st):
    """Whether a slice set is an adaptive one (with or without options)."""
    return st == "adaptive" or st.startswith("adaptive (")


def row_order(pk):
    """Rows by pressure; within one, the adaptive set first, then adaptive ones with options,
    and the unknown set last."""
    p, st = pk
    return (p, 0 if st == "adaptive" else 1 if is_adaptive(st) else 3 if st == "" else 2, st)


def group(records, workload="micro"):
    """(procs, wins): procs[(pk, system)][proc] = record, wins[(pk, system)] = record, where pk
    is (pressure, slice set)."""
    procs, wins = {}, {}
    for r in records:
        if r.get("workload", "micro") != workload:
            continue
        key = ((r["pressure"], r.get("_set", "")), r["system"])
        if "proc" in r:
            procs.setdefault(key, {})[r["proc"]] = r
        else:
            wins[key] = r
    return procs, wins


def systems_of(records, workload="micro"):
    procs, _ = group(records, workload)
    return [s for s in SYSTEMS if any(k[1] == s for k in procs)]


def link_seconds(in_bytes, out_bytes):
    """Time to move the bytes at the link's measured populate, evict and swap rates."""
    return max(in_bytes / POP, out_bytes / EVI, (in_bytes + out_bytes) / SWAP)


def set_name(st):
    """A slice set as a reader says it: "adaptive", "adaptive (--set switch_frac=5)", "1 s", ""
    (unknown)."""
    ms = _ms(st) if not is_adaptive(st) else None
    return f"{ms / 1000:.3g} s" if ms is not None else st


def slice_label(pk, wins):
    """How a row's runs were sliced: "adaptive 1.66 s" (the opt run's pick; its ADAPTIVE_OPTS,
    if any, in parentheses), "1 s", or ""."""
    p, st = pk
    if not is_adaptive(st):
        return set_name(st)
    got = [str(w.get("slice", "")) for (k, s), w in sorted(wins.items(), key=lambda kv: kv[0][1])
           if k == pk and s == "opt"] + [str(w.get("slice", "")) for (k, _), w in wins.items()
                                         if k == pk]
    opts = [w["adaptive_opts"] for (k, s), w in wins.items()
            if k == pk and s == "opt" and w.get("adaptive_opts")]
    tail = f" ({opts[0]})" if opts else ""
    for t in got:
        ms = _ms(t.split(":", 1)[-1])
        if ms is not None:
            return f"adaptive {ms / 1000:.3g} s{tail}"
    return "adaptive" + tail


def ref_of(procs, pk):
    """The `ref` processes a row is normalized to: its set's own, else one of its pressure (the
    unknown set's first, then the adaptive set's; compute_rows marks such a row ref_from)."""
    own = procs.get((pk, "ref"))
    if own:
        return own
    others = sorted((k for k, s in procs if s == "ref" and k[0] == pk[0]),
                    key=lambda k: (k[1] != "", k[1] != "adaptive", k[1]))
    return procs[(others[0], "ref")] if others else {}


def compute_rows(records, workload="micro"):
    """One dict per (pressure, slice set); see the module's docstring for the keys."""
    procs, wins = group(records, workload)
    pks = sorted({k[0] for k in procs}, key=row_order)
    systems = systems_of(records, workload)
    rows = []
    for pk in pks:
        p = pk[0]
        if set(s for k, s in procs if k == pk) == {"ref"} and any(
                k[0] == p and k != pk for k, _ in procs):
            continue  # a ref-only run that serves the other rows of its pressure
        ref = ref_of(procs, pk)
        row = {"pressure": p, "set": pk[1], "slice_label": slice_label(pk, wins)}
        if ref and not procs.get((pk, "ref")):
            row["ref_from"] = next(k[1] for k, s in procs
                                   if s == "ref" and procs[(k, s)] is ref)
        for s in systems:
            got = procs.get((pk, s))
            if not got or not ref:
                continue
            ratios = []
            for i, r in got.items():
                base = ref.get(i, {}).get("tasks_per_s")
                if r.get("tasks_per_s") and base:
                    ratios.append(r["tasks_per_s"] / base)
                else:
                    ratios.append(0.0)  # failed or missing: counts as nothing done
            row[s] = 100 * sum(ratios) / nprocs(workload)
            w = wins.get((pk, s), {})
            d = w.get("daemon", {})
            if d.get("msched_switches_total"):
                row[s + "_switch_ms"] = 1000 * d["msched_switch_seconds_total"] / d["msched_switches_total"]
                moved = d.get("msched_populated_bytes_total", 0) + d.get("msched_evicted_bytes_total", 0)
                row[s + "_gib_per_switch"] = moved / 2**30 / d["msched_switches_total"]
            if s == "opt" and w:
                i_b, o_b = d.get("msched_populated_bytes_total", 0), d.get("msched_evicted_bytes_total", 0)
                t = link_seconds(i_b, o_b)
                row["ideal"] = 100 * max(0.0, 1 - t / w["window_s"])
                row["opt_gib_moved"] = (i_b + o_b) / 2**30
                row["link_s"] = t
                row["window_s"] = w["window_s"]
        if row.get("slice") is not None and row.get("ideal") is not None:
            row["ideal_slice"] = row["slice"] * row["ideal"] / 100
        rows.append(row)
    return rows


def preferred(rows):
    """Per pressure (ascending) the row the targets rate: the adaptive set's when it has opt,
    else the first row with opt."""
    best = {}
    for r in rows:
        if r.get("opt") is None:
            continue
        cur = best.get(r["pressure"])
        if cur is None or (r["set"] == "adaptive" and cur["set"] != "adaptive"):
            best[r["pressure"]] = r
    return [best[p] for p in sorted(best)]


def table(rows, systems, paper):
    """The Markdown table's lines."""
    sliced = len({r["set"] for r in rows}) > 1
    head = (["pressure"] + (["slice length"] if sliced else []) + list(systems)
            + ["Ideal", "opt / Ideal", "Ideal x slice", "opt / (Ideal x slice)", "paper",
               "opt / whole", "opt / demand", "opt switch (ms)"]
            + (["GiB per switch: opt / alloc"] if "alloc" in systems else []))
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        f = lambda v: "-" if v is None else f"{v:.1f}"
        cells = ([f"{r['pressure']} %"] + ([r["slice_label"] or "-"] if sliced else [])
                 + [f(r.get(s)) for s in systems])
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
        if "alloc" in systems:
            g, a = r.get("opt_gib_per_switch"), r.get("alloc_gib_per_switch")
            cells.append(f"{g:.2f} / {a:.2f}" if g is not None and a is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(args):
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    as_json = "--json" in args
    workload = "micro"
    if "--workload" in args:
        k = args.index("--workload")
        if k + 1 >= len(args):
            print("summarize_sweep.py: --workload needs a name", file=sys.stderr)
            return 2
        workload = args[k + 1]
        del args[k:k + 2]
    paths = [p for p in args if p != "--json"]
    try:
        located = read_located(paths)
        for path, n, r in located:
            if r.get("workload", "micro") == workload and ("pressure" not in r or "system" not in r):
                raise InputError(f"{path}:{n}: a {workload} record without pressure or system")
        slice_sets(located)
        records = [r for _, _, r in located]
        rows = compute_rows(records, workload)
    except InputError as e:
        print(f"summarize_sweep.py: {e}", file=sys.stderr)
        return 2
    if as_json:
        for r in rows:
            print(json.dumps({k: v for k, v in r.items() if k != "ideal_slice"}))
        return 0
    paper = PAPER if workload == "micro" else {}
    for line in table(rows, systems_of(records, workload), paper):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
