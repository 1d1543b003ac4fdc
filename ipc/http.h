/*
 * http.h - the daemon's HTTP edge: the metrics endpoint's listen address and request parser.
 *
 * Design
 *   mschedd serves one resource, GET /metrics, to a scraper such as Prometheus. Everything a
 *   peer sends is untrusted, so the parser is small and strict: it looks at one request head
 *   (request line and header lines up to the blank line), never at a body, and accepts at most
 *   MS_HTTP_HEAD_MAX bytes of it. The request line must be "METHOD SP TARGET SP HTTP/1.x"
 *   with a token method (upper-case letters), an origin-form target (starting with '/', no
 *   control characters, at most MS_HTTP_TARGET_MAX bytes) and version 1.0 or 1.1. Header
 *   lines are only checked for control characters and a colon; their values are ignored
 *   (the daemon closes the connection after each answer, so neither keep-alive nor a body
 *   matter). Lines end in CRLF or a bare LF. The parser is fuzzed (tests/fuzz/fuzz_http.c).
 *
 *   The listen address is "PORT" (loopback, 127.0.0.1), "HOST:PORT" with a numeric IPv4
 *   host, or "[V6]:PORT" with a numeric IPv6 host; names are not resolved (no DNS lookups in
 *   the daemon). Port 0 asks the kernel for a free port (tests).
 *
 * Pure functions: no allocation, no global state; thread-compatible; built into libmsipc.
 *
 * Errors: MS_E_PARSE (malformed), MS_E_NOSPACE (over a bound), MS_E_INVAL (a bad address).
 */
#ifndef MS_HTTP_H
#define MS_HTTP_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#define MS_HTTP_HEAD_MAX 4096
#define MS_HTTP_TARGET_MAX 256

struct ms_http_req {
    char method[16];
    char target[MS_HTTP_TARGET_MAX + 1];
    int minor;       /* HTTP/1.minor: 0 or 1 */
    size_t head_len; /* bytes of the head, the blank line included */
};

/*
 * Parse the request head at the start of buf[0..len). Returns 1 when a whole head was parsed
 * into *out, 0 when more bytes are needed (no error so far), or an error: MS_E_PARSE
 * (malformed), MS_E_NOSPACE (the head is longer than MS_HTTP_HEAD_MAX, or the target longer
 * than MS_HTTP_TARGET_MAX).
 */
int ms_http_parse_request(const char *buf, size_t len, struct ms_http_req *out);

/* The path part of a target (up to '?' or '#') equals path. */
int ms_http_path_is(const struct ms_http_req *r, const char *path);

/*
 * Parse a listen address (rules above) into *sa and *salen. Errors: MS_E_INVAL with why.
 */
int ms_http_parse_addr(const char *s, struct sockaddr_storage *sa, socklen_t *salen, char *why,
                       size_t whylen);

#endif /* MS_HTTP_H */
