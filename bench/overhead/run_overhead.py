#!/usr/bin/env python3
"""run_overhead.py OUT [options] - the overhead benchmark's runner (issue 25 item 4);
run_overhead.sh builds first and calls it (its header lists the options). Standard library only.

Each run writes one JSON line to OUT/overhead-<stamp>.jsonl:
  {"suite": "overhead", "program", "system", "round", "rc", "timed_out", "wall_s" (the whole
   process, start-up included, measured from outside), "startup_s" and "steady_per_s", "unit",
   "steady_s", "step_ms_median" (from the program's own JSON line, kept whole under "record"),
   "trio" (true for a three-at-once run, with "group_id" and "group_wall_s"), "stderr_tail",
   "t_start", "commit"}
and the first line is {"suite": "overhead", "kind": "env", ...}. --summary FILE... prints the
medians per program and system and their ratios to native instead of running anything."""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = {
    "train": "python3 bench/overhead/ovh_train.py {s}",
    "infer": "python3 bench/overhead/ovh_infer.py {s}",
    "conv": "python3 bench/overhead/ovh_conv.py {s}",
    "llama": "python3 bench/workloads/llama_onebuf.py --seconds {s}",
    "cuda": "{bin}/ovh_cuda {s}",
}
TRIO = ("train", "conv", "llama")
SYSTEMS = ("native", "msched", "auto", "nodaemon", "engine")
STARTUP_GUESS = 20.0  # s, for a program not yet seen in this call


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] overhead: {msg}", file=sys.stderr, flush=True)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except Exception:  # noqa: BLE001 - provenance only
        return ""


