"""records.py - the JSON lines the benchmark harnesses write (bench/micro/run_sweep.sh,
bench/workloads/run_rtbe.sh), built from one run's raw directory.

    records.py proc DIR FILE KEY=VALUE...   one process's record: the KEY=VALUE fields (a value
                                            that parses as JSON is taken as such, else a
                                            string) and the last JSON line of DIR/FILE, or
                                            "error" when the process printed none
    records.py window DIR KEY=VALUE...      the daemon's window: the KEY=VALUE fields,
                                            "daemon": the counters' growth from DIR/m0.prom to
                                            DIR/m1.prom, "switch_seconds_max" from DIR/m2.prom
                                            when it exists, else from m1.prom

Only the daemon's own metrics (no label but gpu) are read; per-task series are skipped. A
missing metrics file counts as all zeros (the record still says which counters it covers).
Prints one JSON line; exit 2 on bad usage."""
import json
import os
import re
import sys

WINDOW_KEYS = ("msched_switches_total", "msched_switch_seconds_total",
               "msched_switch_stop_seconds_total", "msched_populated_bytes_total",
               "msched_evicted_bytes_total")


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
    return rec


def window(d, extra):
    a, b = prom(os.path.join(d, "m0.prom")), prom(os.path.join(d, "m1.prom"))
    last = os.path.join(d, "m2.prom")
    end = prom(last) if os.path.exists(last) else b
    rec = dict(extra)
    rec["daemon"] = {k: b.get(k, 0) - a.get(k, 0) for k in WINDOW_KEYS}
    rec["switch_seconds_max"] = end.get("msched_switch_seconds_max")
    return rec


def main(argv):
    if len(argv) >= 3 and argv[0] == "proc":
        print(json.dumps(proc(argv[1], argv[2], fields(argv[3:]))))
    elif len(argv) >= 2 and argv[0] == "window":
        print(json.dumps(window(argv[1], fields(argv[2:]))))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
