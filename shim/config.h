/*
 * config.h - libmsched's options as this process read them (the table: ipc/shimopt.h).
 *
 * Design
 *   The environment is read once, at the shim's initialisation (ms__shim_config_load, from
 *   shim.c), through the one option table that `msched run` also writes; every module takes
 *   its settings from ms__shim_opt() afterwards and no file of the shim calls getenv for an
 *   MSCHED_* variable. A value the table refuses is said once on stderr, whatever the
 *   verbosity ("MSCHED_WEIGHT=abc is not 0..1000; using 1"), and its default stands.
 *
 * Locking: written once before any other module starts, read-only afterwards (no lock).
 * Layering: above log.h, below everything else of the shim.
 */
#ifndef MS_SHIM_CONFIG_H
#define MS_SHIM_CONFIG_H

#include "ipc/shimopt.h"
#include "shim/log.h"

/* Read the environment into the options (once, from the shim's initialisation). */
MS_HIDDEN void ms__shim_config_load(void);

/* The options read (all zero before ms__shim_config_load). Never NULL. */
MS_HIDDEN const struct ms_shimopts *ms__shim_opts(void);

/* Shorthands: option id's value, whether it was given, its text (NULL when not given). */
MS_HIDDEN uint64_t ms__shim_opt(enum ms_shimopt id);
MS_HIDDEN bool ms__shim_opt_set(enum ms_shimopt id);
MS_HIDDEN const char *ms__shim_opt_text(enum ms_shimopt id);

/* Where the engine's kernel templates come from: MSCHED_TEMPLATES's file (returns 1), none
 * (MSCHED_TEMPLATES=off, or no default path: 0), or the default store `msched profile` writes
 * (returns 2; a missing file there is no error). */
MS_HIDDEN int ms__shim_templates_path(char *out, size_t cap);

#endif /* MS_SHIM_CONFIG_H */
