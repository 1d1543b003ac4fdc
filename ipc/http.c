/*
 * http.c - the metrics endpoint's request parser and listen-address parser (contract: http.h).
 *
 * The parser walks the bytes once, line by line, and never reads past len; it copies the
 * method and the target into fixed arrays after checking their lengths. A head is complete at
 * the first empty line; anything before it that is not a well-formed line is an error, so a
 * peer cannot make the daemon wait for a head that could never be valid.
 */
#include "ipc/http.h"

#include "core/ms.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line at p (up to len bytes): its length without the line end into *n, the line end's
 * length into *eol. Returns 0 when no LF is there yet. */
static int line_at(const char *p, size_t len, size_t *n, size_t *eol)
{
    const char *lf = memchr(p, '\n', len);
    if (!lf)
        return 0;
    size_t k = (size_t)(lf - p);
    *eol = 1;
    if (k > 0 && p[k - 1] == '\r') {
        k--;
        *eol = 2;
    }
    *n = k;
    return 1;
}

static int is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

static int parse_request_line(const char *p, size_t n, struct ms_http_req *out)
{
    size_t i = 0;
    while (i < n && p[i] >= 'A' && p[i] <= 'Z')
        i++;
    if (i == 0 || i >= n || p[i] != ' ')
        return MS_E_PARSE;
    if (i >= sizeof(out->method))
        return MS_E_PARSE;
    memcpy(out->method, p, i);
    out->method[i] = '\0';
    size_t t = ++i;
    while (i < n && p[i] != ' ') {
        if (is_ctl((unsigned char)p[i]))
            return MS_E_PARSE;
        i++;
    }
    size_t tlen = i - t;
    if (tlen == 0 || p[t] != '/' || i >= n)
        return MS_E_PARSE;
    if (tlen > MS_HTTP_TARGET_MAX)
        return MS_E_NOSPACE;
    memcpy(out->target, p + t, tlen);
    out->target[tlen] = '\0';
    i++;
    static const char ver[] = "HTTP/1.";
    if (n - i != sizeof(ver) || memcmp(p + i, ver, sizeof(ver) - 1) != 0)
        return MS_E_PARSE;
    char m = p[n - 1];
    if (m != '0' && m != '1')
        return MS_E_PARSE;
    out->minor = m - '0';
    return MS_OK;
}

static int check_header(const char *p, size_t n)
{
    if (p[0] == ' ' || p[0] == '\t')
        return MS_E_PARSE; /* obsolete line folding */
    const char *colon = memchr(p, ':', n);
    if (!colon || colon == p)
        return MS_E_PARSE;
    for (const char *q = p; q < colon; q++)
        if (is_ctl((unsigned char)*q) || *q == ' ' || *q == '\t')
            return MS_E_PARSE;
    for (const char *q = colon + 1; q < p + n; q++)
        if (is_ctl((unsigned char)*q) && *q != '\t')
            return MS_E_PARSE;
    return MS_OK;
}

int ms_http_parse_request(const char *buf, size_t len, struct ms_http_req *out)
{
    memset(out, 0, sizeof(*out));
    size_t lim = MS_MIN(len, (size_t)MS_HTTP_HEAD_MAX);
    size_t pos = 0, n, eol;
    int first = 1;
    for (;;) {
        if (!line_at(buf + pos, lim - pos, &n, &eol)) {
            if (len >= MS_HTTP_HEAD_MAX)
                return MS_E_NOSPACE;
            /* What is there so far must not already be broken. */
            for (size_t i = pos; i < lim; i++)
                if (buf[i] == '\0')
                    return MS_E_PARSE;
            return 0;
        }
        const char *p = buf + pos;
        pos += n + eol;
        if (memchr(p, '\0', n))
            return MS_E_PARSE;
        if (first) {
            int rc = parse_request_line(p, n, out);
            if (rc)
                return rc;
            first = 0;
            continue;
        }
        if (n == 0) {
            out->head_len = pos;
            return 1;
        }
        int rc = check_header(p, n);
        if (rc)
            return rc;
    }
}

int ms_http_path_is(const struct ms_http_req *r, const char *path)
{
    size_t k = strcspn(r->target, "?#");
    return strlen(path) == k && memcmp(r->target, path, k) == 0;
}

static int parse_port(const char *s, unsigned *out)
{
    if (!*s || strlen(s) > 5)
        return MS_E_INVAL;
    unsigned v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return MS_E_INVAL;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > 65535)
        return MS_E_INVAL;
    *out = v;
    return MS_OK;
}

int ms_http_parse_addr(const char *s, struct sockaddr_storage *sa, socklen_t *salen, char *why,
                       size_t whylen)
{
    memset(sa, 0, sizeof(*sa));
    for (const char *q = s; *q; q++)
        if (is_ctl((unsigned char)*q) || *q == ' ') {
            snprintf(why, whylen, "metrics address: a space or control character");
            return MS_E_INVAL;
        }
    if (!*s) {
        snprintf(why, whylen, "metrics address: empty");
        return MS_E_INVAL;
    }
    char host[64] = "127.0.0.1";
    const char *port = s;
    int v6 = 0;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(host)) {
            snprintf(why, whylen, "metrics address '%.80s': expected [IPV6]:PORT", s);
            return MS_E_INVAL;
        }
        snprintf(host, sizeof(host), "%.*s", (int)(end - s - 1), s + 1);
        port = end + 2;
        v6 = 1;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon) {
            if ((size_t)(colon - s) >= sizeof(host) || colon == s) {
                snprintf(why, whylen, "metrics address '%.80s': expected HOST:PORT", s);
                return MS_E_INVAL;
            }
            snprintf(host, sizeof(host), "%.*s", (int)(colon - s), s);
            port = colon + 1;
        }
    }
    unsigned p;
    if (parse_port(port, &p) != MS_OK) {
        snprintf(why, whylen, "metrics address '%.80s': the port must be a number up to 65535", s);
        return MS_E_INVAL;
    }
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)sa;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)p);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) {
            snprintf(why, whylen, "metrics address '%.80s': not a numeric IPv6 address", s);
            return MS_E_INVAL;
        }
        *salen = sizeof(*a);
        return MS_OK;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)sa;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)p);
    if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
        snprintf(why, whylen,
                 "metrics address '%.80s': not a numeric IPv4 address (names are not resolved)", s);
        return MS_E_INVAL;
    }
    *salen = sizeof(*a);
    return MS_OK;
}
