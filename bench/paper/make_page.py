#!/usr/bin/env python3
"""make_page.py - regenerate the measured parts of docs/evaluation.md from raw results.

Usage: bench/paper/make_page.py [--results DIR] [--doc FILE] [--img DIR] [--check]

  --results DIR  the raw results (default bench/results/gpu/paper): every *.jsonl directly in
                 DIR, and DIR/env.json if present
  --doc FILE     the page (default docs/evaluation.md)
  --img DIR      where the plots go (default docs/img), as eval-<block>.png
  --check        write nothing; exit 1 if the page would change (a stale page)
The defaults lie in the repository this file belongs to, wherever it is run from; paths given
are relative to the current directory.

Exit status: 0 done (or, with --check, up to date), 1 stale page (--check), 2 bad input: a
malformed JSON line (named by file and line), a record without the fields its kind needs, a block
with no generator, an unterminated or mismatched block, an unreadable page.

Design.
The page holds generated blocks, each between two lines

    <!-- generated: NAME -->
    <!-- end generated: NAME -->

and only the text between such a pair is replaced; every other byte of the page stays as it is
(line endings included), so the prose around the numbers is edited by hand and the numbers are
never edited by hand. Each NAME has a generator (GENERATORS below) that turns the records into
Markdown lines and, for some blocks, a plot. A block whose data is absent says so in one italic
line naming the `bench/paper.sh --part`s that measure it (SWEEP_PARTS mirrors that script's
part list; tests/cli/eval_page.sh checks the two agree). A generator whose block is missing from
the page is a warning, a block without a generator an error. Generated text depends only on the
records and on where the plots lie relative to the page (never on the results' path, the time of
the run or dictionary order), so a second run changes nothing and --check can tell a stale page
in CI.

Records (JSON lines; unknown fields are ignored):
  sweep   bench/micro/run_sweep.sh: workload micro (also when the field is absent), A, B, C or D;
          per process {pressure, system, proc, tasks_per_s | error} and per daemon run a window
          record {pressure, system, window_s, daemon: {msched_* counters over the window},
          switch_seconds_max}. Throughput tables come from bench/micro/summarize_sweep.py's
          compute_rows, so the page and that tool cannot disagree; its Ideal is defined there.
  rtbe    bench/workloads/run_rtbe.sh: workload rtbe, {system, role: rt, p50_ms, p90_ms, p99_ms,
          max_ms, requests, interval_ms} and {system, role: be, tasks_per_s}, and per daemon
          system {system, daemon, switch_seconds_max} over the RT service's run.
  engine  workload engine: the JSON lines of tests/gpu/migrate_bench.c.
  accuracy  bench/accuracy/summarize.py: workload accuracy, per program {group, program,
          launches, covered, unbounded, pred_bytes, touch_lo_bytes, touch_hi_bytes, late,
          and where measured resident_bytes, resident_pred_bytes, beyond, beyond_max_bytes}.
  strict  bench/accuracy/summarize.py --strict: workload strict, per program {group, program,
          rc, timed_out, launches, evicted_chunks, result, fault, error}.
  env.json  {gpu, driver, cuda, torch, transformers, date, budget_gib, slice, host}, any absent.
When records repeat (the same process of the same run in two files), the last one read wins;
files are read in name order.

Plots (matplotlib, Agg, 150 dpi) are written only when their bytes change, and PNG metadata
carries no software version or date, so rerunning leaves them alone. Without matplotlib the
tables are still generated, the image lines already in a block are kept, and one warning says so.
"""
import argparse
import io
import json
import math
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # --check writes nothing, not even a bytecode cache
sys.path.insert(0, os.path.join(ROOT, "bench", "micro"))
import summarize_sweep as ss  # noqa: E402

PROG = "make_page.py"
WORKLOADS = ("micro", "A", "B", "C", "D")
TASK_UNIT = {"micro": "one vector add or matrix multiply", "A": "one kernel step or transform",
             "B": "one image", "C": "one image or one generated token",
             "D": "one generated token"}
WORKLOAD_TITLE = {"micro": "microbenchmark", "A": "workload A (scientific)",
                  "B": "workload B (multi-DNN)", "C": "workload C (hybrid)",
                  "D": "workload D (multi-LLM)"}
# The parts of bench/paper.sh (its ALL_PARTS) that measure each block's data, for the notes.
SWEEP_PARTS = {"micro": ["micro-100-150", "micro-200-300"],
               "A": ["A-150-a", "A-150-b", "A-200-a", "A-200-b", "A-300"],
               "B": ["B-150-a", "B-150-b", "B-200-a", "B-200-b", "B-300-a", "B-300-b"],
               "C": ["C-150-a", "C-150-b", "C-200-a", "C-200-b", "C-300-a", "C-300-b"],
               "D": ["D-150-a", "D-150-b", "D-200-a", "D-200-b", "D-300-a", "D-300-b"]}
RTBE_SYSTEMS = ("ref", "msched", "tslice", "slice")
RTBE_LABEL = {"ref": "ref (both at once, no msched)",
              "msched": "msched (priority, OPT, VMM engine)",
              "tslice": "tslice (priority time slicing, demand paging)",
              "slice": "slice (priority slicing, no budget pressure)"}
COLORS = {"slice": "tab:gray", "opt": "tab:blue", "lru": "tab:purple", "whole": "tab:orange",
          "demand": "tab:red", "ref": "tab:green", "msched": "tab:blue", "tslice": "tab:red"}
# Engine targets: (field, label, comparison, bound, unit).
ENGINE_TARGETS = (("populate_gbps", "populate", ">=", 52.0, " GB/s"),
                  ("evict_gbps", "evict", ">=", 52.0, " GB/s"),
                  ("swap_gbps", "swap", ">=", 85.0, " GB/s"),
                  ("map_delay", "bookkeeping (map delay)", "<=", 0.05, " %"),
                  ("clean_speedup", "clean eviction", ">=", 10.0, "x"))
