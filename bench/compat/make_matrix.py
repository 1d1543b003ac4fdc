#!/usr/bin/env python3
"""make_matrix.py RAW... [--out FILE] [--check] - the compatibility matrix (docs/compatibility.md)
from run_compat.sh's records.

RAW: JSONL files or directories holding them (records with "suite": "compat"). For each program
(in bench/compat/programs.txt's order, then any others by name) and each column (native; engine
on with a big budget; alone at half the footprint; three at once under one mschedd at 150 %)
the cell says how the runs of that column compare with the native result:
  identical   the RESULT digest equals native's (every run of the column)
  close       the digest differs but every summary value is within the tolerance the program
              states (tol=): noise of an op that is not bit-deterministic, not corruption
  different   the digest differs and a value is outside the tolerance
  failed      non-zero exit, time limit, or no RESULT line (the reason in the notes below)
  -           not run
A column with several runs shows the worst outcome and the count. Each cell also gives the
column's median wall time as a ratio to native's median (trio: the program's own wall time in
its group). Native's cell gives its median wall time, footprint, and whether repeated native
runs agreed with each other.

--out (default docs/compatibility.md) is replaced; --check writes nothing and exits 1 when the
file would change. Exit 2 on a malformed record or no records."""
import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLUMNS = [("native", "native"), ("big", "engine on, budget above footprint"),
           ("half", "alone, budget half the footprint"), ("trio", "three at once, 150 %")]
RANK = {"identical": 0, "close": 1, "different": 2, "failed": 3}


def die(msg):
    print(f"make_matrix: {msg}", file=sys.stderr)
    sys.exit(2)


