/* Per-call cost of the quelltoken calls beside the peer "one raw snapshot" (the thread's CPU
 * clock, a pread of its kept-open schedstat with sscanf, getrusage(RUSAGE_THREAD)), beside each
 * of the snapshot's parts and beside the previous library (quelltoken_prev.c: every call read
 * all three), all in the same run.
 * Build: gcc -O2 -pthread -I<c dir> qtbench.c <c dir>/quelltoken.c quelltoken_prev.c -o qtbench
 * Prints one JSON object: the median over the batches (1,000 calls each) of the thread's CPU
 * time per call, in ns: its own cost, whatever else the machine runs (wall time on a shared
 * machine would count the other tenants' turns on the CPU).
 *
 * Two paths: back-to-back calls (no context switch between two calls: the current library
 * keeps its schedstat reading) and "after a switch" (each call follows a short sleep, so the
 * thread has been switched out and the schedstat file must be read again): there the cost is
 * that of {sleep, call} less that of the sleep alone, in batches of SWITCH_BATCH. And a
 * request as an event loop serves it: after a sleep (the wait for its connection) start, then
 * yield and resume twice (its I/O) and end, 6 calls of which the first follows a switch. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "quelltoken.h"

int64_t prev_qt_start(int64_t request_id, const char *request_class);
int prev_qt_yield(int64_t token);
int prev_qt_resume(int64_t token);
int prev_qt_end(int64_t token);
int prev_qt_read(int64_t token, qt_record *out);
const char *prev_qt_log_path(void);

#define BATCH 1000
#define SWITCH_BATCH 100

static int batches = 1000;

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static volatile long long sink;

/* the peer: one raw snapshot, as in shared/reference/attribution-components.md */
static int ss_fd;
static void raw_snapshot(void) {
    struct timespec ts;
    char b[128];
    struct rusage ru;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    ssize_t n = pread(ss_fd, b, sizeof b - 1, 0);
    b[n > 0 ? n : 0] = 0;
    unsigned long long run, wait, slices;
    sscanf(b, "%llu %llu %llu", &run, &wait, &slices);
    getrusage(RUSAGE_THREAD, &ru);
    sink += ts.tv_nsec + (long long)wait + ru.ru_nivcsw;
}

/* the snapshot's parts, one at a time */
static void part_cpu_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    sink += ts.tv_nsec;
}
static void part_schedstat(void) {
    char b[128];
    ssize_t n = pread(ss_fd, b, sizeof b - 1, 0);
    sink += n > 0 ? b[0] : 0;
}
static void part_rusage(void) {
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    sink += ru.ru_nivcsw;
}
static void part_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sink += ts.tv_nsec;
}

static double batch_of(void (*fn)(void)) {
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) fn();
    return (now_ns() - t0) / BATCH;
}

struct impl {
    int64_t (*start)(int64_t, const char *);
    int (*yield)(int64_t);
    int (*resume)(int64_t);
    int (*end)(int64_t);
    int (*read)(int64_t, qt_record *);
    int64_t held;
    double *se, *yr, *rd, *sw, *rq;
};

static long naps_switched, naps_total;

/* a sleep long enough that the thread leaves its CPU (a 1 us one can expire before it does) */
static void nap(void) {
    struct rusage a, b;
    struct timespec d = {0, 20000};
    getrusage(RUSAGE_THREAD, &a);
    nanosleep(&d, NULL);
    getrusage(RUSAGE_THREAD, &b);
    naps_total++;
    naps_switched += b.ru_nvcsw != a.ru_nvcsw;
}

static void time_impl(struct impl *m, int b) {
    qt_record rec;
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) m->end(m->start(i, "/bench"));
    double t1 = now_ns();
    for (int i = 0; i < BATCH; i++) { m->yield(m->held); m->resume(m->held); }
    double t2 = now_ns();
    for (int i = 0; i < BATCH; i++) { m->read(m->held, &rec); sink += rec.cpu_ns; }
    double t3 = now_ns();
    m->se[b] = (t1 - t0) / (2.0 * BATCH);
    m->yr[b] = (t2 - t1) / (2.0 * BATCH);
    m->rd[b] = (t3 - t2) / BATCH;
}

/* {sleep, start, sleep, end} x SWITCH_BATCH, less {sleep} x 2 SWITCH_BATCH, per call */
static double naps_only(void) {
    double t0 = now_ns();
    for (int i = 0; i < 2 * SWITCH_BATCH; i++) nap();
    return now_ns() - t0;
}
static double switch_calls(struct impl *m) {
    double t0 = now_ns();
    for (int i = 0; i < SWITCH_BATCH; i++) {
        nap();
        int64_t t = m->start(i, "/bench");
        nap();
        m->end(t);
    }
    return now_ns() - t0;
}

/* {sleep, start, yield, resume, yield, resume, end} x SWITCH_BATCH: the calls' total */
static double request_calls(struct impl *m) {
    double t0 = now_ns();
    for (int i = 0; i < SWITCH_BATCH; i++) {
        nap();
        int64_t t = m->start(i, "/bench");
        m->yield(t);
        m->resume(t);
        m->yield(t);
        m->resume(t);
        m->end(t);
    }
    return now_ns() - t0;
}

