"""progress.py - a timed loop's progress samples, so a harness can compare processes over the
window they all ran in (bench/records.py `procs`).

Progress() at the loop's start; tick(done) after each task (done: tasks so far, in the unit of
the program's tasks_per_s); fields(done) at the end returns the record's "t_start", "t_end"
(wall-clock epoch seconds, comparable across the processes of one machine) and "progress":
[epoch seconds, tasks done] pairs, the first at the start (0 done), then at most one per
SAMPLE_S, the last at the end."""
import time

SAMPLE_S = 0.25


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
