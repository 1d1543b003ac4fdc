/*
 * template.h - argument templates: a kernel's working set below the allocation, learned from
 * profiles.
 *
 * Design
 *   ms_predict_launch says a pointer argument references its whole region. A profile (a version-2
 *   trace, docs/trace-format.md) records, per profiled launch, the byte ranges each pointer
 *   argument's accesses fell in. From those the analyzer fits, per kernel identity (name, module
 *   hash) and per pointer argument (the byte offset `arg` of its 8-byte word in the parameter
 *   buffer), one rule over the launch's integer arguments that explains every profiled launch.
 *   Online, ms_predict_launch_tmpl evaluates the rules of a launch and keeps only the chunks the
 *   predicted ranges overlap.
 *
 *   Integer arguments: a 4- or 8-byte parameter (by the layout; inside a larger parameter, a
 *   struct, and without a layout, every 4-aligned 4-byte word and every 8-aligned 8-byte word)
 *   whose value is not a pointer into a known region
 *   (a pointer's halves are not integers either). x(off:size) is its value: a 4-byte one as a
 *   signed 32-bit number, an 8-byte one as a signed 64-bit number.
 *
 *   A term is c0 + c1*X1 + c2*X2, where each X is x(a) or x(a)*x(b) (a product makes rows*cols a
 *   term). A rule is four terms over the pointer value P:
 *     lo, hi   the first block is [P + lo, P + hi)
 *     count    number of blocks
 *     stride   bytes from one block's start to the next
 *   Forms, in the order the analyzer tries them (the first that explains every launch wins):
 *     fixed    lo and hi constants, count 1
 *     linear   lo and hi constant or linear in one integer argument, count 1
 *              (then: one of them with a product or a sum of two arguments)
 *     strided  count, stride, lo and hi - lo each constant or linear in one argument
 *   A rule "explains" a launch when its predicted bytes cover every byte the launch touched
 *   through that argument (no false negative at all, at the profile's ranges) and over-predict
 *   by at most touched/16 + 128 KiB (MS_TMPL_SLACK_ABS: touches are whole granules, so a rule
 *   over launches from pointers off a granule boundary by different amounts may reach up to a
 *   granule further at each end). A launch that touched nothing through the
 *   argument is explained by any rule.
 *
 *   Refusals: a kernel any launch of which was prof=opaque is opaque; one with a touch attributed
 *   to no argument (`-`, pointer chasing) is unsafe. Neither shrinks anything: the predictor
 *   treats both like a kernel without templates. An argument with no rule is predicted whole.
 *
 *   Incremental learning: per (kernel, arg) the store keeps up to MS_TMPL_MAX_OBS (64) distinct
 *   observations (the launch's integer arguments and a summary of what it touched), so learning a
 *   second profile refits over both. A repeated observation only counts. Past 64 distinct
 *   observations a new one that the current rule explains is counted and dropped; one that it
 *   does not explain refuses the argument for good (refused: no rule, predicted whole), since a
 *   refit could no longer check the dropped launches.
 *
 * Store text format (the store is persisted by callers; core/ does no I/O)
 *     msched-templates 1
 *     kernel mod=<hex> launches=<n> opaque=<0|1> unsafe=<0|1> name=<name>
 *     arg <off> form=<none|fixed|linear|strided> written=<0|1> refused=<0|1> launches=<n>
 *         lo=<term> hi=<term> count=<term> stride=<term>                      (one line)
 *     obs <lo> <hi> <touched> <count> <len> <stride> ints=<off>:<size>:<val>,...
 *     end
 *   One kernel per block, closed by `end`; its arg lines in ascending offset, each followed by
 *   its obs lines (at most 64). Blank lines and lines starting with '#' are ignored. A term is
 *   `<c0>` then zero to two `,<c>*x<off>:<size>[*x<off>:<size>]` (c != 0). Names are escaped as
 *   in traces (%XX for every byte outside 0x21-0x7e and for '%'). An obs line: the touched span
 *   [lo, hi) relative to P, the touched bytes, and, when the touched blocks are regular, their
 *   count, length and stride (count 0: irregular). Every number is range-checked; errors read
 *   "line N: reason". docs/templates.md has the full definition.
 *
 * Ownership and errors
 *   The store owns its kernels; a const struct ms_tmpl_kernel * stays valid until the store is
 *   freed (learning and merging update entries in place, never move or free them). Functions
 *   return MS_OK or a negative MS_E_*; `why` (may be NULL) gets one line on a parse error. No
 *   locking: the caller serializes.
 */
#ifndef MS_TEMPLATE_H
#define MS_TEMPLATE_H

#include "predict.h"

#define MS_TMPL_VERSION 1
#define MS_TMPL_MAX_OBS 64    /* distinct observations kept per (kernel, arg) */
#define MS_TMPL_MAX_INTS 32   /* integer arguments kept per observation (lowest offsets) */
#define MS_TMPL_MAX_RANGES 64 /* ranges one rule evaluates to; beyond: one covering range */
/* over-prediction allowed: touched / 16 + this, bytes (two granules: each end of a range may be
 * rounded out by one) */
