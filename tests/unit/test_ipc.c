/*
 * test_ipc.c - the edge code the daemon, the CLI and the shim share (ipc/): the option table
 * and its parsers, the configuration-file reader, socket paths, and framed nonblocking I/O.
 *
 * Connections are tested on socketpairs with the smallest kernel buffers, so every large frame
 * is written and read in pieces; a peer that never reads must make ms_conn_send fail with
 * MS_E_NOSPACE without queuing anything. One request/response runs against a forked server on a
 * private socket path.
 */
#include "ipc/conf.h"
#include "ipc/gpuid.h"
#include "ipc/ipc.h"
#include "ipc/shimopt.h"
#include "ipc/status_text.h"
#include "tests/support/ms_testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static void test_sizes_and_durations(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int rc;
        uint64_t v;
    } sizes[] = {
        {"0", MS_OK, 0},
        {"4096", MS_OK, 4096},
        {"16GiB", MS_OK, 16 * MS_GIB},
        {"16 gib", MS_OK, 16 * MS_GIB},
        {" 1.5GiB ", MS_OK, 3 * MS_GIB / 2},
        {"2MB", MS_OK, 2000000},
        {"1TiB", MS_OK, 1024 * MS_GIB},
        {".5KiB", MS_OK, 512},
        {"12B", MS_OK, 12},
        {"2G", MS_OK, 2 * MS_GIB},
        {"16GB", MS_OK, 16000000000ull},
        {"4 k", MS_OK, 4096},
        {"1t", MS_OK, 1024 * MS_GIB},
        {"3mb", MS_OK, 3000000},
        {"2Gi", MS_E_PARSE, 0},
        {"1024PiB", MS_E_PARSE, 0},
        {"", MS_E_PARSE, 0},
        {"GiB", MS_E_PARSE, 0},
        {"-1", MS_E_PARSE, 0},
        {"1e9", MS_E_PARSE, 0},
        {"0x10", MS_E_PARSE, 0},
        {"1.", MS_E_PARSE, 0},
        {"1.0000000001GiB", MS_E_PARSE, 0},
        {"16 GiB x", MS_E_PARSE, 0},
        {"99999999999999999999", MS_E_INVAL, 0},
        {"2000000TiB", MS_E_INVAL, 0},
        {"1152921504606846976", MS_OK, 1ull << 60},
        {"1152921504606846977", MS_E_INVAL, 0},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(sizes); i++) {
        uint64_t v = 12345;
        int rc = ms_parse_size(sizes[i].s, &v);
        if (rc != sizes[i].rc || (rc == MS_OK && v != sizes[i].v))
            fail_msg("size '%s': rc %d value %llu", sizes[i].s, rc, (unsigned long long)v);
    }
    static const struct {
        const char *s;
        int rc;
        uint64_t v;
    } durs[] = {
        {"100ms", MS_OK, 100000000}, {"1.5s", MS_OK, 1500000000},   {"250us", MS_OK, 250000},
        {"7ns", MS_OK, 7},           {"100", MS_E_PARSE, 0},        {"1h", MS_E_PARSE, 0},
        {"ms", MS_E_PARSE, 0},       {"5 s", MS_OK, 5000000000ull},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(durs); i++) {
        uint64_t v = 0;
        int rc = ms_parse_duration(durs[i].s, &v);
        if (rc != durs[i].rc || (rc == MS_OK && v != durs[i].v))
            fail_msg("duration '%s': rc %d value %llu", durs[i].s, rc, (unsigned long long)v);
    }
    char buf[64];
    ms_format_size(16 * MS_GIB, buf, sizeof(buf));
    assert_string_equal(buf, "16GiB");
    ms_format_size(3 * MS_MIB + 1, buf, sizeof(buf));
    assert_string_equal(buf, "3145729B");
    ms_format_size(0, buf, sizeof(buf));
    assert_string_equal(buf, "0B");
    ms_format_duration(1500000000, buf, sizeof(buf));
    assert_string_equal(buf, "1500ms");
    ms_format_duration(2000000000, buf, sizeof(buf));
    assert_string_equal(buf, "2s");
    ms_format_size_h(1536 * MS_MIB, buf, sizeof(buf));
    assert_string_equal(buf, "1.50 GiB");
    ms_format_duration_h(87300000, buf, sizeof(buf));
    assert_string_equal(buf, "87.3 ms");

    /* Formatting then parsing gives the value back (seeded sweep). */
    struct ms_rng rng;
    ms_rng_seed(&rng, ms_test_seed(0xc0f));
    for (int i = 0; i < 20000; i++) {
        uint64_t v = ms_rng_next(&rng) >> (4 + ms_rng_below(&rng, 60));
        uint64_t back;
        ms_format_size(v, buf, sizeof(buf));
        assert_int_equal(ms_parse_size(buf, &back), MS_OK);
        assert_true(back == v);
        ms_format_duration(v, buf, sizeof(buf));
        assert_int_equal(ms_parse_duration(buf, &back), MS_OK);
        assert_true(back == v);
    }
}

