#!/usr/bin/env python3
"""run_compat.py OUT [options] - the compatibility suite's runner (run_compat.sh builds first,
then calls this; see its header for the options). Standard library only.

Each run of a program writes one JSON line to OUT/compat-<mode>-<stamp>.jsonl:
  {"suite": "compat", "program", "mode", "run", "rc", "timed_out", "wall_s", "result" (the
   RESULT line's text after the name, or null), "result_name", "footprint_mib" (native: the
   program's own FOOTPRINT_MIB line; other modes: the native footprint the budget came from),
   "budget_mib", "group" and "group_budget_mib" and "group_wall_s" (trio), "stderr_tail",
   "stdout_tail" (when there is no RESULT line), "info" (the INFO line), "cmd", "env",
   "t_start", "commit", "host"}
The first line of each file is {"suite": "compat", "kind": "env", ...}: GPU, driver, versions.
Every run's whole stdout and stderr (and each trio's mschedd log) go to
OUT/compat-logs-<stamp>.tgz."""
import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ("native", "big", "half", "trio")
# default per-run time limits (s); a run is also cut at the call's deadline
LIMITS = {"native": 180, "big": 300, "half": 420, "trio": 540}
# how long a mode is expected to take against native, to decide what still fits the deadline
FACTOR = {"native": 1.0, "big": 1.5, "half": 3.0, "trio": 2.0}
UNKNOWN_S = 60.0  # a program with no native wall time yet


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] compat: {msg}", file=sys.stderr, flush=True)


def parse_programs(path, bindir):
    progs = []
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 3)
        if len(parts) < 4 or parts[1] not in ("yes", "no"):
            sys.exit(f"{path}:{n}: expected: name yes|no env|- command")
        env = {}
        if parts[2] != "-":
            for kv in parts[2].split(","):
                k, _, v = kv.partition("=")
                env[k] = v
        cmd = parts[3].replace("{bin}", bindir)
        progs.append({"name": parts[0], "trio": parts[1] == "yes", "env": env, "cmd": cmd})
    return progs


def read_records(paths):
    """Every compat record in the JSONL files under these files/directories."""
    recs = []
    for p in paths:
        files = []
        if os.path.isdir(p):
            for dirpath, _, names in os.walk(p):
                files += [os.path.join(dirpath, f) for f in sorted(names) if f.endswith(".jsonl")]
        elif os.path.isfile(p):
            files.append(p)
        for f in files:
            for line in open(f):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if r.get("suite") == "compat" and "program" in r:
                    recs.append(r)
    return recs


def native_info(recs):
    """program -> (footprint MiB, native wall s) from the latest successful native run."""
    out = {}
    for r in sorted(recs, key=lambda r: r.get("t_start", 0)):
        if r.get("mode") == "native" and r.get("rc") == 0 and r.get("footprint_mib"):
            out[r["program"]] = (int(r["footprint_mib"]), float(r.get("wall_s") or UNKNOWN_S))
    return out


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except Exception:  # noqa: BLE001 - provenance only
        return ""


def tail(text, n):
    return text[-n:] if len(text) > n else text


