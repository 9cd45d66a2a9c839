/* quelltoken: per-request counters seen from the thread that serves the request.
 *
 * The API of Soroban (start, yield, resume, end, read) over what Linux tells a thread about
 * itself, without a kernel module: its CPU clock (CLOCK_THREAD_CPUTIME_ID), its run-queue wait
 * and timeslices (a kept-open /proc/thread-self/schedstat, read again only when the thread has
 * been switched out since it last read it), its voluntary and involuntary context switches
 * (getrusage(RUSAGE_THREAD)) and wall time (CLOCK_MONOTONIC).
 *
 * A token belongs to the thread that started it: every call on it must come from that thread
 * (one thread may multiplex many tokens with yield/resume). The counters accumulate only over
 * the token's running spans (start or resume .. yield or end); wall time runs from start to end.
 * When the environment variable QUELL_TOKEN_LOG_DIR names a directory, every ended token is
 * written as one fixed-size record to a per-thread memory-mapped log in that directory
 * (docs/reference/attribution.md, "Instrumentation"). It is read when a thread opens its log, and, if
 * it is unset by then, as it was when the library was loaded (php-fpm clears its workers'
 * environment); set to "" it turns logging off. All functions are async-signal-unsafe. */
#ifndef QUELLTOKEN_H
#define QUELLTOKEN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QT_ABI_VERSION 2               /* 2: qt_switch, qt_start_after */
#define QT_LOG_MAGIC "QTLOG\0\0\1"      /* 8 bytes, the first of every log file */
#define QT_LOG_VERSION 1
#define QT_CLASS_BYTES 48               /* request class, NUL-padded, truncated to 47 bytes */
#define QT_LOG_DIR_ENV "QUELL_TOKEN_LOG_DIR"
#define QT_LOG_RECORDS_ENV "QUELL_TOKEN_LOG_RECORDS"   /* records per log file (default 65536) */
/* an inherited descriptor of the eBPF run-queue split's per-thread map (struct rq_thread in
 * ../bpf/rqwait.h): when it names one, tokens also count their run-queue wait behind other
 * cgroups and preemptions by them (else those two fields stay -1) */
#define QT_RQ_FD_ENV "QUELL_RQ_THREADS_FD"

enum qt_state { QT_RUNNING = 1, QT_YIELDED = 2, QT_ENDED = 3 };

/* One token's totals; also the on-disk record (160 bytes, little-endian, no padding). */
typedef struct qt_record {
    int64_t request_id;        /* as given to qt_start (-1: none) */
    int64_t thread_id;         /* gettid() of the thread that ran it */
    int64_t start_ns;          /* CLOCK_MONOTONIC at start */
    int64_t end_ns;            /* CLOCK_MONOTONIC at end; 0 while not ended */
    int64_t wall_ns;           /* end - start (or now - start while not ended) */
    int64_t cpu_ns;            /* CLOCK_THREAD_CPUTIME_ID over the running spans */
    int64_t runq_wait_ns;      /* schedstat field 2 over the running spans */
    int64_t timeslices;        /* schedstat field 3 over the running spans */
    int64_t vol_cs;            /* ru_nvcsw over the running spans */
    int64_t invol_cs;          /* ru_nivcsw over the running spans */
    int64_t yields;            /* times the token was yielded */
    int64_t runq_wait_other_cgroup_ns;  /* -1: not measured (needs the optional eBPF part) */
    int64_t preempt_other_total;        /* -1: not measured */
    int64_t reserved;          /* 0 */
    char request_class[QT_CLASS_BYTES];
} qt_record;

/* The header of a log file (64 bytes). Records follow it; `count` is the writer index: the
 * records [0, count) are complete (it is stored with release order after each record). */
typedef struct qt_log_header {
    char magic[8];
    uint32_t version;
    uint32_t record_bytes;     /* sizeof(qt_record) */
    uint64_t capacity;         /* records the file has room for */
    int64_t pid;
    int64_t thread_id;
    uint64_t count;            /* records written */
    uint64_t sequence;         /* 0 for a thread's first file, then 1, 2 ... when one fills */
    uint64_t reserved;
} qt_log_header;

/* Start a token on the calling thread; it is running. Returns the token (> 0) or -errno
 * (-ENOSPC: too many tokens open on this thread, -EIO: the thread's counters cannot be read). */
int64_t qt_start(int64_t request_id, const char *request_class);
/* Stop counting for a running token (its thread goes on to other work). 0 or -errno
 * (-EINVAL: not a live token of this thread, -EALREADY: not running). */
int qt_yield(int64_t token);
/* Count again for a yielded token. 0 or -errno (-EALREADY: already running). */
int qt_resume(int64_t token);
/* Yield `from` and resume `to` at one reading of the counters (either may be 0: none), so a
 * thread that multiplexes requests pays one reading per switch instead of two. 0 or -errno as
 * qt_yield and qt_resume would return; nothing is changed on an error. */
int qt_switch(int64_t from, int64_t to);
/* Yield `previous` (0: none) and start a new token at one reading of the counters: what an
 * event loop does when it accepts a connection while another request's token runs. */
int64_t qt_start_after(int64_t previous, int64_t request_id, const char *request_class);
/* Set a live token's request id and class once they are known (a server learns them only
 * after it has read the request). 0 or -errno. */
int qt_label(int64_t token, int64_t request_id, const char *request_class);
/* End a token (running or yielded) and write its record to the thread's log, if any. 0 or -errno. */
int qt_end(int64_t token);
/* The token's totals so far (a running token's current span included, nothing changed).
 * Works after end until the slot is reused by a later start. Returns the qt_state or -errno. */
int qt_read(int64_t token, qt_record *out);
/* The current thread's log file path ("" when not logging). */
const char *qt_log_path(void);
/* Close the current thread's log: its next record opens a new file under the directory the
 * environment names then. */
void qt_log_close(void);
/* Records dropped in this process because a log could not be opened or grown. */
uint64_t qt_log_dropped(void);
int qt_abi_version(void);

/* The snapshot the calls are built on, for benchmarks: one reading of the thread's CPU clock
 * and rusage, its schedstat (kept from the last reading while the thread's switch counts have
 * not moved), and CLOCK_MONOTONIC. Returns 0 or -errno. */
typedef struct qt_snapshot {
    int64_t mono_ns, cpu_ns, runq_wait_ns, timeslices, vol_cs, invol_cs;
} qt_snapshot;
int qt_snapshot_now(qt_snapshot *out);

#ifdef __cplusplus
}
#endif
#endif