def load(paths):
    recs, envs = [], []
    files = []
    for p in paths:
        if os.path.isdir(p):
            for dirpath, _, names in sorted(os.walk(p)):
                files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".jsonl")]
        elif os.path.isfile(p):
            files.append(p)
        else:
            die(f"no such file or directory: {p}")
    for f in files:
        for n, line in enumerate(open(f), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                die(f"{f}:{n}: malformed JSON")
            if not isinstance(r, dict) or r.get("suite") != "compat":
                continue
            if r.get("kind") == "env":
                envs.append(r)
            elif "program" in r and r.get("mode") in dict(COLUMNS):
                recs.append(r)
    return recs, envs


def program_order(recs, listfile):
    order = []
    if os.path.isfile(listfile):
        for line in open(listfile):
            line = line.strip()
            if line and not line.startswith("#"):
                order.append(line.split()[0])
    seen = {r["program"] for r in recs}
    return [p for p in order if p in seen] + sorted(seen - set(order))


def parse_result(s):
    """'digest tol=R v1 v2 ...' -> (digest, tol or None, [values])."""
    toks = (s or "").split()
    if not toks:
        return None, None, []
    tol, vals = None, []
    rest = toks[1:]
    if rest and rest[0].startswith("tol="):
        try:
            tol = float(rest[0][4:])
        except ValueError:
            tol = None
        rest = rest[1:]
    for t in rest:
        try:
            vals.append(float(t))
        except ValueError:
            vals.append(t)
    return toks[0], tol, vals


def ok(r):
    return (r.get("rc") == 0 and not r.get("timed_out") and r.get("result") is not None
            and r.get("result_name") in (None, r["program"]))


def compare(ref, r):
    """identical / close / different for two successful runs' result strings."""
    d0, tol, v0 = parse_result(ref)
    d1, _, v1 = parse_result(r)
    if d0 == d1:
        return "identical"
    if tol is None or len(v0) != len(v1) or not v0:
        return "different"
    for a, b in zip(v0, v1):
        if isinstance(a, str) or isinstance(b, str):
            if a != b:
                return "different"
        elif not (a == b or abs(a - b) <= tol * max(abs(a), abs(b))):
            return "different"
    return "close"


def failure(r):
    if r.get("skipped"):
        return f"skipped: {r['skipped']}"
    if r.get("timed_out"):
        why = f"time limit ({r.get('time_limit_s', '?')} s)"
    elif r.get("rc") not in (0, None):
        why = f"exit {r['rc']}"
    elif r.get("result") is None:
        why = "no RESULT line"
    else:
        why = f"RESULT names {r.get('result_name')}"
    lines = [ln.strip() for ln in (r.get("stderr_tail") or "").splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if len(last) > 200:
        last = last[:197] + "..."
    return why + (f": `{last.replace('`', '')}`" if last else "")


def short(result):
    """A result for the notes: the digest's first 12 characters and the summary values."""
    d, tol, vals = parse_result(result)
    text = (d or "")[:12] + "... " + " ".join(str(v) for v in vals)
    return text[:150]


def reason(r):
    """A failed run's cause in a word or two, for its cell."""
    if r.get("timed_out"):
        return "time limit"
    if r.get("rc") not in (0, None):
        return f"exit {r['rc']}"
    if r.get("result") is None:
        return "no RESULT"
    return "wrong RESULT name"


def ratio(x, ref):
    if x is None or not ref:
        return ""
    return f"{x / ref:.2f}x"


def fmt_s(x):
    return f"{x:.1f} s" if x is not None else "-"


def build(recs, envs, sources):
    progs = program_order(recs, os.path.join(ROOT, "bench/compat/programs.txt"))
    by = {}
    for r in sorted(recs, key=lambda r: (r.get("t_start") or 0, r.get("run") or 0)):
        by.setdefault((r["program"], r["mode"]), []).append(r)
    rows, notes, counts = [], [], {c: {k: 0 for k in list(RANK) + ["-"]} for c, _ in COLUMNS}
    ratios = {c: [] for c, _ in COLUMNS}
    for p in progs:
        native = by.get((p, "native"), [])
        good = [r for r in native if ok(r)]
        ref = good[0]["result"] if good else None
        nwall = statistics.median([r["wall_s"] for r in good]) if good else None
        fps = [r["footprint_mib"] for r in good if r.get("footprint_mib")]
        cells = []
        for col, title in COLUMNS:
            rs = [r for r in by.get((p, col), []) if not r.get("skipped")]
            skipped = [r for r in by.get((p, col), []) if r.get("skipped")]
            if not rs:
                cells.append("-")
                counts[col]["-"] += 1
                if skipped:
                    notes.append((p, title, failure(skipped[-1])))
                continue
            outcomes = []
            for r in rs:
                if not ok(r):
                    outcomes.append("failed")
                    notes.append((p, title, failure(r)))
                elif col == "native":
                    outcomes.append(compare(ref, r["result"]))
                elif ref is None:
                    outcomes.append("no native result")
                else:
                    o = compare(ref, r["result"])
                    outcomes.append(o)
                    if o != "identical":
                        notes.append((p, title, f"{o}: `{short(r['result'])}` against native "
                                                f"`{short(ref)}`"))
            ranked = [o for o in outcomes if o in RANK]
            worst = max(ranked, key=RANK.get) if ranked else outcomes[0]
            n = len(outcomes)
            word = worst if n == 1 else f"{worst} ({outcomes.count(worst)}/{n})"
            if worst == "failed":
                why = sorted({reason(r) for r in rs if not ok(r)})
                word += f" ({', '.join(why)})" if n == 1 else f", {', '.join(why)}"
            walls = [r["wall_s"] for r in rs if ok(r)]
            mw = statistics.median(walls) if walls else None
            if col == "native":
                if worst == "identical":
                    word = "ok" if n == 1 else f"ok, {n} runs identical"
                elif worst in ("close", "different"):
                    word = f"ok, runs {worst} to each other ({n} runs)"
                    notes.append((p, title, f"repeated native runs were {worst}: the program is not "
                                            "bit-deterministic by itself"))
                cell = word + (f", {fmt_s(mw)}" if mw is not None else "")
                if fps:
                    cell += f", {max(fps)} MiB"
            else:
                cell = word + (f", {ratio(mw, nwall)}" if mw is not None and nwall else "")
                if mw is not None and nwall:
                    ratios[col].append(mw / nwall)
            counts[col][worst if worst in RANK else "failed"] += 1
            cells.append(cell)
        rows.append((p, cells))

    # trio groups
    groups = {}
    for r in recs:
        if r["mode"] == "trio" and r.get("group") and not r.get("skipped"):
            gid = r.get("group_id") or f"{r.get('commit')}-{r.get('group_index')}"
            groups.setdefault((tuple(r["group"]), r.get("group_budget_mib"), gid), []).append(r)
    grows = []
    for (g, budget, _), rs in sorted(groups.items(), key=lambda kv: min(r.get("t_start") or 0 for r in kv[1])):
        gw = max(r.get("group_wall_s") or 0 for r in rs)
        ns = rs[0].get("group_native_sum_s")
        fails = sum(1 for r in rs if not ok(r))
        grows.append((g, budget, sum(r.get("footprint_mib") or 0 for r in rs[:3]), gw, ns, fails))

    out = []
    w = out.append
    w("# Compatibility: real programs under msched")
    w("")
    w("<!-- Generated by bench/compat/make_matrix.py from the raw records of bench/compat/run_compat.sh;")
    w("     do not edit by hand: rerun the script. -->")
    w("")
    w("Each program of `bench/compat/` (the list and what each one exercises: `bench/compat/programs.txt`")
    w("and each program's header) prints the digest of its GPU results. Columns: **native** (no msched;")
    w("its wall time and the device memory it held, which sizes the budgets); **engine on** (`msched run")
    w("--no-daemon --budget` twice the footprint, at least 2 GiB more); **half** (alone, a budget of half")
    w("its footprint); **trio** (three programs at once, each under `msched run`, one `mschedd` whose")
    w("budget is their summed footprints / 1.5). A cell says whether the column's runs gave the native")
    w("digest (*identical*), only values within the program's stated tolerance (*close*), something else")
    w("(*different*) or no result (*failed*), and the column's wall time as a ratio to native.")
    w("")
    if envs:
        seen = []
        for e in envs:
            k = (e.get("gpu"), e.get("cuda"), e.get("torch"), e.get("commit"))
            if k not in seen:
                seen.append(k)
        w("Measured on:")
        for gpu, cuda, torch, commit in seen:
            w(f"- {gpu or 'unknown GPU'}; {cuda or 'CUDA ?'}; PyTorch {torch or '?'}; msched {commit or '?'}")
        dates = sorted({e.get("date") for e in envs if e.get("date")})
        if dates:
            w(f"- runs from {dates[0]} to {dates[-1]}" if len(dates) > 1 else f"- run on {dates[0]}")
        w("")
    w("| column | identical | close | different | failed | not run | median wall vs native |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for col, title in COLUMNS:
        c = counts[col]
        med = f"{statistics.median(ratios[col]):.2f}x" if ratios[col] else "-"
        if col == "native":
            med = "1.00x" if c["identical"] + c["close"] + c["different"] else "-"
        w(f"| {title} | {c['identical']} | {c['close']} | {c['different']} | {c['failed']} | {c['-']} | {med} |")
    w("")
    w("| program | " + " | ".join(t for _, t in COLUMNS) + " |")
    w("| --- |" + " --- |" * len(COLUMNS))
    for p, cells in rows:
        w(f"| {p} | " + " | ".join(cells) + " |")
    w("")
    if grows:
        w("Groups of three (trio column): the group's wall time from the first start to the last end,")
        w("against the sum of its programs' native wall times (run one after the other).")
        w("")
        w("| group | footprints | daemon budget | group wall | native, one after another | failed |")
        w("| --- | --- | --- | --- | --- | --- |")
        for g, budget, fp, gw, ns, fails in grows:
            w(f"| {', '.join(g)} | {fp} MiB | {budget} MiB | {fmt_s(gw)} | {fmt_s(ns)} | {fails} |")
        w("")
    if notes:
        w("Notes (every run that was not identical to native, and why):")
        w("")
        for p, title, text in notes:
            w(f"- {p}, {title}: {text}")
        w("")
    w(f"Raw records: {', '.join(f'`{s}`' for s in sources)}.")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", nargs="+")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/compatibility.md"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    recs, envs = load(a.raw)
    if not recs:
        die("no compat records in " + ", ".join(a.raw))
    sources = []
    for s in a.raw:
        s = os.path.relpath(os.path.abspath(s), ROOT)
        sources.append(s if not s.startswith("..") else os.path.basename(s.rstrip("/")))
    text = build(recs, envs, sources)
    old = open(a.out).read() if os.path.exists(a.out) else None
    if a.check:
        if old != text:
            print(f"make_matrix: {a.out} is not up to date", file=sys.stderr)
            return 1
        return 0
    if old != text:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
    print(f"make_matrix: {len(recs)} records, {len(text.splitlines())} lines -> {a.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