IDEAL_TARGET = 90.0      # opt >= 90 % of Ideal everywhere
D150_TARGET = 10.0       # D at 150 %: opt / demand
D200_TARGET = 3.0        # D at 200 %: opt / whole
RT_TARGET = 3.0          # tslice P99 / msched P99
ENGINE_NUM = ("gib", "chunk_mib", "evict_gbps", "evict_map_frac", "populate_gbps",
              "populate_map_frac", "swap_gbps", "swap_map_frac", "clean_speedup",
              "swap_nohash_gbps", "serial_swap_gbps", "premapped_swap_gbps", "map_delay",
              "mismatches")
RTBE_NUM = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "requests", "interval_ms", "tasks_per_s",
            "mismatches")
BEGIN_RE = re.compile(r"<!-- generated: (.*?) -->[ \t]*")
END_RE = re.compile(r"<!-- end generated: (.*?) -->[ \t]*")
NAME_RE = re.compile(r"[A-Za-z0-9_-]+")


class Fatal(Exception):
    """Bad input or page: the message is printed and the exit status is 2."""


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ---------------------------------------------------------------- records

class Data:
    def __init__(self):
        self.sweep = []      # sweep records, as summarize_sweep.py reads them
        self.rtbe = {}       # (system, role, proc or 0) -> record
        self.rtbe_win = {}   # system -> window record
        self.engine = {}     # (gib, chunk_mib) -> record
        self.accuracy = {}   # program -> record
        self.strict = {}     # program -> strict coverage record
        self.env = None      # env.json's object, None when absent


def _need_num(r, keys, where, required=()):
    for k in keys:
        if k in r and r[k] is not None and not is_num(r[k]):
            raise Fatal(f"{where}: '{k}' is not a number")
    for k in required:
        if not is_num(r.get(k)):
            raise Fatal(f"{where}: the record has no number '{k}'")


def _check_window(r, where, required=("window_s",)):
    _need_num(r, ("window_s", "switch_seconds_max"), where, required=required)
    d = r.get("daemon", {})
    if not isinstance(d, dict):
        raise Fatal(f"{where}: 'daemon' is not an object")
    _need_num(d, list(d), where + " (daemon)")


def load(results):
    data = Data()
    if not os.path.isdir(results):
        warn(f"no results directory {results}: every block reports its data as not measured")
        return data
    names = sorted(n for n in os.listdir(results)
                   if n.endswith(".jsonl") and os.path.isfile(os.path.join(results, n)))
    try:
        located = ss.read_located([os.path.join(results, n) for n in names])
    except ss.InputError as e:
        raise Fatal(str(e)) from None
    ss.slice_sets(located)
    unknown, skipped = {}, {}
    for path, n, r in located:
        where = f"{path}:{n}"
        w = r.get("workload", "micro")
        if w == "engine":
            _need_num(r, ENGINE_NUM, where, required=("gib",))
            data.engine[(r["gib"], r.get("chunk_mib") or 0)] = r
        elif w == "accuracy":
            if not isinstance(r.get("program"), str):
                raise Fatal(f"{where}: an accuracy record without 'program'")
            _need_num(r, ACC_NUM, where)
            data.accuracy[r["program"]] = r
        elif w == "strict":
            if not isinstance(r.get("program"), str):
                raise Fatal(f"{where}: a strict record without 'program'")
            _need_num(r, ("launches", "evicted_chunks", "rc"), where)
            data.strict[r["program"]] = r
        elif w == "rtbe":
            if not isinstance(r.get("system"), str):
                raise Fatal(f"{where}: an rtbe record without 'system'")
            if "role" in r:
                if r["role"] not in ("rt", "be"):
                    raise Fatal(f"{where}: rtbe role '{r['role']}' is neither rt nor be")
                _need_num(r, RTBE_NUM, where)
                data.rtbe[(r["system"], r["role"], r.get("proc", 0))] = r
            else:  # the daemon's counters over the RT service's run: no window_s
                _check_window(r, where, required=())
                data.rtbe_win[r["system"]] = r
        elif w in WORKLOADS:
            if "workload" not in r and ("pressure" not in r or "system" not in r):
                skipped.setdefault(path, []).append(n)  # some other program's line
                continue
            if not is_num(r.get("pressure")) or not isinstance(r.get("system"), str):
                raise Fatal(f"{where}: a {w} sweep record needs a number 'pressure' and a 'system'")
            if "proc" in r:
                if not isinstance(r["proc"], int) or isinstance(r["proc"], bool):
                    raise Fatal(f"{where}: 'proc' is not an integer")
                _need_num(r, ("tasks_per_s", "mismatches"), where)
            else:
                _check_window(r, where)
            data.sweep.append(r)
        else:
            unknown.setdefault(str(w), where)
    for w, where in sorted(unknown.items()):
        warn(f"records of unknown workload '{w}' ignored (first at {where})")
    for path, lines in sorted(skipped.items()):
        warn(f"{path}: {len(lines)} line(s) without workload, pressure or system ignored "
             f"(first at line {lines[0]})")
    env = os.path.join(results, "env.json")
    if os.path.isfile(env):
        try:
            with open(env, encoding="utf-8") as f:
                data.env = json.load(f)
        except ValueError as e:
            line = getattr(e, "lineno", 0)
            raise Fatal(f"{env}:{line}: malformed JSON ({e})") from None
        except OSError as e:
            raise Fatal(f"{env}: {e.strerror}") from None
        if not isinstance(data.env, dict):
            raise Fatal(f"{env}:1: expected a JSON object")
    return data


# ---------------------------------------------------------------- formatting