static void test_options(void **state)
{
    (void)state;
    struct ms_conf c;
    ms_conf_default(&c);
    char why[256], v[300];
    assert_int_equal(ms_conf_check(&c, why, sizeof(why)), MS_OK);
    size_t n;
    const struct ms_conf_opt *o = ms_conf_opts(&n);
    assert_true(n >= 15);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ms_conf_get(&c, o[i].name, v, sizeof(v)), MS_OK);
        struct ms_conf d = c;
        assert_int_equal(ms_conf_set(&d, o[i].name, v, false, why, sizeof(why)), MS_OK);
        assert_memory_equal(&d, &c, sizeof(c));
        assert_true(strlen(o[i].help) > 5);
    }
    assert_int_equal(ms_conf_set(&c, "budget", "12GiB", true, why, sizeof(why)), MS_OK);
    assert_true(c.budget == 12 * MS_GIB);
    assert_int_equal(ms_conf_set(&c, "budget", "1MiB", true, why, sizeof(why)), MS_E_INVAL);
    assert_non_null(strstr(why, "outside"));
    assert_true(c.budget == 12 * MS_GIB); /* unchanged */
    assert_int_equal(ms_conf_set(&c, "budget", "many", true, why, sizeof(why)), MS_E_PARSE);
    assert_int_equal(ms_conf_set(&c, "gpu", "1", true, why, sizeof(why)), MS_E_STATE);
    assert_int_equal(ms_conf_set(&c, "gpu", "1", false, why, sizeof(why)), MS_OK);
    assert_int_equal(ms_conf_set(&c, "nope", "1", false, why, sizeof(why)), MS_E_NOTFOUND);
    assert_int_equal(ms_conf_set(&c, "policy", "prio", true, why, sizeof(why)), MS_OK);
    assert_int_equal(c.policy, MS_SCHED_PRIO);
    assert_int_equal(ms_conf_set(&c, "policy", "fifo", true, why, sizeof(why)), MS_E_PARSE);
    assert_int_equal(ms_conf_set(&c, "early_run", "yes", true, why, sizeof(why)), MS_OK);
    assert_true(c.early_run);
    assert_int_equal(ms_conf_set(&c, "cost", "rtx5080", true, why, sizeof(why)), MS_OK);
    assert_int_equal(ms_conf_set(&c, "cost", "a100", true, why, sizeof(why)), MS_E_PARSE);
    assert_int_equal(ms_conf_set(&c, "log_file", "a\tb", false, why, sizeof(why)), MS_E_INVAL);
    assert_int_equal(ms_conf_set(&c, "slice", "5s", true, why, sizeof(why)), MS_OK);
    /* A slice above the default slice_max (4 s) is fine: the longest slice becomes the slice. */
    assert_int_equal(ms_conf_check(&c, why, sizeof(why)), MS_OK);
    assert_int_equal(ms_conf_get(&c, "nope", v, sizeof(v)), MS_E_NOTFOUND);
    assert_int_equal(ms_conf_get(&c, "budget", v, 3), MS_E_NOSPACE);
    struct ms_sched_config sc;
    ms_conf_to_sched(&c, &sc);
    assert_true(sc.budget == 12 * MS_GIB && sc.policy == MS_SCHED_PRIO && sc.early_run);
    assert_true(sc.slice_max_ns == 5000000000ull && sc.slice_ns == 5000000000ull);
}

