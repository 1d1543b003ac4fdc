/*
 * cmd_demo.c - `msched demo`: a short, readable comparison of every memory policy on one
 * built-in workload, with a plot.
 *
 * Design
 *   A fixed, quick experiment (the micro workload at 200 % of a 16 GiB budget on the H200
 *   profile, 10 s of simulated time per policy) that runs in a few seconds of real time, then
 *   a few lines on what was compared, the table, and where the plot went. Until the CUDA
 *   backend drives a real GPU from here, the demo always simulates and says so. The default
 *   plot goes to the current directory; when that cannot be written (a read-only or removed
 *   directory) the demo says so and still succeeds, since the table is its result. A plot
 *   asked for with --svg that cannot be written is an error (exit 1).
 */
#include "cli/cli.h"

#include "sim/svg.h"
#include "sim/sweep.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SVG "msched-demo.svg"

static void demo_help(FILE *f)
{
    fprintf(f, "usage: msched demo [--svg FILE] [--progress]\n"
               "Compare every memory policy on the built-in micro workload at 200%% of a 16 GiB\n"
               "budget (H200 profile, simulated), print a table and write a plot\n"
               "(default ./msched-demo.svg; where the current directory cannot be written, the\n"
               "plot is skipped with a note). 'msched sim' runs any workload and pressure.\n");
}

enum { OPT_SVG = 256, OPT_PROGRESS };

static const struct option longopts[] = {
    {"svg", required_argument, NULL, OPT_SVG},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int demo_run(int argc, char **argv)
{
    const char *svg = DEFAULT_SVG;
    bool force = false, svg_given = false;
    ms_cli_getopt_reset();
    int c;
    while ((c = ms_cli_getopt(argc, argv, ":h", longopts, "demo")) != -1) {
        switch (c) {
        case 'h': demo_help(stdout); return 0;
        case OPT_PROGRESS: force = true; break;
        case OPT_SVG:
            svg = optarg;
            svg_given = true;
            break;
        default: return MS_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        ms_cli_error("demo: unexpected argument '%s' (try 'msched help demo')", argv[optind]);
        return MS_EXIT_USAGE;
    }
    const struct ms_cost *cost = ms_cost_find("h200");
    struct ms_sweep_opts so;
    memset(&so, 0, sizeof(so));
    so.workload = "micro";
    so.pressures[0] = 2.0;
    so.npressures = 1;
    so.budget = 16 * MS_GIB;
    so.cost = cost;
    for (int p = 0; p < MS_SIM_NPOLICIES; p++)
        so.policies[p] = true;
    ms_replay_opts_default(&so.replay, cost, so.budget);
    so.replay.duration_ns = 10ull * 1000 * 1000 * 1000;
    struct ms_cli_progress prog;
    ms_cli_progress_init(&prog, force);
    so.progress = ms_cli_progress_cb;
    so.progress_ctx = &prog;

    printf("msched demo (SIMULATED: no GPU is used; the simulator models an H200 on PCIe Gen5)\n"
           "\n"
           "Four tasks share one GPU whose memory budget is 16 GiB, but together they need\n"
           "32 GiB: two memory-bound vector-add tasks and two compute-bound matmul tasks,\n"
           "time-sliced round-robin (200 ms slices). Each policy decides what moves between\n"
           "host and GPU memory at a context switch:\n"
           "  ideal       unlimited memory, nothing moves: the reference (100%%)\n"
           "  opt         msched: the next slice's working set, predicted from kernel\n"
           "              arguments, moves in bulk; victims by Belady's OPT over the\n"
           "              schedule; evictions and populations overlap on two copy streams\n"
           "  opt-serial  the same, one copy at a time\n"
           "  lru         predicted working sets, least-recently-used victims\n"
           "  whole       whole-process swapping: all of the next task in, others out\n"
           "  demand      CUDA unified memory: every first touch is a GPU page fault\n"
           "\n");
    fflush(stdout);
    struct ms_sweep *sw = malloc(sizeof(*sw));
    if (!sw) {
        ms_cli_error("out of memory");
        return MS_EXIT_RUNTIME;
    }
    char why[512];
    int rc = ms_sweep_run(&so, sw, why, sizeof(why));
    ms_cli_progress_end(&prog);
    if (rc) {
        free(sw);
        ms_cli_error("demo: %s", why);
        return MS_EXIT_RUNTIME;
    }
    ms_sweep_print(sw, stdout);
    printf("\nthroughput = work done per second relative to ideal; bytes in/out = copied over\n"
           "PCIe; dropped = evicted without a copy (unchanged since it was loaded);\n"
           "faults = GPU page faults (demand) or launch faults (a chunk the prediction missed).\n");
    int status = 0;
    errno = 0;
    FILE *f = fopen(svg, "w");
    if (!f && !svg_given) {
        /* The demo's result is the table; a directory it cannot write to only costs the plot. */
        printf("\nplot: not written (%s: %s); 'msched demo --svg FILE' writes it elsewhere\n", svg,
               strerror(errno));
        free(sw);
        return 0;
    }
    int rc2 = f ? ms_svg_write(sw, true, f) : MS_E_IO;
    if (!f || rc2 != 0) {
        ms_cli_error("cannot write %s: %s", svg, strerror(errno ? errno : EIO));
        status = MS_EXIT_RUNTIME;
    }
    if (f && fclose(f) != 0 && status == 0) {
        ms_cli_error("cannot write %s: %s", svg, strerror(errno));
        status = MS_EXIT_RUNTIME;
    }
    if (status == 0)
        printf("\nplot: %s\n", svg);
    free(sw);
    return status;
}

const struct ms_cli_cmd ms_cmd_demo = {
    .name = "demo",
    .summary = "a quick comparison of all memory policies (simulated), with a plot",
    .run = demo_run,
    .help = demo_help,
};