class Runner:
    def __init__(self, a):
        self.a = a
        self.t0 = time.time()
        self.stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        self.logdir = tempfile.mkdtemp(prefix="overhead-logs-")
        self.tmp = tempfile.mkdtemp(prefix="overhead-run-")
        self.sock = os.path.join(self.tmp, "gpu0.sock")
        self.xdg = os.path.join(self.tmp, "xdg")  # a fresh, empty XDG_RUNTIME_DIR for `auto`
        os.makedirs(self.xdg, mode=0o700)
        self.daemon = None
        self.children = []
        self.commit = os.environ.get("COMPAT_COMMIT") or sh(
            f"git -C {shlex.quote(ROOT)} rev-parse --short HEAD") or "unknown"
        self.out = open(os.path.join(a.out, f"overhead-{self.stamp}.jsonl"), "a")
        self.out.write(json.dumps({
            "suite": "overhead", "kind": "env", "commit": self.commit, "host": sh("hostname"),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "gpu": sh("nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1"),
            "torch": sh("python3 -c 'import torch; print(torch.__version__)' 2>/dev/null"),
            "seconds": a.seconds, "trio_seconds": a.trio_seconds, "rounds": a.rounds,
            "systems": a.systems, "daemon_budget": a.budget}) + "\n")
        self.walls = {}
        self.left = []

    def elapsed(self):
        return time.time() - self.t0

    def fits(self, est):
        return self.a.deadline <= 0 or self.elapsed() + est <= self.a.deadline

    def start_daemon(self):
        if self.daemon is not None:
            return
        dlog = open(os.path.join(self.logdir, "mschedd.log"), "w")
        argv = [self.a.mschedd, "--socket", self.sock, "--budget", self.a.budget, "--foreground",
                "-v"] + shlex.split(os.environ.get("OVH_MSCHEDD_ARGS", ""))
        self.daemon = subprocess.Popen(argv, cwd=ROOT, stdout=dlog, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(100):
            if os.path.exists(self.sock) or self.daemon.poll() is not None:
                break
            time.sleep(0.1)
        if self.daemon.poll() is not None:
            log(f"mschedd exited {self.daemon.returncode}: see its log")
        else:
            log(f"mschedd on {self.sock}, budget {self.a.budget}")

    def stop_daemon(self):
        d, self.daemon = self.daemon, None
        if d is None or d.poll() is not None:
            return
        d.terminate()
        try:
            d.wait(15)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()

    def argv_env(self, prog, system, seconds):
        cmd = PROGRAMS[prog].format(s=seconds, bin=self.a.bindir)
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        extra = shlex.split(os.environ.get("OVH_MSCHED_ARGS", ""))
        if system == "native":
            wrap = []
        elif system == "msched":
            self.start_daemon()
            env["MSCHED_SOCKET"] = self.sock
            wrap = [self.a.msched, "run"] + extra + ["--"]
        elif system == "auto":
            env.pop("MSCHED_SOCKET", None)
            env["XDG_RUNTIME_DIR"] = self.xdg
            wrap = [self.a.msched, "run"] + extra + ["--"]
        elif system == "nodaemon":
            wrap = [self.a.msched, "run", "--no-daemon"] + extra + ["--"]
        else:  # engine: alone, under a budget with room
            wrap = [self.a.msched, "run", "--no-daemon", "--budget", self.a.budget] + extra + ["--"]
        return wrap + shlex.split(cmd), env

    def spawn(self, prog, system, seconds, tag):
        argv, env = self.argv_env(prog, system, seconds)
        base = os.path.join(self.logdir, f"{prog}.{system}.{tag}")
        fo, fe = open(base + ".out", "w"), open(base + ".err", "w")
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fo, stderr=fe,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.children.append(p)
        return {"p": p, "fo": fo, "fe": fe, "base": base, "t": time.time(), "end": None,
                "prog": prog, "system": system, "timed_out": False, "argv": argv}

    def wait(self, hs, limit):
        end = time.time() + limit
        live = list(hs)
        while live:
            for h in list(live):
                if h["p"].poll() is not None:
                    h["end"] = time.time()
                    live.remove(h)
            if live and time.time() > end:
                for h in live:
                    h["timed_out"] = True
                    try:
                        os.killpg(h["p"].pid, signal.SIGTERM)
                        h["p"].wait(10)
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        try:
                            os.killpg(h["p"].pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                        h["p"].wait()
                    h["end"] = time.time()
                live = []
            time.sleep(0.01)
        for h in hs:
            h["fo"].close()
            h["fe"].close()
            self.children.remove(h["p"])

    def record(self, h, rnd, **extra):
        out = open(h["base"] + ".out", errors="replace").read()
        err = open(h["base"] + ".err", errors="replace").read()
        rec = None
        for line in out.splitlines():
            if line.startswith("{"):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    pass
        r = {"suite": "overhead", "program": h["prog"], "system": h["system"], "round": rnd,
             "rc": h["p"].returncode, "timed_out": h["timed_out"],
             "wall_s": round(h["end"] - h["t"], 3), "t_start": round(h["t"], 3),
             "commit": self.commit, "cmd": " ".join(shlex.quote(x) for x in h["argv"])}
        if rec:
            for k in ("startup_s", "steady_per_s", "unit", "steady_s", "step_ms_median"):
                r[k] = rec.get(k)
            r["record"] = {k: v for k, v in rec.items() if k != "progress"}
        if h["p"].returncode != 0 or rec is None:
            r["stderr_tail"] = err[-2000:]
        r.update(extra)
        self.out.write(json.dumps(r) + "\n")
        self.out.flush()
        self.walls[h["prog"]] = max(self.walls.get(h["prog"], 0), r["wall_s"])
        ok = r["rc"] == 0 and rec is not None
        log(f"{'trio ' if extra.get('trio') else ''}{h['prog']:6s} {h['system']:8s} round {rnd}: "
            + (f"wall {r['wall_s']:.1f} s, start-up {r['startup_s']} s, "
               f"{r['steady_per_s']} {r['unit']}/s" if ok else
               f"FAILED rc={r['rc']}{' (time limit)' if h['timed_out'] else ''}: "
               + (err.strip().splitlines() or ['(no stderr)'])[-1][:160]))

    def est(self, prog, seconds):
        return self.walls.get(prog, seconds + STARTUP_GUESS)

    def run_rounds(self, progs, systems):
        for rnd in range(self.a.rounds):
            # rotate the systems' order each round, so neither always goes first
            k = rnd % len(systems)
            order = systems[k:] + systems[:k]
            for prog in progs:
                for system in order:
                    if not self.fits(self.est(prog, self.a.seconds)):
                        self.left.append(f"{prog}/{system}/round {rnd}")
                        continue
                    h = self.spawn(prog, system, self.a.seconds, f"r{rnd}")
                    self.wait([h], self.a.seconds + self.a.limit)
                    self.record(h, rnd)

    def run_trio(self, systems):
        for rnd in range(self.a.trio_rounds):
            k = rnd % len(systems)
            for system in systems[k:] + systems[:k]:
                est = max(self.est(p, self.a.trio_seconds) for p in TRIO) + self.a.trio_seconds
                if not self.fits(est):
                    self.left.append(f"trio/{system}/round {rnd}")
                    continue
                gid = f"{self.stamp}-trio-{system}-{rnd}"
                log(f"trio {system} round {rnd}: {', '.join(TRIO)} at once")
                hs = [self.spawn(p, system, self.a.trio_seconds, f"trio{rnd}") for p in TRIO]
                self.wait(hs, self.a.trio_seconds + self.a.limit)
                gw = max(h["end"] for h in hs) - min(h["t"] for h in hs)
                for h in hs:
                    self.record(h, rnd, trio=True, group_id=gid, group_wall_s=round(gw, 3))

    def finish(self):
        for p in list(self.children):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.stop_daemon()
        self.out.close()
        with tarfile.open(os.path.join(self.a.out, f"overhead-logs-{self.stamp}.tgz"), "w:gz") as t:
            t.add(self.logdir, arcname=f"overhead-logs-{self.stamp}")


def summary(paths):
    recs = []
    for p in paths:
        files = [os.path.join(p, f) for f in sorted(os.listdir(p)) if f.endswith(".jsonl")] \
            if os.path.isdir(p) else [p]
        for f in files:
            for line in open(f):
                if line.strip():
                    r = json.loads(line)
                    if r.get("suite") == "overhead" and "program" in r:
                        recs.append(r)
    groups = {}
    for r in recs:
        if r.get("rc") == 0 and r.get("steady_per_s"):
            groups.setdefault((r["program"], bool(r.get("trio")), r["system"]), []).append(r)
    print(f"{'program':8s} {'trio':4s} {'system':8s} {'n':>2s} {'wall s':>8s} {'start-up s':>10s} "
          f"{'steady/s':>12s} {'wall/native':>11s} {'steady/native':>13s}")
    for (prog, trio, system), rs in sorted(groups.items()):
        med = {k: statistics.median([r[k] for r in rs]) for k in ("wall_s", "startup_s", "steady_per_s")}
        nat = groups.get((prog, trio, "native"))
        rw = rt = ""
        if nat and system != "native":
            nw = statistics.median([r["wall_s"] for r in nat])
            ns = statistics.median([r["steady_per_s"] for r in nat])
            rw, rt = f"{med['wall_s'] / nw:.4f}", f"{med['steady_per_s'] / ns:.4f}"
        print(f"{prog:8s} {'yes' if trio else 'no':4s} {system:8s} {len(rs):2d} {med['wall_s']:8.2f} "
              f"{med['startup_s']:10.2f} {med['steady_per_s']:12.2f} {rw:>11s} {rt:>13s}")
    return 0


def main():
    ap = argparse.ArgumentParser(prog="run_overhead.sh")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(PROGRAMS))
    ap.add_argument("--systems", default="native,msched",
                    help="comma-separated, of " + ",".join(SYSTEMS))
    ap.add_argument("--trio", choices=("yes", "no", "only"), default="yes")
    ap.add_argument("--trio-rounds", type=int, default=1)
    ap.add_argument("--trio-seconds", type=float, default=20)
    ap.add_argument("--budget", default=os.environ.get("OVH_BUDGET", "126GiB"))
    ap.add_argument("--limit", type=float, default=180, help="s past SECONDS before a run is cut")
    ap.add_argument("--deadline", type=float, default=float(os.environ.get("OVH_DEADLINE", 540)))
    ap.add_argument("--bindir", default=os.path.join(ROOT, "build", "overhead"))
    ap.add_argument("--msched", default=os.environ.get("MSCHED", os.path.join(ROOT, "build/bin/msched")))
    ap.add_argument("--mschedd", default=os.environ.get("MSCHEDD", os.path.join(ROOT, "build/bin/mschedd")))
    ap.add_argument("--summary", nargs="+", metavar="RAW")
    a = ap.parse_args()
    if a.summary:
        return summary(a.summary)
    if not a.out:
        ap.error("OUT is required")
    progs = [p for p in a.only.split(",") if p] or list(PROGRAMS)
    systems = [s for s in a.systems.split(",") if s]
    for p in progs:
        if p not in PROGRAMS:
            ap.error(f"unknown program '{p}' (one of {', '.join(PROGRAMS)})")
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system '{s}' (one of {', '.join(SYSTEMS)})")
    os.makedirs(a.out, exist_ok=True)
    r = Runner(a)

    def on_term(signum, frame):
        log(f"signal {signum}: stopping; what ran so far is in {a.out}")
        r.finish()
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log(f"programs {','.join(progs)}; systems {','.join(systems)}; {a.rounds} rounds of "
        f"{a.seconds:g} s; trio {a.trio}; deadline {a.deadline:g} s")
    try:
        if a.trio != "only":
            r.run_rounds(progs, systems)
        if a.trio != "no":
            r.run_trio(systems)
    finally:
        r.finish()
    if r.left:
        log(f"not run before the deadline: {'; '.join(r.left)}")
        return 3
    log(f"done in {r.elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
