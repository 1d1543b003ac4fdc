/*
 * units.h - sizes and durations as people write them, read and written back. Pure: no
 * allocation, no global state, safe from any thread.
 *
 * Sizes: a number (fractions allowed, up to nine digits after the point) and an optional unit,
 * case-insensitive, spaces allowed before and after it: B, KiB, MiB, GiB, TiB (powers of
 * 1024), K, M, G, T (the same), KB, MB, GB, TB (powers of 1000); at most 2^60 bytes.
 * Durations: a number and a required unit ns, us, ms or s; at most 2^60 ns (about 36 years).
 * Every front end (the daemon's options and configuration file, the msched command line, the
 * shim's environment) reads its sizes and durations here, so "16GB" means the same everywhere.
 *
 * Errors: MS_E_PARSE (malformed), MS_E_INVAL (out of range, or a NULL argument); *out is
 * written only on success.
 */
#ifndef MS_UNITS_H
#define MS_UNITS_H

#include <stddef.h>
#include <stdint.h>

int ms_parse_size(const char *s, uint64_t *out);
int ms_parse_duration(const char *s, uint64_t *out_ns);
/* Exact, shortest: "16GiB", "3MiB", "12345B"; "100ms", "1500us", "2s". They parse back to the
 * same value. */
void ms_format_size(uint64_t bytes, char *buf, size_t len);
void ms_format_duration(uint64_t ns, char *buf, size_t len);
/* Human, 3 significant digits: "15.2 GiB", "87.3 ms". */
void ms_format_size_h(uint64_t bytes, char *buf, size_t len);
void ms_format_duration_h(uint64_t ns, char *buf, size_t len);

#endif
