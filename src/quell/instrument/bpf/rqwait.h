/* rqwait.h: the maps shared by rqwait.bpf.c and its loader (quell.instrument.bpf decodes them
 * with struct layouts that must match these; every field is a 64-bit or 32-bit integer, so the
 * layout has no padding surprises). */
#ifndef QUELL_RQWAIT_H
#define QUELL_RQWAIT_H

#define RQ_NSLOT 16         /* cgroup slots per CPU; the last one collects "any other cgroup" */
#define RQ_STALE_NS 10000000000ULL /* a slot whose cgroup has not run for this long is reused */
#define RQ_OVERFLOW_CG (~0ULL) /* the id charged when a CPU saw more than RQ_NSLOT-1 cgroups */
#define RQ_MAX_CPUS 64
#define RQ_THREAD_SLOTS 32768 /* entries of the per-thread map, indexed by tid modulo its size */

/* set by the loader before the program loads: the cgroup hierarchy, and the one process whose
 * threads are recorded (0: every thread) */
struct rq_config {
    int use_cgroup_v2;
    unsigned int target_tgid;
};

/* per CPU: cumulative on-CPU ns per cgroup slot, since the program attached; the cgroup of the
 * task on the CPU now, charged up to last_ts; when each slot was last charged */
struct rq_cpu_acc {
    unsigned long long last_ts;
    unsigned long long cur_cg;
    unsigned long long cg[RQ_NSLOT];
    unsigned long long run[RQ_NSLOT];
    unsigned long long used[RQ_NSLOT];
};

/* per runnable TID: when it became runnable, where, and the CPU's counters then */
struct rq_wait_start {
    unsigned long long ts;
    unsigned long long snap[RQ_NSLOT];
    unsigned int cpu;
    unsigned int pad;
};

/* key of the result map: a thread and the cgroup charged (the culprit) */
struct rq_key {
    unsigned int tid;
    unsigned int pad;
    unsigned long long culprit_cg;
};

/* value: run-queue wait charged to culprit_cg, the waits it took part in, the waits that ended
 * on another CPU (charged whole to the last runner there), and the times a task of culprit_cg
 * took the CPU while this thread was still runnable (a preemption) */
struct rq_val {
    unsigned long long wait_ns;
    unsigned long long waits;
    unsigned long long victim_cg;
    unsigned long long migrated;
    unsigned long long preemptions;
    unsigned int tgid;
    unsigned int pad;
};

/* per thread, in an array the instrumented service maps read-only (BPF_F_MMAPABLE, its fd
 * inherited: QUELL_RQ_THREADS_FD): entry tid % RQ_THREAD_SLOTS holds the cumulative run-queue
 * wait of thread `tid` behind other cgroups and its preemptions by them. A thread whose entry
 * names another tid has none yet (the entry is taken over, and zeroed, on its first). */
struct rq_thread {
    unsigned int tid;
    unsigned int pad;
    unsigned long long other_wait_ns;
    unsigned long long other_preemptions;
    unsigned long long pad2;
};

#endif