def f1(v):
    return "-" if v is None else f"{v:.1f}"


def fsig(v, n=3):
    """n significant digits without an exponent."""
    if v is None:
        return "-"
    if v == 0:
        return "0"
    d = max(0, n - 1 - math.floor(math.log10(abs(v))))
    return f"{v:.{d}f}"


def fpress(p):
    return f"{p:g} %"


def fpk(pk, sliced):
    """A row's name in notes: its pressure, and its slice set where a workload has several."""
    p, st = pk
    if not sliced:
        return fpress(p)
    return f"{fpress(p)} ({ss.set_name(st) or 'slice unknown'})"


def ratio(a, b):
    return a / b if a is not None and b else None


def fx(v):
    return "-" if v is None else f"{v:.1f}x"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def run_parts(parts):
    return "run `bench/paper.sh " + " ".join(f"--part {p}" for p in parts) + "`"


def note(what, parts):
    return [f"_Not measured yet: {what}, {run_parts(parts)}._"]


def missed(diff, unit):
    s = f"{diff:.1f}"
    return f"missed by {'<0.1' if s == '0.0' else s}{unit}"


class Plot:
    """A figure for one block: alt text and a function drawing on a pyplot module."""

    def __init__(self, alt, draw):
        self.alt, self.draw = alt, draw


# ---------------------------------------------------------------- provenance

def gen_provenance(data):
    env = data.env
    if env is None:
        return note("no env.json with the results", ["env"]), None
    out = []
    hw = env.get("gpu")
    if hw is not None or env.get("host") is not None:
        host = f" (host {env['host']})" if env.get("host") is not None else ""
        out.append(f"- hardware: {hw if hw is not None else 'GPU not recorded'}{host}")
    sw = [f"{label} {env[k]}" for k, label in (("driver", "driver"), ("cuda", "CUDA"),
                                               ("torch", "PyTorch"),
                                               ("transformers", "transformers"))
          if env.get(k) is not None]
    if sw:
        out.append("- software: " + ", ".join(sw))
    if env.get("date") is not None:
        out.append(f"- date: {env['date']}")
    b = env.get("budget_gib")
    if b is not None:
        out.append(f"- memory budget: {b:g} GiB" if is_num(b) else f"- memory budget: {b}")
    sets = sorted({r.get("_set", "") for r in data.sweep if r.get("system") != "ref"},
                  key=lambda t: ss.row_order((0, t)))
    if len(sets) > 1:
        named = [ss.set_name(t) or "not recorded" for t in sets]
        out.append(f"- time slice: per run ({', '.join(named)}), named in each sweep table's "
                   "slice column")
    elif env.get("slice") is not None:
        out.append(f"- time slice: {env['slice']}")
    days = sorted({time.strftime("%Y-%m-%d", time.gmtime(r["t_start"])) for r in data.sweep
                   if is_num(r.get("t_start"))})
    if len(days) > 1:
        out.append(f"- sweep runs with a recorded start: {days[0]} to {days[-1]} (UTC)")
    if not out:
        out.append("- env.json records none of gpu, driver, cuda, torch, transformers, date, "
                   "budget_gib, slice, host")
    return out, None


# ---------------------------------------------------------------- engine

def gen_engine(data):
    if not data.engine:
        return note("the migration engine (tests/gpu/migrate_bench.c)", ["engine"]), None
    recs = [data.engine[k] for k in sorted(data.engine)]
    head = ["size (GiB)", "chunk (MiB)", "populate (GB/s)", "evict (GB/s)", "swap (GB/s)",
            "swap, no hashing", "swap, premapped", "swap, unpipelined",
            "map CPU share: populate / evict / swap", "map delay", "clean eviction",
            "mismatches"]

    def pc(v):
        return "-" if v is None else f"{100 * v:.1f} %"

    rows = []
    for r in recs:
        shares = " / ".join(pc(r.get(k)) for k in ("populate_map_frac", "evict_map_frac",
                                                     "swap_map_frac"))
        rows.append([f"{r['gib']:g}", f"{r['chunk_mib']:g}" if r.get("chunk_mib") else "-",
                     f1(r.get("populate_gbps")), f1(r.get("evict_gbps")), f1(r.get("swap_gbps")),
                     f1(r.get("swap_nohash_gbps")), f1(r.get("premapped_swap_gbps")),
                     f1(r.get("serial_swap_gbps")), shares, pc(r.get("map_delay")),
                     fx(r.get("clean_speedup")),
                     "-" if r.get("mismatches") is None else f"{r['mismatches']:g}"])
    rows.append(["target", "", ">= 52", ">= 52", ">= 85", "", "", "", "", "<= 5 %", ">= 10x",
                 "0"])
    out = table(head, rows)
    verdicts = []
    for key, label, cmp, bound, unit in ENGINE_TARGETS:
        vals = [r[key] for r in recs if r.get(key) is not None]
        scale = 100 if unit == " %" else 1
        if not vals:
            verdicts.append(f"{label} not measured")
            continue
        worst = min(vals) if cmp == ">=" else max(vals)
        ok = worst >= bound if cmp == ">=" else worst <= bound
        shown = f"{scale * worst:.1f}{unit}"
        diff = scale * abs(bound - worst)
        verdicts.append(f"{label} {shown} " + ("met" if ok else missed(diff, unit)))
    bad = sum(r.get("mismatches") or 0 for r in recs)
    verdicts.append("no mismatches" if bad == 0 else f"{bad:g} mismatches (target 0)")
    out += ["", "Worst size against the targets: " + "; ".join(verdicts) + ".",
            "",
            "GB/s of the bytes moved; swap moves both directions at once. Map CPU share: CPU time "
            "in the map and unmap calls over the transfer's time (they overlap the copies); map "
            "delay: what the mapping work adds to a swap (no hashing) over the same swap with "
            "the memory mapped beforehand, which is what the bookkeeping target bounds. Clean "
            "eviction: a dirty eviction's time over dropping unchanged memory."]
    return out, None


