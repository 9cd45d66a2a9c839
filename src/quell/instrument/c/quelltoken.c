/* quelltoken: see quelltoken.h. Build: gcc -O2 -fPIC -shared -pthread quelltoken.c -o libquelltoken.so */
#define _GNU_SOURCE
#include "quelltoken.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(qt_record) == 160, "qt_record is 160 bytes on disk");
_Static_assert(sizeof(qt_log_header) == 64, "qt_log_header is 64 bytes on disk");

#define SLOT_BITS 14
#define NSLOTS (1u << SLOT_BITS)       /* tokens open at once on one thread */
#define GEN_BITS 26
#define DEFAULT_LOG_RECORDS 65536u

struct slot {
    int64_t token;
    int32_t state;                     /* 0 free, else enum qt_state */
    int32_t pad;
    qt_snapshot at;                    /* snapshot at the start of the current running span */
    int64_t at_other_ns, at_other_pre; /* the eBPF totals then (when mapped) */
    qt_record rec;
};

struct thread_state {
    int ready;
    int ss_fd;                         /* this thread's /proc/thread-self/schedstat */
    int64_t tid;
    struct slot *slots;
    uint32_t cursor, open;
    uint64_t gen;
    qt_log_header *log;                /* mapped log, or NULL */
    size_t log_bytes;
    uint64_t seq;
    int log_failed;
    /* The last schedstat reading and the switch counts read just before it: while the thread's
     * voluntary + involuntary switch counts stay as they were, it has not left the CPU, so its
     * run-queue wait and timeslice count are what that reading said (see snap). */
    int ss_valid;
    int64_t ss_vol_cs, ss_invol_cs, ss_runq_wait_ns, ss_timeslices;
    char path[512];
};

static __thread struct thread_state T = {.ss_fd = -1};
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static uint64_t dropped;               /* atomic */

/* The eBPF run-queue split's per-thread map (struct rq_thread in ../bpf/rqwait.h), mapped
 * read-only when the environment names an inherited descriptor of it at load time; NULL if not. */
struct rq_thread {
    uint32_t tid, pad;
    uint64_t other_wait_ns, other_preemptions, pad2;
};
static const volatile struct rq_thread *rq_threads;
static uint32_t rq_slots;

/* "key:\tvalue" lines of /proc/self/fdinfo/<fd>; -1 when absent */
static long long fdinfo_value(const char *text, const char *key) {
    size_t n = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, key, n) && l[n] == ':') return strtoll(l + n + 1, NULL, 0);
    return -1;
}

/* Maps the descriptor QT_RQ_FD_ENV names if it is an array map of struct rq_thread that can be
 * mapped (BPF_F_MMAPABLE); anything else leaves the split unmeasured. */
static void rq_map(void) {
    const char *e = getenv(QT_RQ_FD_ENV);
    if (!e || !*e) return;
    char *tail;
    long fd = strtol(e, &tail, 10);
    if (*tail || fd < 0 || fd > 1 << 20) return;
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%ld", fd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return;
    ssize_t n = read(f, text, sizeof text - 1);
    close(f);
    if (n <= 0) return;
    text[n] = 0;
    long long slots = fdinfo_value(text, "max_entries");
    if (fdinfo_value(text, "map_type") != 2 /* BPF_MAP_TYPE_ARRAY */ ||
        fdinfo_value(text, "value_size") != (long long)sizeof(struct rq_thread) ||
        !(fdinfo_value(text, "map_flags") & 0x400 /* BPF_F_MMAPABLE */) || slots <= 0 ||
        (slots & (slots - 1)) || slots > 1 << 24)
        return;
    size_t bytes = (size_t)slots * sizeof(struct rq_thread);
    void *m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, (int)fd, 0);
    if (m == MAP_FAILED) return;
    rq_slots = (uint32_t)slots;
    rq_threads = m;
}