#define MS_TMPL_SLACK_ABS 131072
#define MS_TMPL_GRANULE 65536 /* the profiler's granule: touches are recorded in whole ones */

enum ms_tmpl_form { MS_TMPL_NONE = 0, MS_TMPL_FIXED, MS_TMPL_LINEAR, MS_TMPL_STRIDED };

struct ms_tmpl_store;  /* opaque */
struct ms_tmpl_kernel; /* opaque, owned by the store, valid until the store is freed */

int ms_tmpl_store_new(struct ms_tmpl_store **out); /* MS_E_NOMEM */
void ms_tmpl_store_free(struct ms_tmpl_store *s);  /* NULL ok */

/* Learn from a whole v2 trace in memory (a profile). why gets "line N: reason" on a parse error
 * (MS_E_PARSE, MS_E_VERSION); launches before the bad line stay learned. MS_E_NOMEM. */
int ms_tmpl_learn_trace(struct ms_tmpl_store *s, const char *buf, size_t len, char *why,
                        size_t whylen);

/*
 * Accuracy of a store against a profile (a v2 trace; the paper's Table 1, in bytes): per
 * prof=seen launch, the bytes its touch records cover (touched), against what allocation
 * granularity predicts (every allocation a pointer word points into, whole) and what the
 * kernel's template predicts (ms_tmpl_eval per pointer word, clamped to its allocation and
 * rounded out to whole MS_TMPL_GRANULEs from the allocation's start, the touches' resolution;
 * whole allocations without a usable rule, or for a kernel not in s, opaque or unsafe). The kernel
 * is found by (name, mod), else by name alone. A miss is a touched byte not predicted (false
 * negative); F- = miss / touched, F+ = (pred - (touched - miss)) / pred. Learn from one profile
 * and evaluate on another (other inputs) to measure what a launch never profiled gets. Errors
 * as ms_tmpl_learn_trace; *out is zeroed first.
 */
struct ms_tmpl_acc {
    uint64_t launches;               /* prof=seen launches evaluated */
    uint64_t opaque;                 /* prof=opaque launches (nothing to compare: not evaluated) */
    uint64_t tmpl_launches;          /* ... of which the kernel had a usable template in s */
    uint64_t touched;                /* bytes touched, summed over launches */
    uint64_t alloc_pred, alloc_miss; /* allocation granularity: bytes predicted, touched missed */
    uint64_t tmpl_pred, tmpl_miss;   /* templates: likewise */
};
int ms_tmpl_accuracy(const struct ms_tmpl_store *s, const char *buf, size_t len,
                     struct ms_tmpl_acc *out, char *why, size_t whylen);

/* The same figures per kernel name (what `msched profile --evaluate` lists as the kernels that
 * miss most and over-predict most). Each entry's counters are its launches' share of
 * ms_tmpl_acc's (summed over the entries they give its totals; opaque launches are not in any).
 * name is owned by the array. */
struct ms_tmpl_acc_kernel {
    char *name;
    bool tmpl; /* the kernel had a usable template in s */
    uint64_t launches, touched;
    uint64_t alloc_pred, alloc_miss; /* as in ms_tmpl_acc */
    uint64_t tmpl_pred, tmpl_miss;
};

/* ms_tmpl_accuracy, and in *kv (ms_malloc'd, sorted by name; NULL when nothing was evaluated)
 * *nk entries, one per kernel name evaluated. The caller frees them with
 * ms_tmpl_acc_kernels_free, also after an error (then they hold what was counted so far). */
int ms_tmpl_accuracy_kernels(const struct ms_tmpl_store *s, const char *buf, size_t len,
                             struct ms_tmpl_acc *out, struct ms_tmpl_acc_kernel **kv, size_t *nk,
                             char *why, size_t whylen);
void ms_tmpl_acc_kernels_free(struct ms_tmpl_acc_kernel *kv, size_t nk);

/* Parse a store text and merge it into s: a kernel new to s is taken as written; one s has
 * already gets the text's observations learned into it (and flags, counts). The text is checked
 * whole before anything merges: on MS_E_PARSE / MS_E_VERSION s is unchanged; on MS_E_NOMEM s may
 * hold part of the merge (every entry still consistent). */
int ms_tmpl_store_parse(struct ms_tmpl_store *s, const char *buf, size_t len, char *why,
                        size_t whylen);

/* The store as text (malloc'd with ms_malloc, NUL-terminated; *len excludes the NUL; the
 * caller frees with ms_free). Kernels in (name, mod) order. MS_E_NOMEM. */
int ms_tmpl_store_format(const struct ms_tmpl_store *s, char **out, size_t *len);