# ---------------------------------------------------------------- sweeps

def failures(procs, pks, sliced):
    """Lines about processes without a result, reported mismatches, and how the rates were
    taken (bench/records.py: over the run's common window, or each process's own loop)."""
    order = ("ref",) + ss.SYSTEMS
    failed, bad, common, own, short = [], [], [], [], []
    for pk in pks:
        for s in order:
            got = procs.get((pk, s))
            if not got:
                continue
            ov = [r["overlap_s"] for r in got.values() if "overlap_s" in r]
            at = fpk(pk, sliced)
            name = f"{s} at {at}"
            if not ov:
                own.append(name)
            elif min(ov) < 5:
                short.append(f"{name} ({min(ov):.1f} s)")
            else:
                common.append(f"{name} ({min(ov):.0f} s)")
            for i in range(ss.NPROCS):
                r = got.get(i)
                if r is None:
                    failed.append(f"{s} at {at} process {i} (no record)")
                elif not r.get("tasks_per_s"):
                    why = r.get("error") or "no tasks per second"
                    failed.append(f"{s} at {at} process {i} ({why})")
            for i in sorted(got):
                if got[i].get("mismatches"):
                    bad.append(f"{s} at {at} process {i}: {got[i]['mismatches']:g}")
    out = []
    if failed:
        out += ["", "Without a result, counted as no work done (in `ref`: that process's ratio "
                "is 0 for every system): " + "; ".join(failed) + "."]
    if bad:
        out += ["", "Data mismatches reported: " + "; ".join(bad) + "."]
    if common:
        out += ["", "Rates over the window all of a run's processes were in their timed loops: "
                + "; ".join(common) + "."]
    if short:
        out += ["", "Common window under 5 s, rates over each process's own loop: "
                + "; ".join(short) + "."]
    if own:
        out += ["", "Rates over each process's own timed loop (no progress samples), which "
                "flatters a process still running after the others ended: "
                + "; ".join(own) + "."]
    return out


def sweep_tables(w, data):
    """Table lines, rows and systems of one workload (None when it has no process records)."""
    procs, wins = ss.group(data.sweep, w)
    if not procs:
        return None
    rows = ss.compute_rows(data.sweep, w)
    systems = ss.systems_of(data.sweep, w)
    sliced = len({r["set"] for r in rows}) > 1
    baselines = [b for b in ("whole", "lru", "demand") if b in systems]
    head = (["pressure"] + (["slice length"] if sliced else []) + systems + ["Ideal", "opt / Ideal"]
            + (["Ideal x slice", "opt / (Ideal x slice)"] if "slice" in systems else [])
            + (["paper"] if w == "micro" else []) + [f"opt / {b}" for b in baselines])
    trows = []
    for r in rows:
        opt, ideal, isl = r.get("opt"), r.get("ideal"), r.get("ideal_slice")
        cells = ([fpress(r["pressure"])] + ([r["slice_label"] or "-"] if sliced else [])
                 + [f1(r.get(s)) for s in systems])
        cells += [f1(ideal), f"{100 * opt / ideal:.0f} %" if ideal and opt is not None else "-"]
        if "slice" in systems:
            cells += [f1(isl), f"{100 * opt / isl:.0f} %" if isl and opt is not None else "-"]
        if w == "micro":
            cells.append(f1(ss.PAPER.get(r["pressure"])))
        cells += [fx(ratio(opt, r.get(b))) for b in baselines]
        trows.append(cells)
    pks = [(r["pressure"], r["set"]) for r in rows]
    out = ["Normalized throughput (% of `ref`, the four processes at once without msched):", ""]
    out += table(head, trows)
    if sliced:
        out += ["", "slice length: the slice every system of the row ran at; \"adaptive\": the "
                "length msched's adaptive policy picked in the row's opt run (`SLICE=adaptive`), "
                "which the other systems of that row then ran at. Rows of one pressure at "
                "different slices are separate runs, each normalized to its own `ref`."]
    noref = [fpk(pk, sliced) for pk in pks if not ss.ref_of(procs, pk)]
    if noref:
        out += ["", f"No `ref` run at {', '.join(noref)}: not normalized."]
    borrowed = [f"{fpk(pk, sliced)} to the `ref` of {fpk((pk[0], r['ref_from']), True)}"
                for pk, r in zip(pks, rows) if "ref_from" in r]
    if borrowed:
        out += ["", "Without a `ref` run of their own, normalized: " + "; ".join(borrowed) + "."]
    noideal = [fpk(pk, sliced) for pk, r in zip(pks, rows)
               if r.get("opt") is not None and r.get("ideal") is None]
    if noideal:
        out += ["", f"No daemon window for opt at {', '.join(noideal)}: no Ideal."]
    if w == "micro":
        out += ["", "paper: the MSched paper's figure for msched at that pressure (section 7.1, "
                "read off its plot)."]
    out += failures(procs, sorted({k[0] for k in procs}, key=ss.row_order), sliced)

    # (b) bytes moved and switch time
    brows, no_stop = [], False
    for pk in sorted({k[0] for k in wins}, key=ss.row_order):
        per_task = {}
        cells_of = {}
        for s in ss.SYSTEMS:
            win = wins.get((pk, s))
            if win is None:
                continue
            d = win.get("daemon", {})
            i_b = d.get("msched_populated_bytes_total", 0)
            o_b = d.get("msched_evicted_bytes_total", 0)
            gib = (i_b + o_b) / 2**30
            rate = sum(r.get("tasks_per_s") or 0 for r in procs.get((pk, s), {}).values())
            tasks = rate * win["window_s"]
            per_task[s] = gib / tasks if tasks > 0 else None
            n = d.get("msched_switches_total") or 0
            sw = 1000 * d.get("msched_switch_seconds_total", 0) / n if n else None
            stop = None
            if "msched_switch_stop_seconds_total" in d:
                stop = 1000 * d["msched_switch_stop_seconds_total"] / n if n else None
            else:
                no_stop = True
            mx = win.get("switch_seconds_max")
            cells_of[s] = [fpk(pk, sliced), s, f"{i_b / 2**30:.1f} / {o_b / 2**30:.1f}", fsig(per_task[s]),
                           None, f"{n:g}", f1(sw), f1(stop),
                           f1(sw - stop if sw is not None and stop is not None else None),
                           f1(None if mx is None else 1000 * mx)]
        for s, cells in cells_of.items():
            base = per_task.get("opt")
            cells[4] = f"{per_task[s] / base:.2f}x" if per_task[s] is not None and base else "-"
            brows.append(cells)
    if brows:
        out += ["", "Bytes moved and switch time in the steady-state window:", ""]
        out += table(["pressure", "system", "moved in / out (GiB)", "GiB per task", "vs opt",
                      "switches", "mean switch (ms)", "of which stop (ms)", "migration (ms)",
                      "max switch (ms)"], brows)
        out += ["", "GiB per task: the bytes moved in the window over the tasks done in it; "
                "tasks done are an estimate from each process's rate over its whole run (the sum "
                f"of tasks/s times the window's length); a task is {TASK_UNIT[w]}. vs opt: that "
                "figure over opt's in the same row. Stop: the part of a switch spent waiting "
                "for the outgoing task to drain and stop; migration: the rest. Max switch: the "
                "longest of the whole run."]
        if no_stop:
            out += ["", "`-` under stop: the records predate the daemon's stop-time metric."]
    return out, rows, systems