static void test_config_file(void **state)
{
    (void)state;
    struct ms_conf c;
    ms_conf_default(&c);
    char why[300];
    const char *good = "# comment\n"
                       "\n"
                       "  budget = 8GiB   \r\n"
                       "slice-max=3s\n"
                       "policy = \"adaptive\"\n"
                       "log_file = \"/tmp/a b.log\"\n"
                       "\t# indented comment\n"
                       "evict=lru";
    assert_int_equal(ms_conf_parse(&c, good, strlen(good), why, sizeof(why)), MS_OK);
    assert_true(c.budget == 8 * MS_GIB);
    assert_true(c.slice_max_ns == 3000000000ull);
    assert_int_equal(c.policy, MS_SCHED_ADAPTIVE);
    assert_int_equal(c.evict, MS_EVICT_LRU);
    assert_string_equal(c.log_file, "/tmp/a b.log");

    static const struct {
        const char *text;
        int rc;
        const char *why;
    } bad[] = {
        {"budget = 1GiB\nnonsense = 3\n", MS_E_NOTFOUND, "line 2: unknown option"},
        {"budget 1GiB\n", MS_E_PARSE, "line 1: expected"},
        {"\n\n = 4\n", MS_E_PARSE, "line 3: empty key"},
        {"bud get = 4\n", MS_E_PARSE, "line 1: bad character"},
        {"policy = \"rr\n", MS_E_PARSE, "line 1: unterminated"},
        {"slice = 10\n", MS_E_PARSE, "line 1: slice"},
        {"slice = 100s\n", MS_E_INVAL, "line 1: slice"},
    };
    for (size_t i = 0; i < MS_ARRAY_LEN(bad); i++) {
        ms_conf_default(&c);
        int rc = ms_conf_parse(&c, bad[i].text, strlen(bad[i].text), why, sizeof(why));
        if (rc != bad[i].rc || strncmp(why, bad[i].why, strlen(bad[i].why)) != 0)
            fail_msg("case %zu: rc %d why '%s'", i, rc, why);
    }
    /* A NUL byte and an over-long line. */
    const char nul[] = "budget = 1GiB\0\n";
    assert_int_equal(ms_conf_parse(&c, nul, sizeof(nul) - 1, why, sizeof(why)), MS_E_PARSE);
    assert_non_null(strstr(why, "NUL"));
    char *lng = malloc(MS_CONF_LINE_MAX + 20);
    memset(lng, '#', MS_CONF_LINE_MAX + 19);
    lng[MS_CONF_LINE_MAX + 19] = '\n';
    assert_int_equal(ms_conf_parse(&c, lng, MS_CONF_LINE_MAX + 20, why, sizeof(why)), MS_E_PARSE);
    free(lng);

    /* From a file; a missing file. */
    char path[] = "/tmp/ms-test-conf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_true(write(fd, good, strlen(good)) == (ssize_t)strlen(good));
    close(fd);
    ms_conf_default(&c);
    assert_int_equal(ms_conf_load(&c, path, why, sizeof(why)), MS_OK);
    assert_true(c.budget == 8 * MS_GIB);
    unlink(path);
    assert_int_equal(ms_conf_load(&c, path, why, sizeof(why)), MS_E_IO);
}

