/* quell_lighttpd: quelltoken for an unmodified, single-threaded event-loop server (lighttpd
 * 1.4.69), loaded with LD_PRELOAD together with quelltoken.c in one shared object:
 *
 *   gcc -O2 -fPIC -shared -pthread quell_lighttpd.c quelltoken.c -o libquell_lighttpd.so -ldl
 *   LD_PRELOAD=.../libquell_lighttpd.so QUELL_TOKEN_LOG_DIR=/run/x lighttpd -D -f conf
 *
 * A token per accepted connection, started at accept; resumed whenever the server does I/O on
 * that connection (read, recv, write, writev, send, sendfile, sendfile64, shutdown), the token
 * that ran before yielded; every token yielded when the server waits in epoll_wait; the token
 * ended when the connection is shut for writing (the response sent, lighttpd then lingers for
 * the client's close) or closed. A switch between two connections' tokens, and an accept while
 * another token runs, take one reading of the counters (qt_switch, qt_start_after). The
 * request id and class are parsed from the first bytes read on the connection: the class is
 * the request path without its query, the id an `X-Request-Id` header
 * or else a `rid=` query parameter (-1 when neither). One request per connection is assumed
 * (HAProxy `http-reuse never`, clients sending `Connection: close`); a kept-alive connection
 * is one record for all its requests, labelled by the first. lighttpd imports sendfile64, not
 * sendfile, and uses accept4 (docs: shared/reference/attribution-components.md). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "quelltoken.h"

#define MAXFD 65536
struct conn {
    int64_t token;                     /* 0: not a tracked connection */
    int labelled;
};
static struct conn C[MAXFD];           /* by fd; single-threaded server assumed */
static int64_t current;                /* the running token, 0 when none */

static ssize_t (*r_read)(int, void *, size_t);
static ssize_t (*r_recv)(int, void *, size_t, int);
static ssize_t (*r_write)(int, const void *, size_t);
static ssize_t (*r_send)(int, const void *, size_t, int);
static ssize_t (*r_writev)(int, const struct iovec *, int);
static ssize_t (*r_sendfile)(int, int, off_t *, size_t);
static ssize_t (*r_sendfile64)(int, int, off64_t *, size_t);
static int (*r_accept)(int, struct sockaddr *, socklen_t *);
static int (*r_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*r_epoll_wait)(int, struct epoll_event *, int, int);
static int (*r_close)(int);
static int (*r_shutdown)(int, int);

#define R(f) do { if (!r_##f) r_##f = dlsym(RTLD_NEXT, #f); } while (0)

__attribute__((constructor)) static void init(void) {
    R(read); R(recv); R(write); R(send); R(writev); R(sendfile); R(sendfile64);
    R(accept); R(accept4); R(epoll_wait); R(close); R(shutdown);
}

static inline int tracked(int fd) { return fd >= 0 && fd < MAXFD && C[fd].token > 0; }

/* make fd's token the running one, at one reading of the counters */
static inline void switch_to(int fd) {
    int64_t tok = C[fd].token;
    if (current == tok) return;
    qt_switch(current, tok);
    current = tok;
}

static inline int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int64_t digits(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p >= end || *p < '0' || *p > '9') return -1;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9' && v < (INT64_MAX - 9) / 10) v = v * 10 + (*p++ - '0');
    return v;
}

/* Parse "METHOD /path?query HTTP/1.x\r\nHeaders..." into the path (class) and request id.
 * Exported for the tests (a ctypes load of this object does not interpose anything). */
