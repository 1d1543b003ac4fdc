/*
 * fuzz_http.c - libFuzzer target for the metrics endpoint's parsers (ipc/http.c).
 *
 * The input is what a peer sends on the metrics socket. Properties of the request parser: the
 * answer is 1, 0, MS_E_PARSE or MS_E_NOSPACE; a parsed head lies within the input and within
 * MS_HTTP_HEAD_MAX, has an upper-case method, a target starting with '/' of bounded length
 * and version 1.0 or 1.1; every shorter prefix of a parsed head asks for more bytes (the
 * daemon parses as bytes arrive, so a prefix must never be refused or taken for a whole head).
 * The input as a string also goes through the listen-address parser: an accepted address has
 * the family its length says, and a refusal has a one-line reason.
 *
 * Any broken property calls abort(), which both libFuzzer and the replay runner report.
 */
#include "ipc/http.h"

#include "core/ms.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_addr(const uint8_t *data, size_t size)
{
    char s[128];
    if (size >= sizeof(s))
        return;
    memcpy(s, data, size);
    s[size] = '\0';
    struct sockaddr_storage sa;
    socklen_t len = 0;
    char why[200] = "";
    int rc = ms_http_parse_addr(s, &sa, &len, why, sizeof(why));
    if (rc == MS_OK) {
        if (!((sa.ss_family == AF_INET && len == sizeof(struct sockaddr_in)) ||
              (sa.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6))))
            abort();
    } else if (rc != MS_E_INVAL || !why[0] || strchr(why, '\n')) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct ms_http_req r;
    int rc = ms_http_parse_request(buf, size, &r);
    if (rc != 1 && rc != 0 && rc != MS_E_PARSE && rc != MS_E_NOSPACE)
        abort();
    if (rc == 1) {
        if (r.head_len == 0 || r.head_len > size || r.head_len > MS_HTTP_HEAD_MAX)
            abort();
        if (!r.method[0] || strspn(r.method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(r.method))
            abort();
        if (r.target[0] != '/' || strlen(r.target) > MS_HTTP_TARGET_MAX)
            abort();
        if (r.minor != 0 && r.minor != 1)
            abort();
        for (size_t k = 0; k < r.head_len; k += 1 + k / 8) {
            struct ms_http_req p;
            if (ms_http_parse_request(buf, k, &p) != 0)
                abort();
        }
    }
    check_addr(data, size);
    return 0;
}
