/* Per-call cost of the quelltoken calls beside the peer "one raw snapshot" (the thread's CPU
 * clock, a pread of its kept-open schedstat, getrusage(RUSAGE_THREAD)), in the same run.
 * Build: gcc -O2 -pthread -I<c dir> qtbench.c <c dir>/quelltoken.c -o qtbench
 * Prints one JSON object: the median over the batches (1,000 calls each) of the thread's CPU
 * time per call, in ns: its own cost, whatever else the machine runs (wall time on a shared
 * machine would count the other tenants' turns on the CPU). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "quelltoken.h"

#define BATCH 1000

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

int main(int argc, char **argv) {
    if (argc > 1) batches = atoi(argv[1]);
    ss_fd = open("/proc/thread-self/schedstat", O_RDONLY);
    double *raw = calloc(batches, sizeof(double)), *se = calloc(batches, sizeof(double)),
           *yr = calloc(batches, sizeof(double)), *rd = calloc(batches, sizeof(double)),
           *mono = calloc(batches, sizeof(double));
    qt_record rec;
    int64_t held = qt_start(1, "/bench");
    for (int k = 0; k < 3; k++) {      /* warm up: pages of the token table, the log */
        for (int i = 0; i < BATCH; i++) qt_end(qt_start(i, "/warm"));
    }
    for (int b = 0; b < batches; b++) {
        /* interleaved, so that a disturbance hits every kind alike */
        double t0 = now_ns();
        for (int i = 0; i < BATCH; i++) raw_snapshot();
        double t1 = now_ns();
        for (int i = 0; i < BATCH; i++) qt_end(qt_start(i, "/bench"));
        double t2 = now_ns();
        for (int i = 0; i < BATCH; i++) { qt_yield(held); qt_resume(held); }
        double t3 = now_ns();
        for (int i = 0; i < BATCH; i++) { qt_read(held, &rec); sink += rec.cpu_ns; }
        double t4 = now_ns();
        for (int i = 0; i < BATCH; i++) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); sink += t.tv_nsec; }
        double t5 = now_ns();
        raw[b] = (t1 - t0) / BATCH;
        se[b] = (t2 - t1) / (2.0 * BATCH);
        yr[b] = (t3 - t2) / (2.0 * BATCH);
        rd[b] = (t4 - t3) / BATCH;
        mono[b] = (t5 - t4) / BATCH;
    }
    qt_end(held);
    printf("{\"batches\": %d, \"calls_per_batch\": %d, \"raw_snapshot_ns\": %.1f, "
           "\"start_end_ns_per_call\": %.1f, \"yield_resume_ns_per_call\": %.1f, "
           "\"read_ns\": %.1f, \"clock_monotonic_ns\": %.1f, \"logging\": %s}\n",
           batches, BATCH, median(raw, batches), median(se, batches), median(yr, batches),
           median(rd, batches), median(mono, batches), *qt_log_path() ? "true" : "false");
    return 0;
}
