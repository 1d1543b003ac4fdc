/*
 * template_int.h - the template store's layout, shared by template.c (model, evaluation,
 * merging), template_text.c (text format), template_fit.c (fitting) and template_learn.c
 * (profiles to observations). Nothing outside those four files includes it.
 *
 * Invariants
 *   - store->k is sorted by (name, mod) with no duplicates; each kernel is its own allocation,
 *     so pointers handed out by ms_tmpl_find stay valid while the array grows.
 *   - a kernel's args are sorted by off (a multiple of 8, <= 4088), no duplicates.
 *   - an arg holds at most MS_TMPL_MAX_OBS distinct observations; form != NONE means the rule
 *     explains every stored observation (for rules the analyzer fitted; a hand-written store is
 *     taken as written); refused implies form == NONE.
 *   - terms are canonical: a monomial with c == 0 is absent, c[0] is filled before c[1], and
 *     an absent factor has size 0.
 */
#ifndef MS_TEMPLATE_INT_H
#define MS_TEMPLATE_INT_H

#include "template.h"

/* One integer argument: its byte offset and size (4 or 8); size 0 = absent. */
struct ms__tmpl_x {
    uint16_t off;
    uint8_t size;
};

/* c0 + c[0] * X0 + c[1] * X1, X = x[i][0] (* x[i][1] when that is present). */
struct ms__tmpl_term {
    int64_t c0;
    int64_t c[2];
    struct ms__tmpl_x x[2][2];
};

struct ms__tmpl_rule {
    struct ms__tmpl_term lo, hi; /* first block [P + lo, P + hi) */
    struct ms__tmpl_term count;  /* blocks */
    struct ms__tmpl_term stride; /* bytes between block starts */
};

struct ms__tmpl_ival {
    uint16_t off;
    uint8_t size;
    int64_t val;
};

/* What one launch touched through one pointer argument, relative to its pointer value. */
struct ms__tmpl_obs {
    int64_t lo, hi;      /* touched span [lo, hi); both 0 when touched == 0 */
    uint64_t touched;    /* bytes touched (merged ranges) */
    uint64_t count, len; /* regular: count blocks of len bytes ...; count 0: irregular */
    int64_t stride;      /* ... every stride bytes (0 when count <= 1) */
    uint32_t nint;       /* integer arguments, ascending offset */
    struct ms__tmpl_ival ints[MS_TMPL_MAX_INTS];
};

struct ms__tmpl_arg {
    uint32_t off;           /* byte offset of the pointer word in the parameters */
    enum ms_tmpl_form form; /* MS_TMPL_NONE: no rule (whole allocation) */
    bool written;           /* some launch wrote through it */
    bool refused;           /* past MS_TMPL_MAX_OBS with a launch the rule did not explain */
    uint64_t launches;      /* profiled launches observed (explained, when form != NONE) */
    struct ms__tmpl_rule rule;
    struct ms__tmpl_obs *obs; /* nobs distinct observations */
    size_t nobs;
};

struct ms_tmpl_kernel {
    char *name;
    uint64_t mod;
    bool opaque, unsafe;
    uint64_t launches; /* profiled launches (seen and opaque) */
    struct ms__tmpl_arg *args;
    size_t nargs, capargs;
};

struct ms_tmpl_store {
    struct ms_tmpl_kernel **k;
    size_t n, cap;
};

/* The kernel (name, mod), created empty when absent (create) or NULL. MS_E_NOMEM via *rc. */
struct ms_tmpl_kernel *ms__tmpl_kernel_get(struct ms_tmpl_store *s, const char *name, uint64_t mod,
                                           bool create, int *rc);
/* The arg entry at off, created empty when absent. NULL on MS_E_NOMEM. */
struct ms__tmpl_arg *ms__tmpl_arg_get(struct ms_tmpl_kernel *k, uint32_t off);
/* Free one kernel and everything it owns (NULL ok). */
void ms__tmpl_kernel_free(struct ms_tmpl_kernel *k);
/* Index of (name, mod) in s->k, or where it would go (*found false). */
size_t ms__tmpl_kfind(const struct ms_tmpl_store *s, const char *name, uint64_t mod, bool *found);
/* Insert k at index at (taking ownership on success). MS_E_NOMEM leaves s as it was. */
int ms__tmpl_kinsert(struct ms_tmpl_store *s, size_t at, struct ms_tmpl_kernel *k);
/* Merge t's kernels into s: new kernels move over (NULL left in t), known ones learn t's
 * observations. MS_E_NOMEM. */
int ms__tmpl_merge(struct ms_tmpl_store *s, struct ms_tmpl_store *t);
/* Learn one observation into an arg (see template.h, incremental learning). MS_E_NOMEM. */
int ms__tmpl_add_obs(struct ms__tmpl_arg *a, const struct ms__tmpl_obs *o);
/* Whether rule r explains observation o. */
bool ms__tmpl_explains(const struct ms__tmpl_rule *r, const struct ms__tmpl_obs *o);
/* Fit the simplest rule explaining all of a's observations into a (form NONE when none). */
void ms__tmpl_fit(struct ms__tmpl_arg *a);

#endif /* MS_TEMPLATE_INT_H */
