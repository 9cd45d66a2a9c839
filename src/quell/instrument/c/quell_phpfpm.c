/* quell_phpfpm: quelltoken for php-fpm's workers, loaded with LD_PRELOAD together with
 * quelltoken.c in one shared object:
 *
 *   gcc -O2 -fPIC -shared -pthread quell_phpfpm.c quelltoken.c -o libquell_phpfpm.so -ldl
 *   LD_PRELOAD=.../libquell_phpfpm.so QUELL_TOKEN_LOG_DIR=/run/x php-fpm8.2 -F ...
 *
 * A php-fpm worker serves one request at a time: it blocks in accept on the pool's socket,
 * reads the FastCGI request, runs the script, writes the answer and closes. So a token starts
 * at accept and ends at close, with nothing to yield (the worker waits for its next request
 * in accept, outside any token). php-fpm8.2 imports accept, read, write, shutdown and close
 * for this. The request is named from its FastCGI PARAMS as they are read: the class is
 * REQUEST_URI without its query (else SCRIPT_NAME), the id the HTTP_X_REQUEST_ID parameter
 * (the X-Request-Id header), else rid= in QUERY_STRING, else -1. The workers are forked from
 * php-fpm's master: quelltoken forgets the master's state in each child (pthread_atfork). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "quelltoken.h"

#define NCONN 16                       /* connections open at once in one worker */
#define BUF_BYTES 16384                /* request bytes kept to find the PARAMS */

struct conn {
    int fd;                            /* -1: free */
    int labelled;
    int64_t token;
    size_t len;
    unsigned char buf[BUF_BYTES];
};
static struct conn *C;                 /* NCONN entries, allocated at the first accept */

static ssize_t (*r_read)(int, void *, size_t);
static int (*r_accept)(int, struct sockaddr *, socklen_t *);
static int (*r_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*r_close)(int);

#define R(f) do { if (!r_##f) r_##f = dlsym(RTLD_NEXT, #f); } while (0)

/* the connection on fd (fd >= 0), or a free entry (fd == -1) */
static struct conn *find(int fd) {
    if (!C) return NULL;
    for (int i = 0; i < NCONN; i++)
        if (C[i].fd == fd) return &C[i];
    return NULL;
}

