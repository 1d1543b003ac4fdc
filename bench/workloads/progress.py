"""progress.py - a timed loop's start barrier and progress samples, so a harness can start the
processes of one run together and compare them over the window they all ran in
(bench/records.py `procs`).

barrier() after the warm-up, before the loop: with MSCHED_BENCH_BARRIER=DIR set, create
DIR/ready.<pid> and wait (idle, no GPU work) until DIR/go exists, at most
MSCHED_BENCH_BARRIER_S seconds (default 600); without it, return at once.

Progress() at the loop's start; tick(done) after each task (done: tasks so far, in the unit of
the program's tasks_per_s); fields(done) at the end returns the record's "t_start", "t_end"
(wall-clock epoch seconds, comparable across the processes of one machine) and "progress":
[epoch seconds, tasks done] pairs, the first at the start (0 done), then at most one per
SAMPLE_S, the last at the end.

Importing it makes SIGUSR1 print every thread's Python stack to stderr (faulthandler), so a
harness can say where a process that overran its loop was stuck before it kills it."""
import faulthandler
import os
import signal
import time

faulthandler.register(signal.SIGUSR1, all_threads=True)

SAMPLE_S = 0.25


def barrier():
    d = os.environ.get("MSCHED_BENCH_BARRIER")
    if not d:
        return
    open(os.path.join(d, f"ready.{os.getpid()}"), "w").close()
    limit = time.time() + float(os.environ.get("MSCHED_BENCH_BARRIER_S", "600"))
    while not os.path.exists(os.path.join(d, "go")) and time.time() < limit:
        time.sleep(0.05)


class Progress:
    def __init__(self):
        self.t0 = self.last = time.time()
        self.samples = [[round(self.t0, 3), 0]]

    def tick(self, done):
        t = time.time()
        if t - self.last >= SAMPLE_S:
            self.samples.append([round(t, 3), done])
            self.last = t

    def fields(self, done):
        t = time.time()
        self.samples.append([round(t, 3), done])
        return {"t_start": round(self.t0, 3), "t_end": round(t, 3), "progress": self.samples}