/* This thread's totals behind other cgroups (0 while its entry names another thread: it has
 * none yet). Only the scheduler changes them, while the thread is off its CPU or taking it
 * back, so a running thread reads a stable pair. */
static inline void rq_read(int64_t tid, int64_t *wait_ns, int64_t *preemptions) {
    const volatile struct rq_thread *r = &rq_threads[(uint64_t)tid & (rq_slots - 1)];
    int own = r->tid == (uint32_t)tid;
    *wait_ns = own ? (int64_t)r->other_wait_ns : 0;
    *preemptions = own ? (int64_t)r->other_preemptions : 0;
}

static inline void rq_span(const struct thread_state *t, qt_record *r, const struct slot *s) {
    if (!rq_threads) return;
    int64_t w, p;
    rq_read(t->tid, &w, &p);
    /* an entry taken over by a thread of the same index meanwhile reads lower: count nothing */
    if (w >= s->at_other_ns) r->runq_wait_other_cgroup_ns += w - s->at_other_ns;
    if (p >= s->at_other_pre) r->preempt_other_total += p - s->at_other_pre;
}

static inline void rq_mark(const struct thread_state *t, struct slot *s) {
    if (rq_threads) rq_read(t->tid, &s->at_other_ns, &s->at_other_pre);
}


static void log_close(struct thread_state *t) {
    if (t->log) munmap(t->log, t->log_bytes);
    t->log = NULL;
    t->log_bytes = 0;
    t->path[0] = 0;
}

static void forget(struct thread_state *t) {
    if (t->ss_fd >= 0) close(t->ss_fd);
    if (t->slots) munmap(t->slots, (size_t)NSLOTS * sizeof(struct slot));
    log_close(t);
    memset(t, 0, sizeof *t);
    t->ss_fd = -1;
}

static void on_thread_exit(void *p) { forget((struct thread_state *)p); }

/* In a forked child only the forking thread lives on, with its parent's descriptors and
 * mappings: the schedstat file describes the parent's thread and the log is the parent's. */
static void on_fork_child(void) {
    struct thread_state *t = &T;
    if (t->log) munmap(t->log, t->log_bytes);
    t->log = NULL;
    if (t->ss_fd >= 0) close(t->ss_fd);
    if (t->slots) munmap(t->slots, (size_t)NSLOTS * sizeof(struct slot));
    memset(t, 0, sizeof *t);
    t->ss_fd = -1;
}

static void init_once(void) {
    pthread_key_create(&exit_key, on_thread_exit);
    pthread_atfork(NULL, NULL, on_fork_child);
}