static uint32_t fcgi_len(const unsigned char *p, const unsigned char *end, size_t *used) {
    if (p >= end) { *used = 0; return 0; }
    if (!(p[0] & 0x80)) { *used = 1; return p[0]; }
    if (end - p < 4) { *used = 0; return 0; }
    *used = 4;
    return ((uint32_t)(p[0] & 0x7f) << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int64_t digits(const unsigned char *p, const unsigned char *end) {
    if (p >= end || *p < '0' || *p > '9') return -1;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9' && v < (INT64_MAX - 9) / 10) v = v * 10 + (*p++ - '0');
    return v;
}

static int64_t query_rid(const unsigned char *q, const unsigned char *end) {
    for (const unsigned char *p = q; p + 4 <= end; p++)
        if (memcmp(p, "rid=", 4) == 0 && (p == q || p[-1] == '&' || p[-1] == '?'))
            return digits(p + 4, end);
    return -1;
}

#define IS(name, n, lit) ((n) == sizeof(lit) - 1 && memcmp((name), (lit), (n)) == 0)

/* Parse the FastCGI records in buf[0, n): 1 when the PARAMS stream ended (its empty record
 * read) with cls and rid set, 0 when more bytes are needed, -1 when it is not FastCGI.
 * Exported for the tests (a ctypes load of this object does not interpose anything). */
int quell_fcgi_parse(const unsigned char *buf, size_t n, char *cls, size_t cls_bytes, int64_t *rid) {
    const unsigned char *p = buf, *end = buf + n;
    int64_t header_rid = -1, q_rid = -1;
    const unsigned char *uri = NULL, *script = NULL;
    size_t uri_n = 0, script_n = 0;
    *rid = -1;
    if (cls_bytes) cls[0] = 0;
    while (end - p >= 8) {
        if (p[0] != 1) return -1;      /* FCGI_VERSION_1 */
        unsigned type = p[1];
        size_t clen = ((size_t)p[4] << 8) | p[5], plen = p[6];
        if ((size_t)(end - p) < 8 + clen + plen) return 0;
        const unsigned char *c = p + 8, *cend = c + clen;
        if (type == 4 && clen == 0) {  /* FCGI_PARAMS, empty: the end of the parameters */
            const unsigned char *path = uri ? uri : script;
            size_t len = uri ? uri_n : script_n;
            if (path) {
                const unsigned char *qm = memchr(path, '?', len);
                if (qm) {
                    if (q_rid < 0) q_rid = query_rid(qm + 1, path + len);
                    len = (size_t)(qm - path);
                }
            }
            if (cls_bytes && path) {
                if (len >= cls_bytes) len = cls_bytes - 1;
                memcpy(cls, path, len);
                cls[len] = 0;
            }
            *rid = header_rid >= 0 ? header_rid : q_rid;
            return 1;
        }
        while (type == 4 && c < cend) {  /* name-value pairs (none split across records here) */
            size_t u1, u2;
            uint32_t nl = fcgi_len(c, cend, &u1);
            if (!u1) break;
            uint32_t vl = fcgi_len(c + u1, cend, &u2);
            if (!u2) break;
            const unsigned char *name = c + u1 + u2, *val = name + nl;
            if (val + vl > cend) break;
            if (IS(name, nl, "REQUEST_URI")) { uri = val; uri_n = vl; }
            else if (IS(name, nl, "SCRIPT_NAME")) { script = val; script_n = vl; }
            else if (IS(name, nl, "HTTP_X_REQUEST_ID")) header_rid = digits(val, val + vl);
            else if (IS(name, nl, "QUERY_STRING") && q_rid < 0) q_rid = query_rid(val, val + vl);
            c = val + vl;
        }
        p += 8 + clen + plen;
    }
    return 0;
}

__attribute__((constructor)) static void init(void) {
    R(read); R(accept); R(accept4); R(close);
}

static void on_accept(int fd) {
    if (fd < 0) return;
    if (!C) {
        C = calloc(NCONN, sizeof *C);
        if (!C) return;
        for (int i = 0; i < NCONN; i++) C[i].fd = -1;
    }
    struct conn *c = find(-1);
    if (!c) return;                    /* more at once than a worker has: not counted */
    int64_t tok = qt_start(-1, "");
    if (tok <= 0) return;
    c->fd = fd;
    c->token = tok;
    c->labelled = 0;
    c->len = 0;
}

static void on_read(struct conn *c, const void *b, ssize_t n) {
    if (n <= 0 || c->labelled) return;
    size_t k = (size_t)n < BUF_BYTES - c->len ? (size_t)n : BUF_BYTES - c->len;
    memcpy(c->buf + c->len, b, k);
    c->len += k;
    char cls[QT_CLASS_BYTES];
    int64_t rid;
    int done = quell_fcgi_parse(c->buf, c->len, cls, sizeof cls, &rid);
    if (done == 1) qt_label(c->token, rid, cls);
    if (done != 0 || c->len == BUF_BYTES) c->labelled = 1;
}

ssize_t read(int fd, void *b, size_t n) {
    R(read);
    ssize_t r = r_read(fd, b, n);
    struct conn *c = fd >= 0 ? find(fd) : NULL;
    if (c) {
        int e = errno;
        on_read(c, b, r);
        errno = e;
    }
    return r;
}

int accept(int s, struct sockaddr *a, socklen_t *l) {
    R(accept);
    int fd = r_accept(s, a, l), e = errno;
    on_accept(fd);
    errno = e;
    return fd;
}

int accept4(int s, struct sockaddr *a, socklen_t *l, int f) {
    R(accept4);
    int fd = r_accept4(s, a, l, f), e = errno;
    on_accept(fd);
    errno = e;
    return fd;
}

int close(int fd) {
    R(close);
    struct conn *c = fd >= 0 ? find(fd) : NULL;
    if (c) {
        c->fd = -1;
        qt_end(c->token);
    }
    return r_close(fd);
}