/* A human summary for `msched profile --show`: per kernel, its rules in words, launches seen.
 * Same ownership as ms_tmpl_store_format. */
int ms_tmpl_store_describe(const struct ms_tmpl_store *s, char **out, size_t *len);

/* The kernel (name, mod), or NULL. O(log kernels); callers cache it per function. */
const struct ms_tmpl_kernel *ms_tmpl_find(const struct ms_tmpl_store *s, const char *name,
                                          uint64_t mod);
/* The kernel named `name` when the store holds exactly one of that name (any module), else
 * NULL: for callers that do not know a launch's module (the engine: only the profiler's touch
 * source hashes module images). O(log kernels). */
const struct ms_tmpl_kernel *ms_tmpl_find_name(const struct ms_tmpl_store *s, const char *name);
size_t ms_tmpl_store_count(const struct ms_tmpl_store *s); /* kernels */

/* Accessors of a kernel entry. */
bool ms_tmpl_kernel_opaque(const struct ms_tmpl_kernel *k);
bool ms_tmpl_kernel_unsafe(const struct ms_tmpl_kernel *k);
uint64_t ms_tmpl_kernel_launches(const struct ms_tmpl_kernel *k); /* profiled launches learned */
/* The rule's form for pointer word `arg` (MS_TMPL_NONE: no rule, or the kernel is opaque or
 * unsafe); *written (may be NULL) gets whether the argument was ever written (true when
 * unknown), *launches (may be NULL) the launches it explains. */
enum ms_tmpl_form ms_tmpl_rule(const struct ms_tmpl_kernel *k, uint32_t arg, bool *written,
                               uint64_t *launches);

/*
 * The byte ranges the rule of pointer word `arg` predicts for launch l with pointer value ptr,
 * into out[0..cap) in ascending address order (cap >= 1; beyond cap ranges, or past
 * MS_TMPL_MAX_RANGES, one covering range). Returns the number of ranges (0: the rule predicts
 * nothing), or MS_E_NOTFOUND when there is no usable rule (no rule, opaque or unsafe kernel, an
 * integer argument outside the parameter bytes, arithmetic overflow): the caller then takes the
 * whole region. Ranges are not clamped to any region.
 */
int ms_tmpl_eval(const struct ms_tmpl_kernel *k, uint32_t arg, uint64_t ptr,
                 const struct ms_launch *l, struct ms_range *out, size_t cap);

/*
 * Like ms_predict_launch, with templates: when k is NULL, opaque or unsafe, exactly
 * ms_predict_launch. Otherwise each pointer word with a rule into an always-mapped region
 * (region.h, I9) adds only the chunks overlapping its predicted ranges clamped to its region
 * (an empty clamp adds nothing; an end chunk overlapped by less than MS_TMPL_GRANULE of a range
 * spanning several chunks is left out: granule rounding) and the region's EMPTY chunks (mapped
 * nowhere: a command must never reach one); a pointer word without a rule, or into a region that is
 * not always mapped (a chunk left out would be unmapped), adds its whole region. So a wrong rule
 * leaves out only chunks that stay mapped to their host copies: slower, never a fault. Returns the
 * number of distinct regions the pointer words reference (as ms_predict_launch), or MS_E_NOMEM /
 * MS_E_INVAL.
 */
int ms_predict_launch_tmpl(const struct ms_rtable *rt, const struct ms_launch *l,
                           const struct ms_tmpl_kernel *k, struct ms_chunk_set *out);

/* The same for a model of the system (the simulator), where no chunk can fault: every region
 * shrinks to its rules' chunks whatever its mapping and its chunks' states. */
int ms_predict_launch_tmpl_model(const struct ms_rtable *rt, const struct ms_launch *l,
                                 const struct ms_tmpl_kernel *k, struct ms_chunk_set *out);

/* Bytes [off, off + len) of a launch's parameter buffer that describe the memory range `r`
 * exactly: a TMA tensor map (CUtensorMap) whose global address and extent the shim saw encoded.
 * The hardware bounds TMA traffic to that extent. */
struct ms_param_bound {
    size_t off, len;
    struct ms_range r;
};

/*
 * ms_predict_launch_tmpl (k may be NULL) over a copy of the parameters in which the bounded spans
 * are zero, plus, for each bound, the chunks its range overlaps when its region is always mapped
 * (and that region's EMPTY chunks, as above), else its whole region; a range in no region adds
 * nothing. scratch holds the copy (l->params_len bytes). Bounds outside the buffer: MS_E_INVAL.
 * Returns what ms_predict_launch_tmpl returns for the copy, or MS_E_NOMEM / MS_E_INVAL.
 */
int ms_predict_launch_bounded(const struct ms_rtable *rt, const struct ms_launch *l,
                              const struct ms_tmpl_kernel *k, const struct ms_param_bound *b,
                              size_t nb, uint8_t *scratch, struct ms_chunk_set *out);

#endif /* MS_TEMPLATE_H */