def gen_sweep(w):
    def gen(data):
        got = sweep_tables(w, data)
        if got is None:
            return note(f"{WORKLOAD_TITLE[w]} sweep (no {w} records)", SWEEP_PARTS[w]), None
        lines, rows, systems = got
        if not any(r.get(s) is not None for r in rows for s in systems):
            return lines, None
        if len({r["set"] for r in rows}) > 1:
            # one point per pressure: the row the targets rate
            rows = ss.preferred(rows)
            lines = lines + ["", "The plot shows per pressure the row the targets rate (the "
                             "adaptive slice where it was measured)."]
            if not rows:
                return lines, None

        def draw(plt):
            fig, ax = plt.subplots(figsize=(6.4, 3.2))
            for s in systems:
                pts = [(r["pressure"], r[s]) for r in rows if r.get(s) is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", ms=4, color=COLORS[s], label=s)
            pts = [(r["pressure"], r["ideal"]) for r in rows if r.get("ideal") is not None]
            if pts:
                ax.plot(*zip(*pts), ls="--", color="black", label="Ideal")
            pts = [(r["pressure"], r["ideal_slice"]) for r in rows
                   if r.get("ideal_slice") is not None]
            if pts:
                ax.plot(*zip(*pts), ls=":", color="black", label="Ideal x slice")
            if w == "micro":
                pts = [(r["pressure"], ss.PAPER[r["pressure"]]) for r in rows
                       if r["pressure"] in ss.PAPER]
                if pts:
                    ax.plot(*zip(*pts), ls="none", marker="x", color="tab:brown",
                            label="paper (msched)")
            ax.set_xticks([r["pressure"] for r in rows])
            ax.set_xlabel("memory pressure (% of the budget)")
            ax.set_ylabel("normalized throughput (%)")
            ax.set_ylim(bottom=0)
            ax.set_title(WORKLOAD_TITLE[w])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
            return fig

        return lines, Plot(f"normalized throughput of the {WORKLOAD_TITLE[w]} by pressure", draw)
    return gen


# ---------------------------------------------------------------- RT + BE

def rtbe_summary(data):
    """system -> {rt: record or None, be: [records]} in display order."""
    systems = {k[0] for k in data.rtbe} | set(data.rtbe_win)
    order = [s for s in RTBE_SYSTEMS if s in systems] + sorted(systems - set(RTBE_SYSTEMS))
    out = {}
    for s in order:
        rts = [r for k, r in sorted(data.rtbe.items(), key=lambda kv: str(kv[0][2]))
               if k[0] == s and k[1] == "rt"]
        bes = [r for k, r in sorted(data.rtbe.items(), key=lambda kv: str(kv[0][2]))
               if k[0] == s and k[1] == "be"]
        out[s] = {"rt": rts[-1] if rts else None, "be": bes}
    return out


def be_rate(bes):
    if not bes or any(r.get("tasks_per_s") is None for r in bes):
        return None
    return sum(r["tasks_per_s"] for r in bes)


def rt_p99(summary, s):
    rt = summary.get(s, {}).get("rt")
    return rt.get("p99_ms") if rt else None


def gen_rtbe(data):
    summary = rtbe_summary(data)
    if not summary:
        return note("the RT+BE pair", ["rtbe"]), None
    has_win = any(s in data.rtbe_win for s in summary)
    head = ["system", "RT P50 (ms)", "RT P99 (ms)", "RT max (ms)", "requests",
            "BE images/s", "BE vs ref"]
    if has_win:
        head += ["switches", "mean switch (ms)", "moved (GiB)"]
    ref_be = be_rate(summary.get("ref", {}).get("be"))
    rows, failed, bad, intervals = [], [], [], set()
    for s, got in summary.items():
        rt, bes = got["rt"], got["be"]
        rt = rt or {}
        if got["rt"] is not None and rt.get("p99_ms") is None:
            failed.append(f"{s} RT ({rt.get('error') or 'no latencies'})")
        for b in bes:
            if b.get("tasks_per_s") is None:
                failed.append(f"{s} BE ({b.get('error') or 'no throughput'})")
        for r in ([got["rt"]] if got["rt"] else []) + bes:
            if r.get("mismatches"):
                bad.append(f"{s} {r['role'].upper()}: {r['mismatches']:g}")
        if rt.get("interval_ms") is not None:
            intervals.add(rt["interval_ms"])
        be = be_rate(bes)
        cells = [RTBE_LABEL.get(s, s), f1(rt.get("p50_ms")), f1(rt.get("p99_ms")),
                 f1(rt.get("max_ms")), "-" if rt.get("requests") is None else f"{rt['requests']:g}",
                 f1(be), f"{100 * be / ref_be:.0f} %" if be is not None and ref_be else "-"]
        if has_win:
            win = data.rtbe_win.get(s)
            d = win.get("daemon", {}) if win else {}
            n = d.get("msched_switches_total")
            moved = (d.get("msched_populated_bytes_total", 0)
                     + d.get("msched_evicted_bytes_total", 0)) / 2**30
            cells += ["-" if n is None else f"{n:g}",
                      f1(1000 * d.get("msched_switch_seconds_total", 0) / n if n else None),
                      f"{moved:.1f}" if win else "-"]
        rows.append(cells)
    out = table(head, rows)
    p_ms, p_ts = rt_p99(summary, "msched"), rt_p99(summary, "tslice")
    if p_ms is not None and p_ts is not None:
        out += ["", f"tslice P99 / msched P99: {fx(ratio(p_ts, p_ms))} ({p_ts:.1f} ms against "
                f"{p_ms:.1f} ms): time slicing without memory scheduling against msched."]
    else:
        out += ["", "tslice P99 / msched P99: not measured (needs both systems' RT latencies)."]
    if intervals:
        iv = ", ".join(f"{v:g}" for v in sorted(intervals))
        out += ["", f"RT requests arrive every {iv} ms (open loop); latency runs from a request's "
                "due time to its result on the host."]
    if has_win:
        out += ["", "Switches and bytes: the daemon's counters over the RT service's run."]
    if failed:
        out += ["", "Without a result: " + "; ".join(failed) + "."]
    if bad:
        out += ["", "Data mismatches reported: " + "; ".join(bad) + "."]
    bars = [(s, rt_p99(summary, s)) for s in summary if rt_p99(summary, s) is not None]
    if not bars:
        return out, None

    def draw(plt):
        fig, ax = plt.subplots(figsize=(5.0, 3.0))
        xs = range(len(bars))
        ax.bar(xs, [v for _, v in bars], color=[COLORS.get(s, "tab:gray") for s, _ in bars])
        for x, (_, v) in zip(xs, bars):
            ax.annotate(f"{v:.1f}", (x, v), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([s for s, _ in bars])
        ax.set_ylabel("RT P99 latency (ms)")
        ax.set_title("RT+BE: real-time P99 latency")
        vals = [v for _, v in bars]
        if min(vals) > 0 and max(vals) / min(vals) > 30:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, 1.15 * max(vals) if max(vals) > 0 else 1)
        ax.grid(axis="y", alpha=0.3)
        return fig

    return out, Plot("RT P99 latency per system", draw)


# ---------------------------------------------------------------- targets

def gen_targets(data):
    rows = []
    # msched >= 90 % of Ideal on every workload and pressure. Ideal is the issue's "budget at
    # least the total": the `slice` run (the same time slicing with every byte resident).
    points, missing, no_ideal, with_opts = [], [], [], {}
    at_slice = {}  # slice label -> the points measured at it
    for w in WORKLOADS:
        rows_w = ss.compute_rows(data.sweep, w)
        with_opt = ss.preferred(rows_w)
        if not with_opt:
            missing.append(w)
        got = ss.preferred([r for r in rows_w if r.get("slice") is not None])
        rated = {r["pressure"] for r in got}
        for r in rows_w:  # the adaptive policy with options (ADAPTIVE_OPTS): reported beside
            if (r["set"] != "adaptive" and ss.is_adaptive(r["set"])
                    and r.get("slice") and r.get("opt") is not None
                    and not any(r is g for g in got)):
                with_opts.setdefault(r["set"][len("adaptive ("):-1], []).append(
                    f"{w} {fpress(r['pressure'])} {100 * r['opt'] / r['slice']:.1f} %")
        no_ideal += [f"{w} {fpress(r['pressure'])}" for r in with_opt
                     if r["pressure"] not in rated]
        for r in got:
            v = 100 * r["opt"] / r["slice"] if r["slice"] > 0 else math.inf
            points.append((v, w, r["pressure"]))
            kind = "adaptive" if r["set"] == "adaptive" else r["slice_label"] or "slice unknown"
            at_slice.setdefault(kind, []).append(f"{w} {fpress(r['pressure'])}")
    label = "msched (opt) >= 90 % of Ideal (slice: every byte resident) on every workload and pressure"
    if not points:
        rows.append([label, "-", "not measured (" + run_parts(
            [p for w in WORKLOADS for p in SWEEP_PARTS[w]]) + ")"])
    else:
        v, w, p = min(points)
        measured = f"worst {v:.1f} % of Ideal: {w} at {fpress(p)} ({len(points)} points measured)"
        extra = []
        if len(at_slice) > 1:
            extra.append("slices: " + "; ".join(
                f"{k}: {', '.join(v)}" for k, v in sorted(at_slice.items(),
                                                           key=lambda kv: kv[0] != "adaptive")))
        if missing:
            extra.append("not measured: " + ", ".join(missing))
        for opts, got_o in sorted(with_opts.items()):
            extra.append(f"with `{opts}`: " + ", ".join(got_o))
        if no_ideal:
            extra.append("no in-memory (slice) run: " + ", ".join(no_ideal))
        if extra:
            measured += "; " + "; ".join(extra)
        if v < IDEAL_TARGET:
            verdict = missed(IDEAL_TARGET - v, " points")
        else:
            verdict = "met where measured" if missing or no_ideal else "met"
        rows.append([label, measured, verdict])

    def baseline(p, base, bound, label):
        drows = ss.compute_rows(data.sweep, "D")
        both = ss.preferred([r for r in drows if r["pressure"] == p and r.get(base) is not None])
        r = both[0] if both else {}
        opt, b = r.get("opt"), r.get(base)
        if opt is None or b is None:
            rows.append([label, "-", f"not measured (needs opt and {base} of D at {fpress(p)}: "
                         + run_parts([f"D-{p:g}-a", f"D-{p:g}-b"]) + ")"])
            return
        v = opt / b if b > 0 else math.inf
        measured = (f"{v:.1f}x" if b > 0 else "unbounded") + f" (opt {opt:.1f} %, {base} {b:.1f} %"
        if len({x["set"] for x in drows}) > 1:
            measured += f"; slice {r['slice_label'] or 'unknown'}"
        measured += ")"
        rows.append([label, measured, "met" if v >= bound else missed(bound - v, "x")])

    baseline(150, "demand", D150_TARGET, "D at 150 %: opt / demand >= 10x")
    baseline(200, "whole", D200_TARGET, "D at 200 %: opt / whole >= 3x")
    summary = rtbe_summary(data)
    p_ms, p_ts = rt_p99(summary, "msched"), rt_p99(summary, "tslice")
    label = "RT P99: tslice P99 / msched P99 >= 3x"
    if p_ms is None or p_ts is None:
        rows.append([label, "-", "not measured (" + run_parts(["rtbe"]) + ")"])
    else:
        v = p_ts / p_ms if p_ms > 0 else math.inf
        rows.append([label, f"{v:.1f}x ({p_ts:.1f} ms against {p_ms:.1f} ms)",
                     "met" if v >= RT_TARGET else missed(RT_TARGET - v, "x")])
    return table(["target", "measured", "verdict"], rows), None


# ---------------------------------------------------------------- prediction accuracy

ACC_NUM = ("launches", "covered", "unbounded", "pred_bytes", "touch_lo_bytes", "touch_hi_bytes",
           "late")
ACC_GROUPS = ("micro", "A", "B", "C", "D")


def gib(v):
    return "-" if v is None else fsig(v / 2**30)


def strict_cell(r):
    """The strict coverage run of one program, in a few words."""
    if r is None:
        return "-"
    if r.get("fault"):
        return "faulted: " + (r.get("error") or f"exit {r.get('rc')}")
    n = r.get("launches")
    if n:
        ok = r.get("result") or r.get("timed_out")
        text = f"{n} launches, no fault" if ok else f"{n} launches, exit {r.get('rc')}"
        return text + (" (stopped at its time limit)" if r.get("timed_out") else "")
    return str(r.get("error") or f"no summary (exit {r.get('rc')})")


def gen_accuracy(data):
    programs = {**{p: r.get("group") for p, r in data.strict.items()},
                **{p: r.get("group") for p, r in data.accuracy.items()}}
    order = sorted(programs, key=lambda p: (ACC_GROUPS.index(programs[p])
                                            if programs[p] in ACC_GROUPS else len(ACC_GROUPS), p))
    if not order:
        return note("prediction accuracy", ["accuracy", "strict"]), None
    rows = []
    for p in order:
        r = data.accuracy.get(p)
        strict = strict_cell(data.strict.get(p))
        if r is None:
            rows.append([programs[p] or "?", p, "-", "-", strict] + ["-"] * 6
                        + ["no accuracy run"])
            continue
        n = r.get("launches") or 0
        if not n:
            rows.append([r.get("group", "?"), r["program"], "0", "-", strict] + ["-"] * 6
                        + [str(r.get("error") or "no launch measured")])
            continue
        lo, hi, pred = r.get("touch_lo_bytes"), r.get("touch_hi_bytes"), r.get("pred_bytes")
        over = (f"{ratio(pred, hi):.1f}-{ratio(pred, lo):.1f}x"
                if lo and hi and pred is not None else "-")
        res, res_pred = r.get("resident_bytes"), r.get("resident_pred_bytes")
        over_res = f"{ratio(res_pred, res):.2f}x" if res and res_pred is not None else "-"
        notes = []
        if r.get("beyond"):
            notes.append(f"{r['beyond']} left up to {r.get('beyond_max_bytes', 0) / 1024:g} KiB "
                         "more resident than predicted")
        if r.get("unbounded"):
            notes.append(f"{r['unbounded']} unbounded")
        if r.get("late"):
            notes.append(f"{r['late']} late reports")
        if r.get("thrashing"):
            notes.append(f"{r['thrashing']} thrashing reports from the driver")
        if r.get("dropped"):
            notes.append("CUPTI dropped " + ("an unknown number of" if r["dropped"] < 0
                                             else f"{r['dropped']}") + " reports")
        if r.get("outside_bytes"):
            notes.append(f"{gib(r['outside_bytes'])} GiB reported outside the windows")
        if r.get("error"):
            notes.append(str(r["error"]))
        if not r.get("complete", True):
            notes.append("cut by its time limit")
        rows.append([r.get("group", "?"), r["program"], str(n),
                     f"{100.0 * r['covered'] / n:.1f} %", strict, gib(pred), gib(lo), gib(hi),
                     gib(res), over_res, over, ", ".join(notes) or "-"])
    return table(["workload", "program", "launches", "covered", "strict run", "predicted GiB",
                  "touched GiB (faults)", "touched GiB (faults + migrated)",
                  "left resident GiB", "over-prediction (resident)",
                  "over-prediction (reports)", "notes"], rows), None


GENERATORS = {"provenance": gen_provenance, "engine": gen_engine}
GENERATORS.update({f"sweep-{w}": gen_sweep(w) for w in WORKLOADS})
GENERATORS.update({"rtbe": gen_rtbe, "targets": gen_targets, "accuracy": gen_accuracy})


# ---------------------------------------------------------------- the page

def parse_doc(text, path):
    """[('text', str) | ('block', name, begin line, inner text, end line)]"""
    lines = text.splitlines(keepends=True)
    segs, buf, i = [], [], 0
    while i < len(lines):
        bare = lines[i].rstrip("\r\n")
        m = BEGIN_RE.fullmatch(bare)
        if END_RE.fullmatch(bare):
            raise Fatal(f"{path}:{i + 1}: '{bare.strip()}' without its opening line")
        if not m:
            buf.append(lines[i])
            i += 1
            continue
        name = m.group(1)
        if not NAME_RE.fullmatch(name):
            raise Fatal(f"{path}:{i + 1}: bad block name '{name}'")
        j = i + 1
        while j < len(lines):
            b = lines[j].rstrip("\r\n")
            e = END_RE.fullmatch(b)
            if e:
                if e.group(1) != name:
                    raise Fatal(f"{path}:{j + 1}: block '{name}' (line {i + 1}) ends with "
                                f"'{e.group(1)}'")
                break
            if BEGIN_RE.fullmatch(b):
                raise Fatal(f"{path}:{j + 1}: block inside block '{name}' (line {i + 1})")
            j += 1
        if j == len(lines):
            raise Fatal(f"{path}:{i + 1}: block '{name}' has no line "
                        f"'<!-- end generated: {name} -->'")
        segs.append(("text", "".join(buf)))
        buf = []
        segs.append(("block", name, lines[i], "".join(lines[i + 1:j]), lines[j]))
        i = j + 1
    segs.append(("text", "".join(buf)))
    return segs


def import_pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        matplotlib.rcParams["svg.hashsalt"] = "msched"
        matplotlib.rcParams["font.size"] = 9
        import matplotlib.pyplot as plt
        return plt
    except Exception as e:  # any failure to import means no plots, not no page
        warn(f"matplotlib cannot be imported ({e.__class__.__name__}: {e}); plots skipped, "
             "image lines already in the page kept")
        return None


def render_png(plt, plot):
    fig = plot.draw(plt)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description="Regenerate the measured blocks of "
                                 "docs/evaluation.md from raw results.")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "gpu", "paper"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "evaluation.md"))
    ap.add_argument("--img", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the page would change")
    a = ap.parse_args(argv)
    try:
        try:
            with open(a.doc, "rb") as f:
                text = f.read().decode("utf-8")
        except OSError as e:
            raise Fatal(f"{a.doc}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise Fatal(f"{a.doc}: not UTF-8 ({e})") from None
        segs = parse_doc(text, a.doc)
        names = [s[1] for s in segs if s[0] == "block"]
        unknown = sorted({n for n in names if n not in GENERATORS})
        if unknown:
            raise Fatal(f"{a.doc}: no generator for block(s) {', '.join(unknown)} (known: "
                        f"{', '.join(GENERATORS)})")
        data = load(a.results)
    except Fatal as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    absent = [n for n in GENERATORS if n not in names]
    if absent:
        warn(f"{a.doc} has no block for {', '.join(absent)} (a block is a pair of lines "
             "'<!-- generated: NAME -->' and '<!-- end generated: NAME -->')")
    made = {n: GENERATORS[n](data) for n in dict.fromkeys(names)}
    plt = import_pyplot() if any(made[n][1] is not None for n in names) else None
    out, changed, pngs = [], [], {}
    imgref = os.path.relpath(os.path.abspath(a.img),
                             os.path.dirname(os.path.abspath(a.doc))).replace(os.sep, "/")
    for seg in segs:
        if seg[0] == "text":
            out.append(seg[1])
            continue
        _, name, begin, inner, end = seg
        lines, plot = made[name]
        lines = list(lines)
        if plot is not None:
            if plt is not None:
                lines += ["", f"![{plot.alt}]({imgref}/eval-{name}.png)"]
                pngs[name] = plot
            else:
                img = re.compile(r"!\[[^\]]*\]\((?:[^)]*/)?eval-" + re.escape(name) + r"\.png\)\s*")
                kept = [l.rstrip("\r\n") for l in inner.splitlines(keepends=True)
                        if img.fullmatch(l.rstrip("\r\n"))]
                if kept:
                    lines += [""] + kept
        nl = "\r\n" if begin.endswith("\r\n") else "\n"
        new_inner = nl + "".join(l + nl for l in lines) + nl
        if new_inner != inner:
            changed.append(name)
        out.append(begin + new_inner + end)
    new_text = "".join(out)
    if a.check:
        if new_text != text:
            print(f"{PROG}: {a.doc} is stale: block(s) {', '.join(changed)} would change "
                  f"(run bench/paper/make_page.py)", file=sys.stderr)
            return 1
        return 0
    written = 0
    if pngs:
        os.makedirs(a.img, exist_ok=True)
    for name, plot in pngs.items():
        png = render_png(plt, plot)
        path = os.path.join(a.img, f"eval-{name}.png")
        try:
            with open(path, "rb") as f:
                same = f.read() == png
        except OSError:
            same = False
        if not same:
            with open(path, "wb") as f:
                f.write(png)
            written += 1
    if new_text != text:
        with open(a.doc, "wb") as f:
            f.write(new_text.encode("utf-8"))
    print(f"{PROG}: {a.doc}: {len(names)} block(s), {len(changed)} changed; "
          f"{written} of {len(pngs)} plot(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