int main(int argc, char **argv) {
    if (argc > 1) batches = atoi(argv[1]);
    prctl(PR_SET_TIMERSLACK, 1UL);     /* short naps */
    ss_fd = open("/proc/thread-self/schedstat", O_RDONLY);
    double *raw = calloc(batches, sizeof(double)), *cpu = calloc(batches, sizeof(double)),
           *ss = calloc(batches, sizeof(double)), *ru = calloc(batches, sizeof(double)),
           *mono = calloc(batches, sizeof(double)), *naps = calloc(batches, sizeof(double));
    struct impl cur = {.start = qt_start, .yield = qt_yield, .resume = qt_resume, .end = qt_end,
                       .read = qt_read};
    struct impl prev = {.start = prev_qt_start, .yield = prev_qt_yield, .resume = prev_qt_resume,
                        .end = prev_qt_end, .read = prev_qt_read};
    struct impl *impls[2] = {&cur, &prev};
    for (int k = 0; k < 2; k++) {
        struct impl *m = impls[k];
        m->se = calloc(batches, sizeof(double));
        m->yr = calloc(batches, sizeof(double));
        m->rd = calloc(batches, sizeof(double));
        m->sw = calloc(batches, sizeof(double));
        m->rq = calloc(batches, sizeof(double));
        m->held = m->start(1, "/bench");
        for (int w = 0; w < 3; w++)    /* warm up: pages of the token table, the log */
            for (int i = 0; i < BATCH; i++) m->end(m->start(i, "/warm"));
    }
    for (int b = 0; b < batches; b++) {
        /* interleaved, so that a disturbance hits every kind alike */
        raw[b] = batch_of(raw_snapshot);
        time_impl(&cur, b);
        time_impl(&prev, b);
        cpu[b] = batch_of(part_cpu_clock);
        ss[b] = batch_of(part_schedstat);
        ru[b] = batch_of(part_rusage);
        mono[b] = batch_of(part_monotonic);
        if (b % 5 == 0) {              /* the switch path: fewer, slower batches */
            int j = b / 5;
            naps[j] = naps_only();
            cur.sw[j] = switch_calls(&cur);
            prev.sw[j] = switch_calls(&prev);
            double n = naps_only();
            naps[j] = (naps[j] + n) / 2;
            cur.sw[j] = (cur.sw[j] - naps[j]) / (2.0 * SWITCH_BATCH);
            prev.sw[j] = (prev.sw[j] - naps[j]) / (2.0 * SWITCH_BATCH);
            /* one nap per request: half the 2 SWITCH_BATCH naps timed */
            cur.rq[j] = (request_calls(&cur) - naps[j] / 2) / (6.0 * SWITCH_BATCH);
            prev.rq[j] = (request_calls(&prev) - naps[j] / 2) / (6.0 * SWITCH_BATCH);
        }
    }
    int nsw = (batches + 4) / 5;
    double nap_ns = median(naps, nsw) / (2.0 * SWITCH_BATCH);
    cur.end(cur.held);
    prev.end(prev.held);
    printf("{\"batches\": %d, \"calls_per_batch\": %d, \"raw_snapshot_ns\": %.1f, "
           "\"start_end_ns_per_call\": %.1f, \"yield_resume_ns_per_call\": %.1f, "
           "\"read_ns\": %.1f, "
           "\"previous\": {\"start_end_ns_per_call\": %.1f, \"yield_resume_ns_per_call\": %.1f, "
           "\"read_ns\": %.1f}, "
           "\"parts\": {\"cpu_clock_ns\": %.1f, \"schedstat_pread_ns\": %.1f, "
           "\"getrusage_ns\": %.1f, \"clock_monotonic_ns\": %.1f}, "
           "\"after_a_switch\": {\"batches\": %d, \"calls_per_batch\": %d, \"nap_ns\": %.1f, "
           "\"start_end_ns_per_call\": %.1f, \"previous_start_end_ns_per_call\": %.1f, "
           "\"naps_that_switched\": %.4f}, "
           "\"request\": {\"calls\": 6, \"ns_per_call\": %.1f, \"previous_ns_per_call\": %.1f}, "
           "\"logging\": %s}\n",
           batches, BATCH, median(raw, batches), median(cur.se, batches), median(cur.yr, batches),
           median(cur.rd, batches), median(prev.se, batches), median(prev.yr, batches),
           median(prev.rd, batches), median(cpu, batches), median(ss, batches),
           median(ru, batches), median(mono, batches), nsw, 2 * SWITCH_BATCH, nap_ns,
           median(cur.sw, nsw), median(prev.sw, nsw), (double)naps_switched / naps_total,
           median(cur.rq, nsw), median(prev.rq, nsw),
           *qt_log_path() && *prev_qt_log_path() ? "true" : "false");
    return 0;
}
