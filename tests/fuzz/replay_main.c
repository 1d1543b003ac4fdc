/*
 * replay_main.c - run a fuzz target over stored inputs without libFuzzer.
 *
 * Linked with one tests/fuzz/fuzz_*.c into build/fuzz/replay_<target>; `make test` runs it over
 * tests/fuzz/corpus/<target>/ so the corpus keeps guarding the parsers with any compiler and
 * under the sanitizer builds. Each argument is a file or a directory; a directory's regular files
 * are run in name order (subdirectories too, recursively; names starting with '.' are skipped).
 * Every input is read whole into a fresh heap buffer of exactly its size, so a sanitizer catches
 * a read past the end.
 *
 * Exit status: 0 when every input ran; 1 when an input could not be read, the target returned
 * non-zero, or no input was found at all (a missing corpus is a mistake, not a pass); 2 for
 * usage. A crash in the target ends the process with its signal, as libFuzzer would.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_BYTES (64u * 1024u * 1024u)
#define MAX_DEPTH 8

static unsigned long ran;
static int failed;

static void run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        failed = 1;
        return;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            if (cap >= REPLAY_MAX_BYTES) {
                fprintf(stderr, "replay: %s: larger than %u bytes\n", path, REPLAY_MAX_BYTES);
                free(buf);
                buf = NULL;
                break;
            }
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (!buf || rerr) {
        if (rerr)
            fprintf(stderr, "replay: %s: read error\n", path);
        free(buf);
        failed = 1;
        return;
    }
    /* An exact-size copy: reading one byte past the input is then a heap overflow. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        failed = 1;
        return;
    }
    memcpy(exact, buf, len);
    free(buf);
    int rc = LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    ran++;
    if (rc != 0) {
        fprintf(stderr, "replay: %s: target returned %d\n", path, rc);
        failed = 1;
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_path(const char *path, int depth);

static void run_dir(const char *path, int depth)
{
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        failed = 1;
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = realloc(names, ncap * sizeof *names);
            if (!nn) {
                failed = 1;
                break;
            }
            names = nn;
            cap = ncap;
        }
        size_t plen = strlen(path) + 1 + strlen(e->d_name) + 1;
        names[n] = malloc(plen);
        if (!names[n]) {
            failed = 1;
            break;
        }
        snprintf(names[n], plen, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 0)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        run_path(names[i], depth + 1);
        free(names[i]);
    }
    free(names);
}

static void run_path(const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        failed = 1;
        return;
    }
    if (S_ISDIR(st.st_mode)) {
        if (depth >= MAX_DEPTH) {
            fprintf(stderr, "replay: %s: directories nested too deep\n", path);
            failed = 1;
            return;
        }
        run_dir(path, depth);
    } else if (S_ISREG(st.st_mode)) {
        run_file(path);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s FILE_OR_DIR...\n"
                "Runs the linked fuzz target once on each file (directories: every file in it).\n",
                argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        run_path(argv[i], 0);
    printf("replay: %lu inputs ran\n", ran);
    if (ran == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        failed = 1;
    }
    return failed ? 1 : 0;
}
