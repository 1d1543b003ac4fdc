/*
 * procaddr.c - symbol lookup and cuGetProcAddress selection over the generated tables.
 *
 * Both tables are sorted by strcmp (the generator sorts them), so lookups are binary searches.
 * Entries of one group are sorted by (version, per-thread); selection scans a group backwards
 * for the newest acceptable entry. See procaddr.h for the rules.
 */
#include "cuabi/procaddr.h"

#include "cuabi/gen/syms.h"

#include <stdlib.h>
#include <string.h>

static int cmp_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, *(const char *const *)elem);
}

static int cmp_group(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct ms_pa_group *)elem)->base);
}

int ms_sym_index(const char *name)
{
    if (!name)
        return -1;
    const char *const *p =
        bsearch(name, ms_gen_sym_names, MS_SYM_COUNT, sizeof ms_gen_sym_names[0], cmp_name);
    return p ? (int)(p - ms_gen_sym_names) : -1;
}

const char *ms_sym_name(int idx)
{
    if (idx < 0 || idx >= MS_SYM_COUNT)
        return NULL;
    return ms_gen_sym_names[idx];
}

static const struct ms_pa_group *find_group(const char *base)
{
    if (!base)
        return NULL;
    return bsearch(base, ms_gen_pa_groups, MS_PA_NGROUPS, sizeof ms_gen_pa_groups[0], cmp_group);
}

/* Newest entry of g with the given flavour and version <= cuda_version, or -1. */
static int newest(const struct ms_pa_group *g, int cuda_version, int ptds)
{
    for (int i = g->count - 1; i >= 0; i--) {
        const struct ms_pa_entry *e = &ms_gen_pa_entries[g->first + i];
        if (e->ptds == ptds && e->version <= cuda_version)
            return e->sym;
    }
    return -1;
}

int ms_procaddr_select(const char *base, int cuda_version, bool per_thread, int *out_status)
{
    int status = MS_PA_NOT_FOUND, sym = -1;
    const struct ms_pa_group *g = find_group(base);
    if (g) {
        if (per_thread)
            sym = newest(g, cuda_version, 1);
        if (sym < 0)
            sym = newest(g, cuda_version, 0);
        status = sym < 0 ? MS_PA_VERSION_LOW : MS_PA_FOUND;
    }
    if (out_status)
        *out_status = status;
    return sym;
}

int ms_procaddr_variants(const char *base, int *out, int cap)
{
    const struct ms_pa_group *g = find_group(base);
    if (!g)
        return 0;
    for (int i = 0; i < g->count && i < cap; i++)
        out[i] = ms_gen_pa_entries[g->first + i].sym;
    return g->count;
}