class Runner:
    def __init__(self, args, progs):
        self.a = args
        self.progs = {p["name"]: p for p in progs}
        self.order = [p["name"] for p in progs]
        self.t0 = time.time()
        self.stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        self.logdir = tempfile.mkdtemp(prefix="compat-logs-")
        self.files = {}
        self.deferred = {}
        self.commit = os.environ.get("COMPAT_COMMIT") or sh(f"git -C {shlex.quote(ROOT)} rev-parse --short HEAD") or "unknown"
        self.host = sh("hostname")
        self.children = []
        self.daemon = None

    # -- output
    def out(self, mode):
        if mode not in self.files:
            path = os.path.join(self.a.out, f"compat-{mode}-{self.stamp}.jsonl")
            f = open(path, "a")
            f.write(json.dumps(self.env_record(mode)) + "\n")
            f.flush()
            self.files[mode] = f
        return self.files[mode]

    def env_record(self, mode):
        if not hasattr(self, "_env"):
            self._env = self.machine()
        return {"suite": "compat", "kind": "env", "mode": mode, **self._env}

    def machine(self):
        return {"commit": self.commit,
                "host": self.host,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "gpu": sh("nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1"),
                "cuda": sh("nvcc --version | tail -1"),
                "torch": sh("python3 -c 'import torch; print(torch.__version__)' 2>/dev/null"),
                "msched": self.a.msched}

    def write(self, rec):
        f = self.out(rec["mode"])
        f.write(json.dumps(rec) + "\n")
        f.flush()

    def save_logs(self):
        path = os.path.join(self.a.out, f"compat-logs-{self.stamp}.tgz")
        with tarfile.open(path, "w:gz") as t:
            t.add(self.logdir, arcname=f"compat-logs-{self.stamp}")

    # -- time
    def elapsed(self):
        return time.time() - self.t0

    def limit_for(self, mode, estimate):
        """The run's time limit, or None when it no longer fits the call's deadline."""
        lim = self.a.timeout or LIMITS[mode]
        if self.a.deadline > 0:
            left = self.a.deadline - self.elapsed()
            if estimate > left:
                return None
            if left + 30 < 20:
                return None
            lim = min(lim, left + 30)
        return lim

    # -- processes
    def spawn(self, prog, mode, wrap, tag, extra_env=None):
        env = dict(os.environ)
        env.update({"PYTHONUNBUFFERED": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
        env.update(prog["env"])
        if extra_env:
            env.update(extra_env)
        argv = wrap + shlex.split(prog["cmd"])
        base = os.path.join(self.logdir, f"{prog['name']}.{tag}")
        fo, fe = open(base + ".out", "w"), open(base + ".err", "w")
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fo, stderr=fe,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.children.append(p)
        return {"p": p, "fo": fo, "fe": fe, "base": base, "argv": argv, "t": time.time(),
                "prog": prog, "timed_out": False, "end": None}

    def kill(self, h):
        p = h["p"]
        if p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()

    def wait_each(self, hs, limit):
        """Wait for several processes, recording each one's own end time."""
        end = time.time() + limit
        live = list(hs)
        while live:
            for h in list(live):
                if h["p"].poll() is not None:
                    h["end"] = time.time()
                    live.remove(h)
            if not live:
                break
            if time.time() > end:
                for h in live:
                    h["timed_out"] = True
                    self.kill(h)
                    h["end"] = time.time()
                break
            time.sleep(0.01)
        for h in hs:
            h["fo"].close()
            h["fe"].close()
            if h["p"] in self.children:
                self.children.remove(h["p"])

    def record(self, h, mode, run, **extra):
        prog = h["prog"]
        out = open(h["base"] + ".out", errors="replace").read()
        err = open(h["base"] + ".err", errors="replace").read()
        rc = h["p"].returncode
        result = name = info = None
        footprint = None
        for line in out.splitlines():
            if line.startswith("RESULT "):
                parts = line.split(None, 2)
                name = parts[1] if len(parts) > 1 else ""
                result = parts[2] if len(parts) > 2 else ""
            elif line.startswith("FOOTPRINT_MIB "):
                try:
                    footprint = int(line.split()[1])
                except (IndexError, ValueError):
                    pass
            elif line.startswith("INFO "):
                info = line[5:]
        last = [ln for ln in out.splitlines() if ln.strip()]
        rec = {"suite": "compat", "program": prog["name"], "mode": mode, "run": run, "rc": rc,
               "timed_out": h["timed_out"], "wall_s": round(h["end"] - h["t"], 3),
               "result": result, "result_name": name,
               "result_last": bool(last) and last[-1].startswith("RESULT "),
               "info": info, "stderr_tail": tail(err, 2000),
               "cmd": " ".join(shlex.quote(a) for a in h["argv"]),
               "env": prog["env"], "t_start": round(h["t"], 3), "commit": self.commit,
               "host": self.host}
        if result is None:
            rec["stdout_tail"] = tail(out, 800)
        if mode == "native":
            rec["footprint_mib"] = footprint
        rec.update(extra)
        self.write(rec)
        status = "ok" if rc == 0 and result is not None else ("TIMEOUT" if h["timed_out"] else f"rc={rc}")
        first_err = ""
        if status != "ok":
            lines = [ln for ln in err.strip().splitlines() if ln.strip()]
            first_err = " | " + (lines[-1][:160] if lines else "(no stderr)")
        log(f"{mode:6s} {prog['name']:26s} {status:8s} {rec['wall_s']:7.1f} s"
            + (f" fp={footprint} MiB" if mode == "native" and footprint else "")
            + (f" budget={extra['budget_mib']} MiB" if extra.get("budget_mib") else "")
            + first_err)
        return rec

    # -- modes
    def msched_wrap(self, budget_mib=None, daemon=False):
        w = [self.a.msched, "run"]
        if not daemon:
            w.append("--no-daemon")
        if budget_mib is not None:
            w += ["--budget", f"{budget_mib}MiB"]
        w += shlex.split(os.environ.get("COMPAT_MSCHED_ARGS", ""))
        return w + ["--"]

    def run_single(self, mode, names, info):
        for name in names:
            prog = self.progs[name]
            fp, wall = info.get(name, (None, None))
            extra = {}
            wrap = []
            if mode != "native":
                if fp is None:
                    log(f"{mode:6s} {name:26s} skipped: no native footprint (run --mode native first, or --from DIR)")
                    self.write({"suite": "compat", "program": name, "mode": mode, "run": 0,
                                "rc": None, "skipped": "no native footprint",
                                "t_start": round(time.time(), 3), "commit": self.commit})
                    continue
                if mode == "big":
                    budget = min(max(2 * fp, fp + 2048), self.a.cap_mib)
                else:
                    budget = max(fp // 2, 64)
                extra = {"footprint_mib": fp, "budget_mib": budget}
                wrap = self.msched_wrap(budget)
            for run in range(self.a.repeat):
                est = (wall or UNKNOWN_S) * FACTOR[mode]
                lim = self.limit_for(mode, est)
                if lim is None:
                    self.deferred.setdefault(mode, []).append(name)
                    break
                h = self.spawn(prog, mode, wrap, f"{mode}.{run}")
                self.wait_each([h], lim)
                self.record(h, mode, run, time_limit_s=round(lim), **extra)

    def groups(self, names, info):
        if self.a.trios:
            gs = [g.split(",") for g in self.a.trios.split(";") if g.strip()]
            for g in gs:
                for n in g:
                    if n not in self.progs:
                        sys.exit(f"run_compat: --trios names an unknown program '{n}'")
            return gs
        pool = [n for n in names if self.progs[n]["trio"] and n in info]
        gs = [pool[i:i + 3] for i in range(0, len(pool), 3)]
        if gs and len(gs[-1]) < 3 and len(pool) >= 3:
            # fill the last group from the start of the list (those run twice in this column)
            fill = [n for n in pool if n not in gs[-1]][: 3 - len(gs[-1])]
            gs[-1] = gs[-1] + fill
        return gs

    def run_trio(self, names, info):
        for n in names:
            if n not in info:
                log(f"trio   {n:26s} skipped: no native footprint")
                self.write({"suite": "compat", "program": n, "mode": "trio", "run": 0, "rc": None,
                            "skipped": "no native footprint", "t_start": round(time.time(), 3),
                            "commit": self.commit})
        for gi, group in enumerate(self.groups(names, info)):
            missing = [n for n in group if n not in info]
            if missing:
                log(f"trio group {','.join(group)} skipped: no native footprint for {','.join(missing)}")
                continue
            fps = [info[n][0] for n in group]
            walls = [info[n][1] for n in group]
            budget = max(int(math.ceil(sum(fps) / 1.5)), 64)
            est = sum(walls) * FACTOR["trio"]
            lim = self.limit_for("trio", est)
            if lim is None:
                self.deferred.setdefault("trio", []).append(",".join(group))
                continue
            sock_dir = tempfile.mkdtemp(prefix="compat-sock-")
            sock = os.path.join(sock_dir, "gpu0.sock")
            dlog = open(os.path.join(self.logdir, f"trio{gi}.{'+'.join(group)}.mschedd.log"), "w")
            dargv = [self.a.mschedd, "--socket", sock, "--budget", f"{budget}MiB", "--foreground",
                     "-v"] + shlex.split(os.environ.get("COMPAT_MSCHEDD_ARGS", ""))
            self.daemon = subprocess.Popen(dargv, cwd=ROOT, stdout=dlog, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
            for _ in range(100):
                if os.path.exists(sock) or self.daemon.poll() is not None:
                    break
                time.sleep(0.1)
            if self.daemon.poll() is not None:
                log(f"trio group {','.join(group)}: mschedd exited {self.daemon.returncode} (see its log)")
            log(f"trio group {gi}: {', '.join(group)}; footprints {fps} MiB, daemon budget {budget} MiB")
            hs = [self.spawn(self.progs[n], "trio", self.msched_wrap(daemon=True), f"trio{gi}",
                             {"MSCHED_SOCKET": sock}) for n in group]
            self.wait_each(hs, lim)
            t0, t1 = min(h["t"] for h in hs), max(h["end"] for h in hs)
            for h, fp in zip(hs, fps):
                self.record(h, "trio", 0, footprint_mib=fp, budget_mib=None, group=group,
                            group_index=gi, group_id=f"{self.stamp}-{gi}", group_budget_mib=budget,
                            group_wall_s=round(t1 - t0, 3), group_native_sum_s=round(sum(walls), 3),
                            time_limit_s=round(lim))
            self.stop_daemon()
            dlog.close()
            try:
                os.rmdir(sock_dir)
            except OSError:
                pass

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

    def cleanup(self):
        for p in list(self.children):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.stop_daemon()


def main():
    ap = argparse.ArgumentParser(prog="run_compat.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--mode", action="append", choices=MODES, default=[])
    ap.add_argument("--only", action="append", default=[],
                    help="comma-separated program names (repeatable)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--from", dest="from_", action="append", default=[],
                    help="earlier results (file or directory): native footprints, --resume")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=float(os.environ.get("COMPAT_DEADLINE", 540)))
    ap.add_argument("--timeout", type=float, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--trios", default="")
    ap.add_argument("--cap-mib", type=int, default=133120)
    ap.add_argument("--bindir", default=os.path.join(ROOT, "build", "compat"))
    ap.add_argument("--programs", default=os.path.join(ROOT, "bench/compat/programs.txt"),
                    help="the program list (tests give their own)")
    ap.add_argument("--msched", default=os.environ.get("MSCHED", os.path.join(ROOT, "build/bin/msched")))
    ap.add_argument("--mschedd", default=os.environ.get("MSCHEDD", os.path.join(ROOT, "build/bin/mschedd")))
    a = ap.parse_args()
    progs = parse_programs(a.programs, a.bindir)
    names = [p["name"] for p in progs]
    only = [n for o in a.only for n in o.split(",") if n]
    for n in only:
        if n not in names:
            sys.exit(f"run_compat: unknown program '{n}' (see --list)")
    sel = [n for n in names if not only or n in only]
    modes = a.mode or list(MODES)
    if a.list:
        for p in progs:
            if p["name"] in sel:
                env = ",".join(f"{k}={v}" for k, v in p["env"].items()) or "-"
                print(f"{p['name']:26s} trio={'yes' if p['trio'] else 'no ':3s} env={env:45s} {p['cmd']}")
        return 0
    if not a.out:
        ap.error("OUT is required (except with --list)")
    os.makedirs(a.out, exist_ok=True)
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    srcs = list(a.from_)
    default_from = os.environ.get("COMPAT_DEFAULT_FROM") or os.path.join(ROOT, "bench/results/gpu/compat")
    if not srcs and os.path.isdir(default_from):
        srcs.append(default_from)
    r = Runner(a, progs)

    def on_term(signum, frame):
        log(f"signal {signum}: stopping; what ran so far is in {a.out}")
        r.cleanup()
        r.save_logs()
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log(f"modes {' '.join(modes)}; {len(sel)} programs; deadline {a.deadline:.0f} s; results in {a.out}")
    try:
        for mode in modes:
            prior = read_records(srcs + [a.out])
            info = native_info(prior)
            todo = sel
            if a.resume:
                # what this run (OUT) or an explicit --from already has, never the default
                # directory's records: those are another build's
                mine = prior if a.from_ else read_records([a.out])
                done = {x["program"] for x in mine if x.get("mode") == mode and "rc" in x
                        and x.get("rc") is not None}
                todo = [n for n in sel if n not in done]
                if len(todo) < len(sel):
                    log(f"{mode}: --resume skips {len(sel) - len(todo)} programs already run")
            if mode == "trio":
                r.run_trio(todo, info)
            else:
                r.run_single(mode, todo, info)
    finally:
        r.cleanup()
        for f in r.files.values():
            f.close()
        r.save_logs()
    if r.deferred:
        log("not run, the deadline was near (" + f"{a.deadline:.0f} s" + "); continue with:")
        for mode, ns in r.deferred.items():
            if mode == "trio":
                print(f"  bench/compat/run_compat.sh OUT --mode trio --trios '{';'.join(ns)}'",
                      file=sys.stderr)
            else:
                print(f"  bench/compat/run_compat.sh OUT --mode {mode} --only {','.join(ns)}",
                      file=sys.stderr)
        return 3
    log(f"done in {r.elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