int quell_http_parse(const char *buf, size_t n, char *cls, size_t cls_bytes, int64_t *rid) {
    const char *end = buf + n, *p = memchr(buf, ' ', n);
    *rid = -1;
    if (cls_bytes) cls[0] = 0;
    if (!p) return -1;
    const char *path = ++p;
    while (p < end && *p != ' ' && *p != '?' && *p != '\r' && *p != '\n') p++;
    size_t len = (size_t)(p - path);
    if (cls_bytes) {
        if (len >= cls_bytes) len = cls_bytes - 1;
        memcpy(cls, path, len);
        cls[len] = 0;
    }
    if (p < end && *p == '?') {                          /* rid= in the query */
        const char *q = p + 1;
        while (q < end && *q != ' ' && *q != '\r' && *q != '#') {
            if (end - q > 4 && memcmp(q, "rid=", 4) == 0 && (q[-1] == '?' || q[-1] == '&')) {
                *rid = digits(q + 4, end);
                break;
            }
            q++;
        }
    }
    static const char H[] = "\nx-request-id:";         /* a header overrides the query */
    for (const char *l = memchr(buf, '\n', n); l && l < end; l = memchr(l + 1, '\n', (size_t)(end - l - 1))) {
        size_t k = 0;
        while (k < sizeof H - 1 && l + k < end && lower(l[k]) == H[k]) k++;
        if (k == sizeof H - 1) {
            int64_t v = digits(l + k, end);
            if (v >= 0) *rid = v;
            break;
        }
        if (l + 1 >= end) break;
    }
    return 0;
}

static void on_accept(int fd) {
    if (fd < 0 || fd >= MAXFD) return;
    int64_t tok = qt_start_after(current, -1, "");
    current = 0;
    if (tok <= 0) { C[fd].token = 0; return; }
    C[fd].token = tok;
    C[fd].labelled = 0;
    current = tok;
}

static void on_read(int fd, const void *buf, ssize_t n) {
    if (n <= 0 || C[fd].labelled) return;
    char cls[QT_CLASS_BYTES];
    int64_t rid;
    if (quell_http_parse(buf, (size_t)n, cls, sizeof cls, &rid) == 0) qt_label(C[fd].token, rid, cls);
    C[fd].labelled = 1;
}

ssize_t read(int fd, void *b, size_t n) {
    R(read);
    if (!tracked(fd)) return r_read(fd, b, n);
    switch_to(fd);
    ssize_t r = r_read(fd, b, n);
    int e = errno;
    on_read(fd, b, r);
    errno = e;
    return r;
}

ssize_t recv(int fd, void *b, size_t n, int f) {
    R(recv);
    if (!tracked(fd)) return r_recv(fd, b, n, f);
    switch_to(fd);
    ssize_t r = r_recv(fd, b, n, f);
    int e = errno;
    on_read(fd, b, r);
    errno = e;
    return r;
}

#define IO(name, proto, args, fd)                          \
    ssize_t name proto {                                   \
        R(name);                                           \
        if (tracked(fd)) switch_to(fd);                    \
        return r_##name args;                              \
    }
IO(write, (int fd, const void *b, size_t n), (fd, b, n), fd)
IO(send, (int fd, const void *b, size_t n, int f), (fd, b, n, f), fd)
IO(writev, (int fd, const struct iovec *v, int c), (fd, v, c), fd)
IO(sendfile, (int o, int i, off_t *off, size_t n), (o, i, off, n), o)
IO(sendfile64, (int o, int i, off64_t *off, size_t n), (o, i, off, n), o)

/* the token's end: its connection shut for writing (the response is all sent; what follows is
 * lighttpd lingering for the client's close, not the request) or closed */
static void finish(int fd) {
    int64_t tok = C[fd].token;
    C[fd].token = 0;
    if (current == tok) current = 0;   /* another running token stays running */
    qt_end(tok);
}

int shutdown(int fd, int how) {
    R(shutdown);
    if (!tracked(fd)) return r_shutdown(fd, how);
    switch_to(fd);
    int r = r_shutdown(fd, how), e = errno;
    if (how != SHUT_RD) finish(fd);
    errno = e;
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

int epoll_wait(int ep, struct epoll_event *ev, int max, int to) {
    R(epoll_wait);
    if (current) { qt_yield(current); current = 0; }
    return r_epoll_wait(ep, ev, max, to);
}

int close(int fd) {
    R(close);
    if (tracked(fd)) finish(fd);
    return r_close(fd);
}