static struct thread_state *state(void) {
    struct thread_state *t = &T;
    if (__builtin_expect(t->ready, 1)) return t;
    pthread_once(&once, init_once);
    t->tid = (int64_t)syscall(SYS_gettid);
    t->ss_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (t->ss_fd < 0) return NULL;
    void *m = mmap(NULL, (size_t)NSLOTS * sizeof(struct slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { close(t->ss_fd); t->ss_fd = -1; return NULL; }
    t->slots = m;
    t->ready = 1;
    pthread_setspecific(exit_key, t);
    return t;
}

static inline int64_t ts_ns(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* "run wait slices\n" */
static inline int parse3(const char *b, ssize_t n, int64_t v[3]) {
    ssize_t i = 0;
    for (int k = 0; k < 3; k++) {
        while (i < n && (b[i] < '0' || b[i] > '9')) i++;
        if (i >= n) return -1;
        int64_t x = 0;
        while (i < n && b[i] >= '0' && b[i] <= '9') x = x * 10 + (b[i++] - '0');
        v[k] = x;
    }
    return 0;
}

/* mono_first: read CLOCK_MONOTONIC before the counters (a token's start), else after them (its
 * end), so that the wall interval encloses the intervals the counters cover.
 *
 * The schedstat file is read only when the thread has been switched out since the last time
 * it was read. The kernel counts a thread's switch away from its CPU (__schedule, prev != next)
 * in nvcsw or nivcsw, and only a thread that is off its CPU, or switched back onto it, changes
 * its run-queue wait (run_delay) and timeslice count (pcount): both move in the scheduler's
 * enqueue, dequeue and switch paths only. So when getrusage shows the same two counts as when
 * schedstat was last read (and getrusage was read before that pread), no switch happened in
 * between and the last reading is still exact. The run-time field of schedstat is not used:
 * the CPU clock gives the run time (and brings that field up to date when it is read). */
static inline int snap(struct thread_state *t, qt_snapshot *s, int mono_first) {
    struct timespec ts;
    struct rusage ru;
    if (mono_first) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s->mono_ns = ts_ns(&ts);
    }
    /* the CPU clock first: reading it brings the kernel's run-time field up to date */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    s->cpu_ns = ts_ns(&ts);
    getrusage(RUSAGE_THREAD, &ru);
    s->vol_cs = ru.ru_nvcsw;
    s->invol_cs = ru.ru_nivcsw;
    if (!t->ss_valid || ru.ru_nvcsw != t->ss_vol_cs || ru.ru_nivcsw != t->ss_invol_cs) {
        char b[96];
        int64_t v[3];
        ssize_t n = pread(t->ss_fd, b, sizeof b - 1, 0);
        if (n <= 0 || parse3(b, n, v) != 0) { t->ss_valid = 0; return -EIO; }
        t->ss_vol_cs = ru.ru_nvcsw;
        t->ss_invol_cs = ru.ru_nivcsw;
        t->ss_runq_wait_ns = v[1];
        t->ss_timeslices = v[2];
        t->ss_valid = 1;
    }
    s->runq_wait_ns = t->ss_runq_wait_ns;
    s->timeslices = t->ss_timeslices;
    if (!mono_first) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s->mono_ns = ts_ns(&ts);
    }
    return 0;
}

static inline void add_span(qt_record *r, const qt_snapshot *a, const qt_snapshot *b) {
    r->cpu_ns += b->cpu_ns - a->cpu_ns;
    r->runq_wait_ns += b->runq_wait_ns - a->runq_wait_ns;
    r->timeslices += b->timeslices - a->timeslices;
    r->vol_cs += b->vol_cs - a->vol_cs;
    r->invol_cs += b->invol_cs - a->invol_cs;
}

/* The running span of slot s, from its start to `now`, added to r (the eBPF totals too). */
static inline void close_span(const struct thread_state *t, qt_record *r, const struct slot *s,
                              const qt_snapshot *now) {
    add_span(r, &s->at, now);
    rq_span(t, r, s);
}

static inline struct slot *find(struct thread_state *t, int64_t token) {
    if (token <= 0 || !t) return NULL;
    struct slot *s = &t->slots[(uint64_t)token & (NSLOTS - 1)];
    return s->token == token && s->state ? s : NULL;
}

/* A new running token whose first span starts at `at` (the caller has checked for a free slot). */
static int64_t start_at(struct thread_state *t, int64_t request_id, const char *request_class,
                        const qt_snapshot *at) {
    uint32_t i = t->cursor;
    while (t->slots[i].state == QT_RUNNING || t->slots[i].state == QT_YIELDED)
        i = (i + 1) & (NSLOTS - 1);
    t->cursor = (i + 1) & (NSLOTS - 1);
    struct slot *s = &t->slots[i];
    t->gen = (t->gen + 1) & ((1ull << GEN_BITS) - 1);
    if (!t->gen) t->gen = 1;
    int64_t token = (int64_t)((((uint64_t)t->tid & 0x3fffff) << (GEN_BITS + SLOT_BITS)) |
                              (t->gen << SLOT_BITS) | i);
    memset(&s->rec, 0, sizeof s->rec);
    if (request_class) strncpy(s->rec.request_class, request_class, QT_CLASS_BYTES - 1);
    s->at = *at;
    s->token = token;
    s->state = QT_RUNNING;
    t->open++;
    s->rec.request_id = request_id;
    s->rec.thread_id = t->tid;
    s->rec.start_ns = s->at.mono_ns;
    s->rec.runq_wait_other_cgroup_ns = rq_threads ? 0 : -1;
    s->rec.preempt_other_total = rq_threads ? 0 : -1;
    rq_mark(t, s);
    return token;
}

/* The slot of `token` if it is in state `want`, else NULL with -EINVAL (not a live token of
 * this thread) or -EALREADY (live, in the other state) in *err. */
static inline struct slot *live_in(struct thread_state *t, int64_t token, int want, int *err) {
    struct slot *s = find(t->ready ? t : NULL, token);
    if (!s || s->state == QT_ENDED) { *err = -EINVAL; return NULL; }
    if (s->state != want) { *err = -EALREADY; return NULL; }
    return s;
}

static inline void yield_at(const struct thread_state *t, struct slot *s, const qt_snapshot *now) {
    close_span(t, &s->rec, s, now);
    s->rec.yields++;
    s->state = QT_YIELDED;
}

static inline void resume_at(const struct thread_state *t, struct slot *s, const qt_snapshot *now) {
    s->at = *now;
    rq_mark(t, s);
    s->state = QT_RUNNING;
}

int64_t qt_start(int64_t request_id, const char *request_class) {
    return qt_start_after(0, request_id, request_class);
}

int64_t qt_start_after(int64_t previous, int64_t request_id, const char *request_class) {
    struct thread_state *t = state();
    if (!t) return -EIO;
    if (t->open >= NSLOTS) return -ENOSPC;
    int err = 0;
    struct slot *prev = previous ? live_in(t, previous, QT_RUNNING, &err) : NULL;
    if (previous && !prev) return err;
    qt_snapshot now;
    if (snap(t, &now, 1) != 0) return -EIO;
    if (prev) yield_at(t, prev, &now);
    return start_at(t, request_id, request_class, &now);
}

int qt_switch(int64_t from, int64_t to) {
    struct thread_state *t = &T;
    int err = 0;
    struct slot *a = from ? live_in(t, from, QT_RUNNING, &err) : NULL;
    if (from && !a) return err;
    struct slot *b = to ? live_in(t, to, QT_YIELDED, &err) : NULL;
    if (to && !b) return err;
    if (!a && !b) return 0;
    qt_snapshot now;
    if (snap(t, &now, 0) != 0) return -EIO;
    if (a) yield_at(t, a, &now);
    if (b) resume_at(t, b, &now);
    return 0;
}

int qt_yield(int64_t token) { return token ? qt_switch(token, 0) : -EINVAL; }

int qt_resume(int64_t token) { return token ? qt_switch(0, token) : -EINVAL; }

int qt_label(int64_t token, int64_t request_id, const char *request_class) {
    struct thread_state *t = &T;
    struct slot *s = find(t->ready ? t : NULL, token);
    if (!s || s->state == QT_ENDED) return -EINVAL;
    s->rec.request_id = request_id;
    memset(s->rec.request_class, 0, QT_CLASS_BYTES);
    if (request_class) strncpy(s->rec.request_class, request_class, QT_CLASS_BYTES - 1);
    return 0;
}

/* The log directory as the environment named it when the library was loaded: a server may
 * clear its environment before it serves (php-fpm does in each worker, `clear_env`). */
static char load_dir[512];

/* At load: remember the log directory, map the eBPF per-thread totals if a descriptor is named. */
__attribute__((constructor)) static void at_load(void) {
    const char *dir = getenv(QT_LOG_DIR_ENV);
    if (dir && strlen(dir) < sizeof load_dir) strcpy(load_dir, dir);
    rq_map();
}

static int log_open(struct thread_state *t) {
    const char *dir = getenv(QT_LOG_DIR_ENV);
    if (!dir) dir = load_dir;          /* unset since the load: the directory named then */
    if (!*dir) return -ENOENT;
    uint64_t cap = DEFAULT_LOG_RECORDS;
    const char *c = getenv(QT_LOG_RECORDS_ENV);
    if (c && *c) {
        unsigned long long v = strtoull(c, NULL, 10);
        if (v > 0 && v < (1ull << 32)) cap = v;
    }
    int n = snprintf(t->path, sizeof t->path, "%s/quell-%d-%lld-%llu.qtlog", dir, (int)getpid(),
                     (long long)t->tid, (unsigned long long)t->seq);
    if (n <= 0 || (size_t)n >= sizeof t->path) { t->path[0] = 0; return -ENAMETOOLONG; }
    int fd = open(t->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { t->path[0] = 0; return -errno; }
    size_t bytes = sizeof(qt_log_header) + cap * sizeof(qt_record);
    if (ftruncate(fd, (off_t)bytes) != 0) { int e = errno; close(fd); t->path[0] = 0; return -e; }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { t->path[0] = 0; return -ENOMEM; }
    qt_log_header *h = m;
    memcpy(h->magic, QT_LOG_MAGIC, 8);
    h->version = QT_LOG_VERSION;
    h->record_bytes = sizeof(qt_record);
    h->capacity = cap;
    h->pid = getpid();
    h->thread_id = t->tid;
    h->sequence = t->seq;
    __atomic_store_n(&h->count, 0, __ATOMIC_RELEASE);
    t->log = h;
    t->log_bytes = bytes;
    return 0;
}

static void log_write(struct thread_state *t, const qt_record *r) {
    if (t->log_failed) { __atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED); return; }
    if (t->log && t->log->count >= t->log->capacity) {   /* full: go on in the next file */
        log_close(t);
        t->seq++;
    }
    if (!t->log) {
        int e = log_open(t);
        if (e == -ENOENT) return;                          /* not logging */
        if (e != 0) { t->log_failed = 1; __atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED); return; }
    }
    qt_log_header *h = t->log;
    uint64_t i = h->count;
    memcpy((char *)(h + 1) + i * sizeof(qt_record), r, sizeof *r);
    __atomic_store_n(&h->count, i + 1, __ATOMIC_RELEASE);
}

