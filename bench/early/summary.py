#!/usr/bin/env python3
"""summary.py BASE.jsonl EARLY.jsonl [LABEL_BASE LABEL_OTHER] - early start against the default
(bench/early/run_early.sh), or any other variant of opt (the labels name the two columns:
default "default" and "early_run").

For each pressure: the normalized throughput of `opt` (mean over the processes of tasks per
second over the same process's in the `ref` run, bench/micro/summarize_sweep.py) with the
daemon's defaults and with early_run, their ratio, each against the in-memory `slice` run
when the base sweep has one (opt's throughput over slice's), and from each opt run's daemon window the
switch split: mean switch (STOP to RUN), mean time to the first command and to the working set
complete, and the RUN-to-first-command median the shims measured. Prints a Markdown table; exit
status 1 when a file holds no opt record, 2 on bad usage."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "micro"))
import summarize_sweep as sw  # noqa: E402


def split(win):
    """(mean switch ms, mean first-command ms, mean complete ms, RUN-to-first median ms) of a
    daemon window record; None where it has no count."""
    d = win.get("daemon", {})

    def mean(total, count):
        n = d.get(count, 0)
        return 1000 * d.get(total, 0) / n if n else None

    med = win.get("run_first_median_s")
    return (mean("msched_switch_seconds_total", "msched_switches_total"),
            mean("msched_switch_first_command_seconds_total", "msched_switch_first_command_total"),
            mean("msched_switch_complete_seconds_total", "msched_switch_complete_total"),
            1000 * med if med is not None else None)


def fmt(v, unit=""):
    return "-" if v is None else f"{v:.1f}{unit}"


def main(argv):
    if len(argv) not in (2, 4):
        print(__doc__, file=sys.stderr)
        return 2
    la, lb = argv[2:4] if len(argv) == 4 else ("default", "early_run")
    located = sw.read_located(argv[:2])
    sw.slice_sets(located)
    records = [r for _, _, r in located]
    workload = next((r.get("workload") for r in records if r.get("workload")), "micro")
    rows = sw.compute_rows(records, workload)
    _, wins = sw.group(records, workload)
    by_p = {}
    for row in rows:
        if "opt" in row:
            kind = "early" if row["set"].startswith("adaptive (") else "base"
            by_p.setdefault(row["pressure"], {})[kind] = row
    if not by_p:
        print("summary.py: no opt records", file=sys.stderr)
        return 1
    print(f"{workload}: opt normalized throughput (% of ref), {la} against {lb}\n")
    print(f"| pressure | {la} | {lb} | ratio | % of slice ({la} / {lb}) "
          f"| switch ms ({la} / {lb}) "
          "| to first command ms | to set complete ms | RUN to first command, median ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in sorted(by_p):
        b, e = by_p[p].get("base"), by_p[p].get("early")
        sb = split(wins.get(((p, b["set"]), "opt"), {})) if b else (None,) * 4
        se = split(wins.get(((p, e["set"]), "opt"), {})) if e else (None,) * 4
        ratio = e["opt"] / b["opt"] if b and e and b["opt"] else None
        sl = b.get("slice") if b else None
        of_b = 100 * b["opt"] / sl if sl else None
        of_e = 100 * e["opt"] / sl if sl and e else None
        print(f"| {p} % | {fmt(b and b['opt'])} | {fmt(e and e['opt'])} | "
              f"{'-' if ratio is None else f'{ratio:.3f}'} | {fmt(of_b)} / {fmt(of_e)} | "
              f"{fmt(sb[0])} / {fmt(se[0])} | "
              f"{fmt(sb[1])} / {fmt(se[1])} | {fmt(sb[2])} / {fmt(se[2])} | "
              f"{fmt(sb[3])} / {fmt(se[3])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