static void test_socket_path(void **state)
{
    (void)state;
    char buf[MS_IPC_PATH_MAX + 1];
    setenv("MSCHED_SOCKET", "/tmp/x/explicit.sock", 1);
    assert_int_equal(ms_ipc_socket_path(3, buf, sizeof(buf)), MS_OK);
    assert_string_equal(buf, "/tmp/x/explicit.sock");
    unsetenv("MSCHED_SOCKET");
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    assert_int_equal(ms_ipc_socket_path(3, buf, sizeof(buf)), MS_OK);
    assert_string_equal(buf, "/run/user/1000/msched/gpu3.sock");
    unsetenv("XDG_RUNTIME_DIR");
    assert_int_equal(ms_ipc_socket_path(0, buf, sizeof(buf)), MS_OK);
    char want[64];
    snprintf(want, sizeof(want), "/tmp/msched-%u/gpu0.sock", (unsigned)getuid());
    assert_string_equal(buf, want);
    char lng[300];
    memset(lng, 'a', sizeof(lng) - 1);
    lng[sizeof(lng) - 1] = '\0';
    setenv("MSCHED_SOCKET", lng, 1);
    assert_int_equal(ms_ipc_socket_path(0, buf, sizeof(buf)), MS_E_NOSPACE);
    unsetenv("MSCHED_SOCKET");

    /* The private directory: created 0700; a world-writable one is refused. */
    char dir[] = "/tmp/ms-test-dir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sock[200], why[200];
    snprintf(sock, sizeof(sock), "%s/sub/gpu0.sock", dir);
    assert_int_equal(ms_ipc_prepare_dir(sock, why, sizeof(why)), MS_OK);
    char sub[200];
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    struct stat st;
    assert_int_equal(stat(sub, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    chmod(sub, 0777);
    assert_int_equal(ms_ipc_prepare_dir(sock, why, sizeof(why)), MS_E_STATE);
    assert_non_null(strstr(why, "writable"));
    rmdir(sub);
    /* Nobody listening: NOTFOUND, for a missing path and for a stale socket file. */
    int fd;
    assert_int_equal(ms_ipc_connect(sock, 100, &fd), MS_E_NOTFOUND);
    snprintf(sock, sizeof(sock), "%s/gpu0.sock", dir);
    int lfd;
    assert_int_equal(ms_ipc_listen(sock, &lfd), MS_OK);
    close(lfd); /* the file stays, nobody listens */
    assert_int_equal(ms_ipc_connect(sock, 100, &fd), MS_E_NOTFOUND);
    unlink(sock);
    /* A regular file where the socket should be is never removed. */
    int rfd = open(sock, O_CREAT | O_WRONLY, 0600);
    assert_true(rfd >= 0);
    close(rfd);
    assert_int_equal(ms_ipc_listen(sock, &lfd), MS_E_IO);
    assert_int_equal(access(sock, F_OK), 0);
    unlink(sock);
    rmdir(dir);
}

/* UUIDs: parsed in every written form, formatted as nvidia-smi does, naming a socket; the
 * index name is a link that connecting follows only beside itself; the default budget. */
static void test_uuid_paths(void **state)
{
    (void)state;
    char hex[MS_IPC_UUID_MAX], buf[MS_IPC_PATH_MAX + 1];
    const char *h = "a15c4e11-6d73-6368-6564-66616b650001";
    assert_int_equal(ms_ipc_uuid_hex("GPU-a15c4e11-6d73-6368-6564-66616b650001", hex, sizeof(hex)),
                     MS_OK);
    assert_string_equal(hex, h);
    assert_int_equal(ms_ipc_uuid_hex("MIG-A15C4E11-6D73-6368-6564-66616B650001", hex, sizeof(hex)),
                     MS_OK);
    assert_string_equal(hex, h);
    assert_int_equal(ms_ipc_uuid_hex(h, hex, sizeof(hex)), MS_OK);
    static const char *const bad[] = {"",
                                      "GPU-",
                                      "0",
                                      "GPU-a15c4e11-6d73-6368-6564-66616b65000",
                                      "GPU-a15c4e11-6d73-6368-6564-66616b6500011",
                                      "GPU-a15c4e11x6d73-6368-6564-66616b650001",
                                      "GPU-g15c4e11-6d73-6368-6564-66616b650001",
                                      "GPU-a15c4e11-6d73-6368-6564-66616b650001/x"};
    for (size_t i = 0; i < MS_ARRAY_LEN(bad); i++)
        assert_int_equal(ms_ipc_uuid_hex(bad[i], hex, sizeof(hex)), MS_E_INVAL);
    unsigned char b[16];
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)(0xf0 - i * 15);
    char text[MS_IPC_UUID_MAX];
    ms_ipc_uuid_format(b, text, sizeof(text));
    assert_string_equal(text, "GPU-f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f");

    unsetenv("MSCHED_SOCKET");
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    assert_int_equal(
        ms_ipc_uuid_socket_path("GPU-A15C4E11-6D73-6368-6564-66616B650001", buf, sizeof(buf)),
        MS_OK);
    assert_string_equal(buf, "/run/user/1000/msched/gpu-a15c4e11-6d73-6368-6564-66616b650001.sock");
    assert_int_equal(ms_ipc_uuid_socket_path("GPU-1", buf, sizeof(buf)), MS_E_INVAL);
    setenv("MSCHED_SOCKET_DIR", "/run/msched", 1);
    assert_int_equal(ms_ipc_uuid_socket_path(h, buf, sizeof(buf)), MS_OK);
    assert_string_equal(buf, "/run/msched/gpu-a15c4e11-6d73-6368-6564-66616b650001.sock");
    assert_int_equal(ms_ipc_socket_path(2, buf, sizeof(buf)), MS_OK);
    assert_string_equal(buf, "/run/msched/gpu2.sock");
    unsetenv("MSCHED_SOCKET_DIR");
    setenv("MSCHED_SOCKET", "/tmp/x/one.sock", 1);
    assert_int_equal(ms_ipc_uuid_socket_path(h, buf, sizeof(buf)), MS_OK);
    assert_string_equal(buf, "/tmp/x/one.sock");
    unsetenv("MSCHED_SOCKET");

    /* The index link: made, replaced, followed beside itself, left alone when foreign. */
    char dir[] = "/tmp/ms-test-uuid-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("XDG_RUNTIME_DIR", dir, 1);
    char sdir[200], sock[300], link[300], other[300];
    snprintf(sdir, sizeof(sdir), "%s/msched", dir);
    assert_int_equal(mkdir(sdir, 0700), 0);
    assert_false(ms_ipc_any_socket());
    assert_int_equal(ms_ipc_uuid_socket_path(h, sock, sizeof(sock)), MS_OK);
    assert_int_equal(ms_ipc_socket_path(1, link, sizeof(link)), MS_OK);
    int lfd, fd;
    assert_int_equal(ms_ipc_listen(sock, &lfd), MS_OK);
    assert_true(ms_ipc_any_socket());
    assert_int_equal(symlink("elsewhere.sock", link), 0); /* a stale link is replaced */
    assert_int_equal(ms_ipc_link_socket(sock, link), MS_OK);
    char target[200];
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    assert_true(n > 0);
    target[n] = '\0';
    assert_string_equal(target, "gpu-a15c4e11-6d73-6368-6564-66616b650001.sock");
    assert_int_equal(ms_ipc_connect(link, 1000, &fd), MS_OK);
    close(fd);
    /* A link out of its directory is refused, even to a trusted listener. */
    snprintf(other, sizeof(other), "%s/out.sock", dir);
    assert_int_equal(symlink(sock, other), 0);
    char why[300] = "";
    assert_int_equal(ms_ipc_connect_why(other, 1000, &fd, why, sizeof(why)), MS_E_STATE);
    assert_non_null(strstr(why, "a link out of its directory"));
    unlink(other);
    /* Removed only while it still leads to this socket. */
    snprintf(other, sizeof(other), "%s/gpu-00000000-0000-0000-0000-000000000000.sock", sdir);
    ms_ipc_unlink_link(other, link);
    assert_int_equal(access(link, F_OK), 0);
    ms_ipc_unlink_link(sock, link);
    struct stat st;
    assert_int_equal(lstat(link, &st), -1);
    /* A socket of its own under the index name (a daemon without a UUID) is never replaced
     * while its daemon holds its lock; once nobody does, it is stale and the link takes it. */
    int ifd;
    char lockp[320];
    snprintf(lockp, sizeof(lockp), "%s.lock", link);
    int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(lk >= 0);
    assert_int_equal(flock(lk, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(ms_ipc_listen(link, &ifd), MS_OK);
    pid_t child = fork(); /* flock is per open file: another process must try it */
    if (child == 0)
        _exit(ms_ipc_link_socket(sock, link) == MS_E_BUSY ? 0 : 1);
    int wst;
    assert_int_equal(waitpid(child, &wst, 0), child);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    close(ifd);
    close(lk);
    assert_int_equal(ms_ipc_link_socket(sock, link), MS_OK);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    close(lfd);
    unlink(link);
    unlink(lockp);
    unlink(sock);
    rmdir(sdir);
    rmdir(dir);
    unsetenv("XDG_RUNTIME_DIR");

    assert_int_equal(ms_gpu_default_budget(0), 16 * MS_GIB);
    assert_int_equal(ms_gpu_default_budget(1 * MS_GIB), 920 * MS_MIB);
    assert_int_equal(ms_gpu_default_budget(143771ull * MS_MIB), 129392ull * MS_MIB);
    assert_int_equal(ms_gpu_default_budget(MS_MIB), MS_GRAN);
}

static void small_buffers(int fd)
{
    int v = 4096;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/* A big POPULATE: about 120 KiB, many times the socket buffers. */
static void big_order(struct ms_msg *m, uint32_t salt)
{
    ms_msg_init(m, MS_MSG_POPULATE);
    m->order.epoch = salt;
    m->order.credit = salt;
    m->order.nruns = 10000;
    m->order.runs = ms_malloc(m->order.nruns * sizeof(struct ms_run));
    for (uint32_t i = 0; i < m->order.nruns; i++)
        m->order.runs[i] = (struct ms_run){salt, i, 1 + (i + salt) % 7};
}

static void test_conn_partial_io(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    small_buffers(sv[0]);
    small_buffers(sv[1]);
    struct ms_conn a, b;
    ms_conn_init(&a, sv[0], 0);
    ms_conn_init(&b, sv[1], 0);
    const int nmsg = 20;
    int sent = 0, got = 0;
    uint32_t last_seq = 0;
    while (got < nmsg) {
        if (sent < nmsg && !ms_conn_out_pending(&a)) {
            struct ms_msg m;
            big_order(&m, (uint32_t)sent + 1);
            assert_int_equal(ms_conn_send(&a, &m), MS_OK);
            assert_int_equal(m.seq, (uint32_t)sent + 1);
            ms_msg_free(&m);
            sent++;
        }
        assert_true(ms_conn_flush(&a) >= 0);
        assert_true(ms_conn_fill(&b) >= 0);
        for (;;) {
            struct ms_msg m;
            int rc = ms_conn_next(&b, &m);
            assert_true(rc >= 0);
            if (rc == 0)
                break;
            got++;
            assert_int_equal(m.type, MS_MSG_POPULATE);
            assert_int_equal(m.order.epoch, (uint32_t)got);
            assert_int_equal(m.order.nruns, 10000);
            assert_int_equal(m.order.runs[9999].first, 9999);
            assert_true(m.seq > last_seq);
            last_seq = m.seq;
            ms_msg_free(&m);
        }
    }
    assert_false(ms_conn_out_pending(&a));
    assert_true(a.bytes_out == b.bytes_in);
    /* EOF is seen after the last frame. */
    ms_conn_fini(&a);
    assert_int_equal(ms_conn_fill(&b), 0);
    assert_true(b.eof);
    ms_conn_fini(&b);
}

static void test_conn_output_bound(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    small_buffers(sv[0]);
    struct ms_conn a;
    ms_conn_init(&a, sv[0], 256 * 1024);
    int ok = 0, rc = MS_OK;
    for (int i = 0; i < 100 && rc == MS_OK; i++) {
        struct ms_msg m;
        big_order(&m, 1);
        size_t before = a.out.len;
        rc = ms_conn_send(&a, &m);
        if (rc == MS_E_NOSPACE)
            assert_int_equal(a.out.len, before); /* nothing queued */
        ms_msg_free(&m);
        ok += rc == MS_OK;
    }
    assert_int_equal(rc, MS_E_NOSPACE);
    assert_true(ok >= 1);
    /* A closed peer: a write error, not a signal. */
    close(sv[1]);
    assert_int_equal(ms_conn_flush(&a), MS_E_IO);
    struct ms_msg bad;
    ms_msg_init(&bad, MS_MSG_RUN); /* slice 0: invalid */
    assert_int_equal(ms_conn_send(&a, &bad), MS_E_INVAL);
    ms_conn_fini(&a);
}

static void test_request_reply(void **state)
{
    (void)state;
    char dir[] = "/tmp/ms-test-req-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sock[200];
    snprintf(sock, sizeof(sock), "%s/d.sock", dir);
    int lfd;
    assert_int_equal(ms_ipc_listen(sock, &lfd), MS_OK);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A tiny server: answer STATUS_REQ with an unrelated message first, then STATUS. */
        struct ms_conn c;
        int fd = -1;
        for (int i = 0; i < 400 && fd < 0; i++) {
            fd = accept(lfd, NULL, NULL);
            if (fd < 0)
                usleep(5000);
        }
        if (fd < 0)
            _exit(1);
        ms_conn_init(&c, fd, 0);
        for (;;) {
            struct ms_msg m;
            int rc = ms_conn_next(&c, &m);
            if (rc < 0)
                _exit(2);
            if (rc == 1) {
                if (m.type == MS_MSG_STATUS_REQ) {
                    struct ms_msg other, r;
                    ms_msg_init(&other, MS_MSG_CREDIT);
                    ms_conn_send(&c, &other);
                    ms_msg_init(&r, MS_MSG_STATUS);
                    r.seq = m.seq;
                    r.status.budget = 77;
                    snprintf(r.status.policy, sizeof(r.status.policy), "rr");
                    ms_conn_send(&c, &r);
                }
                if (m.type == MS_MSG_BYE)
                    _exit(0);
                ms_msg_free(&m);
                continue;
            }
            if (c.eof)
                _exit(0);
            while (ms_conn_flush(&c) == 1)
                ms_conn_wait(&c, 10);
            ms_conn_wait(&c, 100);
            ms_conn_fill(&c);
        }
    }
    close(lfd);
    struct ms_msg req, reply;
    ms_msg_init(&req, MS_MSG_STATUS_REQ);
    assert_int_equal(ms_ipc_request(sock, 5000, &req, &reply), MS_OK);
    assert_int_equal(reply.type, MS_MSG_STATUS);
    assert_true(reply.status.budget == 77);
    char text[2048];
    assert_true(ms_status_render(&reply.status, NULL, 0, 0, text, sizeof(text)) >= 3);
    assert_non_null(strstr(text, "no tasks"));
    ms_msg_free(&reply);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    unlink(sock);
    rmdir(dir);
}

static void test_status_render(void **state)
{
    (void)state;
    struct ms_msg_status st, prev;
    memset(&st, 0, sizeof(st));
    struct ms_task_status t[2];
    memset(t, 0, sizeof(t));
    t[0] = (struct ms_task_status){.task = 1,
                                   .pid = 42,
                                   .state = MS_TS_RUNNING,
                                   .resident = MS_GIB,
                                   .footprint = 2 * MS_GIB,
                                   .bytes_in = 4 * MS_GIB,
                                   .switches = 3,
                                   .host_bytes = 512 * MS_MIB};
    snprintf(t[0].name, sizeof(t[0].name), "python3 train.py");
    t[1] = (struct ms_task_status){.task = 2, .pid = 43, .prio = 10, .state = MS_TS_WAITING};
    snprintf(t[1].name, sizeof(t[1].name), "serve");
    st.tasks = t;
    st.ntasks = 2;
    st.budget = 16 * MS_GIB;
    st.resident = MS_GIB;
    st.switches = 4;
    st.switch_ns_total = 4000000;
    snprintf(st.policy, sizeof(st.policy), "rr");
    snprintf(st.evict, sizeof(st.evict), "opt");
    char text[4096];
    int n = ms_status_render(&st, NULL, 0, 0, text, sizeof(text));
    assert_int_equal(n, 9);
    assert_non_null(strstr(text, "\nmode: sliced"));
    assert_non_null(strstr(text, "\nhost: 512 MiB pinned"));
    assert_non_null(strstr(text, " HOST "));
    assert_non_null(strstr(text, "1.00 GiB resident of 16.0 GiB budget (6%)"));
    assert_non_null(strstr(text, "mean 1.00 ms"));
    assert_non_null(strstr(text, "running"));
    assert_non_null(strstr(text, "python3 train.py"));
    assert_non_null(strstr(text, " rt "));
    /* With a previous sample: rates. */
    prev = st;
    struct ms_task_status pt[1];
    pt[0] = t[0];
    pt[0].bytes_in = 3 * MS_GIB;
    prev.tasks = pt;
    prev.ntasks = 1;
    n = ms_status_render(&st, &prev, 1.0, 0, text, sizeof(text));
    assert_non_null(strstr(text, "IN/S"));
    assert_non_null(strstr(text, "1.00 GiB/s"));
    st.sharing = 1;
    ms_status_render(&st, NULL, 0, 0, text, sizeof(text));
    assert_non_null(strstr(text, "\nmode: shared"));
    /* Width and a short buffer cut whole lines only. */
    n = ms_status_render(&st, NULL, 0, 20, text, sizeof(text));
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        assert_true(nl - p <= 20);
        p = nl + 1;
    }
    n = ms_status_render(&st, NULL, 0, 0, text, 100);
    assert_true(n >= 1 && n < 9);
    assert_int_equal(text[strlen(text) - 1], '\n');
}

/* The shim's option table: every value the CLI accepts the shim accepts too, a budget below
 * 2 MiB is refused (it used to become 0: no budget), bad values leave the default standing
 * and are reported once each, and the help names every flag and variable. */
static const char *fake_env[][2] = {
    {"MSCHED_BUDGET", "1MiB"},   {"MSCHED_WEIGHT", "1001"},         {"MSCHED_PRIORITY", "rt"},
    {"MSCHED_ENGINE", "demand"}, {"MSCHED_DAEMON_TIMEOUT_MS", "0"}, {"MSCHED_IDLE_MS", ""},
    {"MSCHED_VERBOSE", "yes"},   {"MSCHED_TRACE", "/tmp/t-%p"},     {"MSCHED_STRICT", "2"},
};
static const char *fake_get(const char *name)
{
    for (size_t i = 0; i < sizeof fake_env / sizeof fake_env[0]; i++)
        if (strcmp(fake_env[i][0], name) == 0)
            return fake_env[i][1];
    return NULL;
}
static int nbad;
static char bad_text[4][320];
static void on_bad(void *arg, const char *why, const char *def)
{
    (void)arg;
    if (nbad < 4)
        snprintf(bad_text[nbad], sizeof bad_text[0], "%s; using %s", why, def);
    nbad++;
}

static void test_shim_options(void **state)
{
    (void)state;
    uint64_t v = 0;
    char why[320];
    assert_int_equal(ms_shimopt_parse(MS_OPT_BUDGET, "16GiB", &v, why, sizeof why), MS_OK);
    assert_true(v == 16ull << 30);
    assert_int_equal(ms_shimopt_parse(MS_OPT_BUDGET, "1MiB", &v, why, sizeof why), MS_E_INVAL);
    assert_string_equal(why, "MSCHED_BUDGET=1MiB is not a size of at least 2MiB (e.g. 16GiB)");
    assert_int_equal(ms_shimopt_parse(MS_OPT_BUDGET, "2MiB", &v, NULL, 0), MS_OK);
    assert_int_equal(ms_shimopt_parse(MS_OPT_BUDGET, "0", &v, NULL, 0), MS_E_INVAL);
    assert_int_equal(ms_shimopt_parse(MS_OPT_PRIORITY, "be", &v, NULL, 0), MS_OK);
    assert_int_equal((int)v, 0);
    assert_int_equal(ms_shimopt_parse(MS_OPT_PRIORITY, "7", &v, NULL, 0), MS_OK);
    assert_int_equal((int)v, 7);
    assert_int_equal(ms_shimopt_parse(MS_OPT_PRIORITY, "11", &v, NULL, 0), MS_E_INVAL);
    assert_int_equal(ms_shimopt_parse(MS_OPT_WEIGHT, "-1", &v, NULL, 0), MS_E_INVAL);
    assert_int_equal(ms_shimopt_parse(MS_OPT_WEIGHT, "+5", &v, NULL, 0), MS_E_INVAL);
    assert_int_equal(ms_shimopt_parse(MS_OPT_WEIGHT, "1000", &v, NULL, 0), MS_OK);
    assert_int_equal(ms_shimopt_parse(MS_OPT_DAEMON_TIMEOUT_MS, "99", &v, NULL, 0), MS_E_INVAL);
    assert_int_equal(ms_shimopt_parse(MS_OPT_DAEMON_TIMEOUT_MS, "0", &v, NULL, 0), MS_OK);
    assert_int_equal(ms_shimopt_parse(MS_OPT_DAEMON_TIMEOUT_MS, "100", &v, NULL, 0), MS_OK);
    assert_int_equal(ms_shimopt_parse(MS_OPT_ENGINE, "unified", &v, NULL, 0), MS_OK);
    assert_int_equal((int)v, MS_ENGINE_UNIFIED);
    assert_int_equal(ms_shimopt_parse(MS_OPT_ENGINE, "vm", &v, NULL, 0), MS_E_INVAL);
    assert_int_equal(ms_shimopt_parse(MS_OPT_ENGINE, "vmmm", &v, NULL, 0), MS_E_INVAL);
    assert_int_equal(ms_shimopt_parse(MS_OPT_VERBOSE, "off", &v, NULL, 0), MS_OK);
    assert_int_equal((int)v, 0);
    assert_int_equal(ms_shimopt_parse(MS_OPT_VERBOSE, "maybe", &v, NULL, 0), MS_E_INVAL);

    /* Every switch's set_to and every default parse. */
    for (int i = 0; i < MS_OPT_COUNT; i++) {
        const struct ms_shimopt_def *d = &ms_shimopt_defs[i];
        assert_non_null(d->env);
        if (d->set_to)
            assert_int_equal(ms_shimopt_parse((enum ms_shimopt)i, d->set_to, &v, NULL, 0), MS_OK);
        if (*d->def)
            assert_int_equal(ms_shimopt_parse((enum ms_shimopt)i, d->def, &v, NULL, 0), MS_OK);
        if (d->flag)
            assert_int_equal(ms_shimopt_by_flag(d->flag), i);
    }
    assert_int_equal(ms_shimopt_by_flag("--nosuch"), -1);

    struct ms_shimopts o;
    nbad = 0;
    ms_shimopts_read(&o, fake_get, on_bad, NULL);
    assert_int_equal(nbad, 3); /* budget, weight, strict */
    assert_string_equal(bad_text[0], "MSCHED_WEIGHT=1001 is not 0..1000; using 1");
    assert_false(o.set[MS_OPT_BUDGET]);
    assert_true(o.value[MS_OPT_BUDGET] == 0);
    assert_false(o.set[MS_OPT_WEIGHT]);
    assert_true(o.value[MS_OPT_WEIGHT] == 1);
    assert_true(o.set[MS_OPT_PRIORITY] && o.value[MS_OPT_PRIORITY] == 10);
    assert_true(o.value[MS_OPT_ENGINE] == MS_ENGINE_DEMAND);
    assert_true(o.set[MS_OPT_DAEMON_TIMEOUT_MS] && o.value[MS_OPT_DAEMON_TIMEOUT_MS] == 0);
    assert_false(o.set[MS_OPT_IDLE_MS]); /* empty means unset */
    assert_true(o.value[MS_OPT_IDLE_MS] == 20);
    assert_true(o.value[MS_OPT_VERBOSE] == 1);
    assert_string_equal(o.text[MS_OPT_TRACE], "/tmp/t-%p");
    assert_true(o.value[MS_OPT_PIN_PIECE] == 64ull << 20);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ms_shimopt_help(f);
    fclose(f);
    for (int i = 0; i < MS_OPT_COUNT; i++) {
        assert_non_null(strstr(buf, ms_shimopt_defs[i].env));
        if (ms_shimopt_defs[i].flag)
            assert_non_null(strstr(buf, ms_shimopt_defs[i].flag));
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_durations), cmocka_unit_test(test_options),
        cmocka_unit_test(test_shim_options),        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_socket_path),         cmocka_unit_test(test_conn_partial_io),
        cmocka_unit_test(test_conn_output_bound),   cmocka_unit_test(test_request_reply),
        cmocka_unit_test(test_status_render),       cmocka_unit_test(test_uuid_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