int qt_end(int64_t token) {
    struct thread_state *t = &T;
    struct slot *s = find(t->ready ? t : NULL, token);
    if (!s || s->state == QT_ENDED) return -EINVAL;
    qt_snapshot now;
    if (snap(t, &now, 0) != 0) return -EIO;
    if (s->state == QT_RUNNING) close_span(t, &s->rec, s, &now);
    s->rec.end_ns = now.mono_ns;
    s->rec.wall_ns = now.mono_ns - s->rec.start_ns;
    s->state = QT_ENDED;
    t->open--;
    log_write(t, &s->rec);
    return 0;
}

int qt_read(int64_t token, qt_record *out) {
    struct thread_state *t = &T;
    struct slot *s = find(t->ready ? t : NULL, token);
    if (!s || !out) return -EINVAL;
    *out = s->rec;
    if (s->state != QT_ENDED) {
        qt_snapshot now;
        if (snap(t, &now, 0) != 0) return -EIO;
        if (s->state == QT_RUNNING) close_span(t, out, s, &now);
        out->wall_ns = now.mono_ns - out->start_ns;
    }
    return s->state;
}

const char *qt_log_path(void) { return T.log ? T.path : ""; }

void qt_log_close(void) {
    struct thread_state *t = &T;
    log_close(t);
    t->log_failed = 0;
    t->seq++;
}

uint64_t qt_log_dropped(void) { return __atomic_load_n(&dropped, __ATOMIC_RELAXED); }

int qt_abi_version(void) { return QT_ABI_VERSION; }

int qt_snapshot_now(qt_snapshot *out) {
    struct thread_state *t = state();
    if (!t || !out) return -EINVAL;
    return snap(t, out, 0);
}
