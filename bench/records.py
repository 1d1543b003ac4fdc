"""records.py - the JSON lines the benchmark harnesses write (bench/micro/run_sweep.sh,
bench/workloads/run_rtbe.sh), built from one run's raw directory.

    records.py proc DIR FILE KEY=VALUE...   one process's record: the KEY=VALUE fields (a value
                                            that parses as JSON is taken as such, else a
                                            string) and the last JSON line of DIR/FILE, or
                                            "error" when the process printed none (the
                                            harness's reason from DIR/FILE's stem + ".killed"
                                            when it killed the process)
    records.py procs DIR N KEY=VALUE...     processes 0..N-1 of one run (DIR/proc_I.json), one
                                            line each, "proc": I added, their rates taken over
                                            the window they all ran in (below)
    records.py window DIR KEY=VALUE...      the daemon's window: the KEY=VALUE fields,
                                            "daemon": the counters' growth from DIR/m0.prom to
                                            DIR/m1.prom, "switch_seconds_max" from DIR/m2.prom
                                            when it exists, else from m1.prom

The common window: a program that reports "progress" samples ([epoch seconds, tasks done];
bench/workloads/progress.py, bench/progress.h) started and ended its timed loop at the first
and last. Processes of one run do not start their loops together (loading takes longer under
msched, and for some more than others), and one still running after the others ended has the
GPU to itself: its own-loop rate flatters it. So `procs` takes the window from the latest start
to the earliest end among the processes that produced a result, and when it lasts at least
MIN_OVERLAP_S, each one's "tasks_per_s" becomes its rate inside it (tasks done interpolated
linearly between samples), its own-loop rate kept as "tasks_per_s_own". Every record gets
"overlap_s" (the window's length, negative when there was none); the samples are dropped. When
a process that produced a result has no samples, the rates stay as the programs reported them.

Only the daemon's own metrics (no label but gpu) are read; per-task series are skipped. A
missing metrics file counts as all zeros (the record still says which counters it covers).
Prints one JSON line; exit 2 on bad usage."""
import json
import os
import re
import sys

MIN_OVERLAP_S = 5.0
WINDOW_KEYS = ("msched_switches_total", "msched_switch_seconds_total",
               "msched_switch_stop_seconds_total", "msched_populated_bytes_total",
               "msched_evicted_bytes_total", "msched_switch_first_command_seconds_total",
               "msched_switch_first_command_total", "msched_switch_complete_seconds_total",
               "msched_switch_complete_total")


def fields(args):
    out = {}
    for a in args:
        k, sep, v = a.partition("=")
        if not sep or not k:
            sys.exit(f"records.py: '{a}' is not KEY=VALUE")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def prom(path):
    """The daemon's own metrics in a Prometheus text file: {name: value}; {} when unreadable."""
    m = {}
    try:
        for line in open(path):
            f = line.split()
            if len(f) == 2 and not line.startswith("#") and \
                    re.fullmatch(r'[a-z_]+(\{gpu="\d+"\})?', f[0]):
                m[f[0].split("{")[0]] = float(f[1])
    except OSError:
        pass
    return m


def proc(d, name, extra):
    rec = dict(extra)
    try:
        lines = [l for l in open(os.path.join(d, name)) if l.startswith("{")]
        rec.update(json.loads(lines[-1]))
    except (OSError, IndexError, ValueError) as e:  # the run failed: say so in the record
        rec["error"] = f"no result ({e.__class__.__name__})"
        try:
            with open(os.path.join(d, os.path.splitext(name)[0] + ".killed")) as f:
                rec["error"] = f.read().strip() or rec["error"]
        except OSError:
            pass
    return rec


def done_at(samples, t):
    """Tasks done at time t, linear between the samples (sorted by time; t within them)."""
    for (ta, na), (tb, nb) in zip(samples, samples[1:]):
        if ta <= t <= tb:
            return na if tb == ta else na + (nb - na) * (t - ta) / (tb - ta)
    return samples[-1][1] if t > samples[-1][0] else samples[0][1]


def common_window(recs):
    """Rewrite the rates of one run's records over their common window (module docstring)."""
    ok = [r for r in recs if "error" not in r]
    if not ok or any(len(r.get("progress") or []) < 2 for r in ok):
        for r in recs:
            r.pop("progress", None)
        return recs
    a = max(r["progress"][0][0] for r in ok)
    b = min(r["progress"][-1][0] for r in ok)
    for r in ok:
        samples = r.pop("progress")
        r["overlap_s"] = round(b - a, 3)
        if b - a >= MIN_OVERLAP_S:
            r["tasks_per_s_own"] = r.get("tasks_per_s")
            r["tasks_per_s"] = round((done_at(samples, b) - done_at(samples, a)) / (b - a), 3)
    return recs


def procs(d, n, extra):
    return common_window([proc(d, f"proc_{i}.json", dict(extra, proc=i)) for i in range(n)])


def window(d, extra):
    a, b = prom(os.path.join(d, "m0.prom")), prom(os.path.join(d, "m1.prom"))
    last = os.path.join(d, "m2.prom")
    end = prom(last) if os.path.exists(last) else b
    rec = dict(extra)
    rec["daemon"] = {k: b.get(k, 0) - a.get(k, 0) for k in WINDOW_KEYS}
    rec["switch_seconds_max"] = end.get("msched_switch_seconds_max")
    # RUN to first command (the shims' measure): the median of the last RUNs, at the window's end
    rec["run_first_median_s"] = b.get("msched_run_first_command_median_seconds")
    rec["run_first_max_s"] = end.get("msched_run_first_command_max_seconds")
    return rec


def main(argv):
    if len(argv) >= 3 and argv[0] == "proc":
        print(json.dumps(proc(argv[1], argv[2], fields(argv[3:]))))
    elif len(argv) >= 3 and argv[0] == "procs" and argv[2].isdigit():
        for r in procs(argv[1], int(argv[2]), fields(argv[3:])):
            print(json.dumps(r))
    elif len(argv) >= 2 and argv[0] == "window":
        print(json.dumps(window(argv[1], fields(argv[2:]))))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
