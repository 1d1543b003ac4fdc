/*
 * svg.c - hand-written SVG bar charts of a sweep (see svg.h).
 *
 * Geometry: a panel is a plot box with a left axis; groups share the box width equally, bars
 * fill 80 % of their group. Coordinates are in SVG user units (px); y grows downwards, so a
 * value v maps to box_bottom - v / vmax * box_height.
 */
#include "sim/svg.h"

#include <math.h>
#include <string.h>

#define W 880
#define PANEL_H 300
#define LEFT 70
#define RIGHT 20
#define TOP 60
#define BOTTOM 50

static const char *const colors[MS_SIM_NPOLICIES] = {
    "#9e9e9e", /* ideal */
    "#1f77b4", /* opt */
    "#9ecae1", /* opt-serial */
    "#ff7f0e", /* lru */
    "#2ca02c", /* whole */
    "#d62728", /* demand */
};

static void text(FILE *f, double x, double y, const char *anchor, int size, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor,
            size);
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
    fputs("</text>\n", f);
}

/* A round upper bound for an axis and its tick step. */
static void nice_scale(double vmax, double *top, double *step)
{
    if (vmax <= 0)
        vmax = 1;
    double mag = pow(10, floor(log10(vmax)));
    const double cand[] = {1, 2, 2.5, 5, 10};
    for (size_t i = 0; i < MS_ARRAY_LEN(cand); i++) {
        if (cand[i] * mag * 5 >= vmax) {
            *step = cand[i] * mag;
            *top = ceil(vmax / *step) * *step;
            return;
        }
    }
    *step = 10 * mag;
    *top = ceil(vmax / *step) * *step;
}

typedef double (*value_fn)(const struct ms_sweep *s, size_t i, int p);

static double v_thr(const struct ms_sweep *s, size_t i, int p)
{
    return 100 * ms_sweep_norm(s, i, (enum ms_sim_policy)p);
}

static double v_bytes(const struct ms_sweep *s, size_t i, int p)
{
    const struct ms_replay_result *r = &s->pts[i].res[p];
    return (double)(r->bytes_in + r->bytes_out) / (double)MS_GIB;
}

static void panel(FILE *f, const struct ms_sweep *s, const bool *show, int npol, double y0,
                  const char *ylabel, value_fn val, double top, double step, const char *fmt)
{
    double bx = LEFT, bw = W - LEFT - RIGHT, by = y0, bh = PANEL_H - BOTTOM;
    /* grid and y axis */
    for (double v = 0; v <= top + step / 2; v += step) {
        double y = by + bh - v / top * bh;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", bx,
                y, bx + bw, y);
        char lab[32];
        snprintf(lab, sizeof(lab), fmt, v);
        text(f, bx - 6, y + 4, "end", 11, lab);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", bx, by,
            bx, by + bh);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", bx,
            by + bh, bx + bw, by + bh);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" "
            "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
            bx - 48, by + bh / 2, bx - 48, by + bh / 2, ylabel);
    double gw = bw / (double)(s->n ? s->n : 1);
    double barw = gw * 0.8 / (npol ? npol : 1);
    for (size_t i = 0; i < s->n; i++) {
        double gx = bx + gw * (double)i + gw * 0.1;
        int k = 0;
        for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
            if (!show[p])
                continue;
            double x = gx + barw * k++;
            if (!s->pts[i].ran[p])
                continue;
            double v = val(s, i, p);
            double h = top > 0 ? v / top * bh : 0;
            if (h < 0)
                h = 0;
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                    "<title>%s: %.2f</title></rect>\n",
                    x + 1, by + bh - h, barw - 2, h, colors[p],
                    ms_sim_policy_name((enum ms_sim_policy)p), v);
            char lab[32];
            snprintf(lab, sizeof(lab), v >= 10 || v == 0 ? "%.0f" : v >= 1 ? "%.1f" : "%.2f", v);
            text(f, x + barw / 2, by + bh - h - 3, "middle", 9, lab);
        }
        char xl[64];
        const struct ms_sweep_point *pt = &s->pts[i];
        if (pt->rc)
            snprintf(xl, sizeof(xl), "%.0f%%: failed", 100 * pt->pressure);
        else
            snprintf(xl, sizeof(xl), "%.0f%% (%zu tasks)", 100 * pt->actual_pressure, pt->ntasks);
        text(f, bx + gw * (double)i + gw / 2, by + bh + 18, "middle", 12, xl);
    }
}

int ms_svg_write(const struct ms_sweep *s, bool bytes, FILE *f)
{
    bool show[MS_SIM_NPOLICIES] = {false};
    int npol = 0;
    for (size_t i = 0; i < s->n; i++)
        for (int p = 0; p < MS_SIM_NPOLICIES; p++)
            show[p] = show[p] || s->pts[i].ran[p];
    for (int p = 0; p < MS_SIM_NPOLICIES; p++)
        npol += show[p];
    int h = TOP + PANEL_H + (bytes ? PANEL_H + 20 : 0) + 10;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, h, W, h);
    char title[200], sl[32];
    ms_fmt_ns(sl, sizeof(sl), s->slice_ns);
    snprintf(title, sizeof(title),
             "msched sim: workload %s, profile %s, slice %s, hash-clean %s (simulated)",
             s->workload, s->profile ? s->profile : "?", sl, s->hash_clean ? "on" : "off");
    text(f, W / 2.0, 22, "middle", 15, title);
    /* legend */
    double lx = LEFT;
    for (int p = 0; p < MS_SIM_NPOLICIES; p++) {
        if (!show[p])
            continue;
        fprintf(f, "<rect x=\"%.1f\" y=\"34\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", lx,
                colors[p]);
        text(f, lx + 16, 44, "start", 12, ms_sim_policy_name((enum ms_sim_policy)p));
        lx += 30 + 8.0 * (double)strlen(ms_sim_policy_name((enum ms_sim_policy)p));
    }
    panel(f, s, show, npol, TOP, "throughput, % of in-memory", v_thr, 100, 20, "%.0f");
    if (bytes) {
        double vmax = 0;
        for (size_t i = 0; i < s->n; i++)
            for (int p = 0; p < MS_SIM_NPOLICIES; p++)
                if (s->pts[i].ran[p] && v_bytes(s, i, p) > vmax)
                    vmax = v_bytes(s, i, p);
        double top, step;
        nice_scale(vmax, &top, &step);
        panel(f, s, show, npol, TOP + PANEL_H + 20, "GiB moved in the measured time", v_bytes, top,
              step, step < 1 ? "%.1f" : "%.0f");
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? MS_E_IO : MS_OK;
}
