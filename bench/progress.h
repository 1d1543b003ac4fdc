// progress.h - a timed loop's start barrier and progress samples, the C++ side of
// bench/workloads/progress.py (see there): the harness starts the processes of one run
// together, and bench/records.py `procs` compares them over the window they all ran in.
// Header-only, for the benchmark programs (micro.cu, sci.cu); one loop per object, one thread.
//
//   ms_bench_barrier();      after the warm-up: with MSCHED_BENCH_BARRIER=DIR, DIR/ready.<pid>,
//                            then wait for DIR/go (at most MSCHED_BENCH_BARRIER_S, default 600)
//   ms_progress p;           at the loop's start (the first sample: now, 0 done)
//   p.tick(done);            after each task; keeps at most one sample per 0.25 s
//   p.print(stdout, done);   at the end: `, "t_start": T, "t_end": T, "progress": [[T, N], ...]`
//                            (wall-clock epoch seconds), to splice into the result's JSON object
#ifndef MS_BENCH_PROGRESS_H
#define MS_BENCH_PROGRESS_H

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

static inline void ms_bench_barrier()
{
    const char *d = getenv("MSCHED_BENCH_BARRIER");
    if (!d || !*d)
        return;
    std::string dir(d), ready = dir + "/ready." + std::to_string((long)getpid()), go = dir + "/go";
    FILE *f = fopen(ready.c_str(), "w");
    if (!f) {
        fprintf(stderr, "cannot create %s (MSCHED_BENCH_BARRIER)\n", ready.c_str());
        exit(1);
    }
    fclose(f);
    const char *lim = getenv("MSCHED_BENCH_BARRIER_S");
    double limit = lim && *lim ? atof(lim) : 600.0;
    struct stat st;
    for (double waited = 0; stat(go.c_str(), &st) != 0 && waited < limit; waited += 0.05) {
        struct timespec ts = {0, 50000000L};
        nanosleep(&ts, nullptr);
    }
}

struct ms_progress {
    static double wall()
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    }

    double t0, last;
    std::vector<std::pair<double, size_t>> s;

    ms_progress() : t0(wall()), last(t0)
    {
        s.emplace_back(t0, 0);
    }

    void tick(size_t done)
    {
        double t = wall();
        if (t - last >= 0.25) {
            s.emplace_back(t, done);
            last = t;
        }
    }

    void print(FILE *f, size_t done)
    {
        double t = wall();
        s.emplace_back(t, done);
        fprintf(f, ", \"t_start\": %.3f, \"t_end\": %.3f, \"progress\": [", t0, t);
        for (size_t i = 0; i < s.size(); i++)
            fprintf(f, "%s[%.3f, %zu]", i ? ", " : "", s[i].first, s[i].second);
        fputc(']', f);
    }
};

#endif
