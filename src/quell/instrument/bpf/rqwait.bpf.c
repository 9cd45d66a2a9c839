// SPDX-License-Identifier: GPL-2.0
/* rqwait.bpf.c: each thread's run-queue wait, split by the cgroup that held the CPU while it
 * waited, and the preemptions of each thread by tasks of another cgroup.
 *
 * Every CPU keeps the cumulative on-CPU ns of up to RQ_NSLOT cgroups (charged at each
 * sched_switch to the task that leaves, and at each wake-up onto the CPU to the task running
 * there, up to that moment; a slot whose cgroup has not run for RQ_STALE_NS is reused). A task
 * that becomes runnable (sched_wakeup, sched_wakeup_new, or preempted while still runnable)
 * snapshots its CPU's counters; when it gets a CPU back, the difference is its wait, split by
 * cgroup. A wait that ends on another CPU (a
 * migration) is charged whole to the task that last ran there. The cgroup id is the v1 "cpu"
 * hierarchy's (rq_config.use_cgroup_v2 = 0) or cgroup2's; either equals the inode number of the cgroup's
 * directory. rq_config.target_tgid != 0 restricts the per-thread records to one process (the per-CPU
 * accounting always covers every task). The `threads` array keeps each recorded thread's waits
 * behind other cgroups and preemptions by them as two running totals, for the instrumented
 * service to read per request from a read-only mapping (quelltoken.c). Built by `make native` with clang -target bpf against
 * the running kernel's BTF (CO-RE); loaded by quell.instrument.bpf. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "rqwait.h"

char LICENSE[] SEC("license") = "GPL";

/* the program's only read-only global, so the loader finds it at offset 0 of .rodata */
const volatile struct rq_config rq_config = {};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, RQ_MAX_CPUS);
    __type(key, u32);
    __type(value, struct rq_cpu_acc);
} cpu_acc SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, u32);
    __type(value, struct rq_wait_start);
} wstart SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, struct rq_key);
    __type(value, struct rq_val);
} waits SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, RQ_THREAD_SLOTS);
    __type(key, u32);
    __type(value, struct rq_thread);
} threads SEC(".maps");

/* tid's entry in `threads`, taken over (and zeroed) from whichever thread held it before */
static __always_inline struct rq_thread *thread_entry(u32 tid)
{
    u32 i = tid & (RQ_THREAD_SLOTS - 1);
    struct rq_thread *t = bpf_map_lookup_elem(&threads, &i);
    if (t && t->tid != tid) {
        t->other_wait_ns = 0;
        t->other_preemptions = 0;
        t->tid = tid;
    }
    return t;
}

static __always_inline u64 task_cg(struct task_struct *t)
{
    if (rq_config.use_cgroup_v2)
        return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
    int id = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);
    if (id < 0 || id >= 16)
        return 0;
    struct cgroup_subsys_state *css = BPF_CORE_READ(t, cgroups, subsys[id]);
    return BPF_CORE_READ(css, cgroup, kn, id);
}

static __always_inline int wanted(struct task_struct *p)
{
    return !rq_config.target_tgid || BPF_CORE_READ(p, tgid) == rq_config.target_tgid;
}

/* Charge [last_ts, now) to cgroup cg's slot: its own, else a free one, else one whose cgroup has
 * not run for RQ_STALE_NS (the cgroups of ended runs; the counters are cumulative and not reset,
 * so a wait that spans the hand-over charges the new cgroup only with its own time), else the
 * overflow slot. */
static __always_inline void charge(struct rq_cpu_acc *a, u64 cg, u64 now)
{
    /* cg 0: the CPU was idle (or its task is not known yet, before its first switch); idle
     * time is nobody's, and a task woken on an idle CPU waits behind no one */
    if (!cg || !a->last_ts || now <= a->last_ts) {
        a->last_ts = now;
        return;
    }
    u64 d = now - a->last_ts;
    int at = -1, stale = -1;
    for (int i = 0; i < RQ_NSLOT - 1; i++) {
        if (at < 0 && (a->cg[i] == cg || !a->cg[i]))
            at = i;
        if (stale < 0 && a->cg[i] && now - a->used[i] > RQ_STALE_NS)
            stale = i;
    }
    if (at < 0)
        at = stale;
    u32 k = at < 0 ? RQ_NSLOT - 1 : (u32)at & (RQ_NSLOT - 1); /* the mask bounds k for the verifier */
    a->cg[k] = at < 0 ? RQ_OVERFLOW_CG : cg;
    a->run[k] += d;
    a->used[k] = now;
    a->last_ts = now;
}

static __always_inline void enqueued(struct task_struct *p, u32 cpu, u64 now)
{
    u32 tid = BPF_CORE_READ(p, pid);
    if (!tid || !wanted(p))
        return;
    struct rq_cpu_acc *a = bpf_map_lookup_elem(&cpu_acc, &cpu);
    if (!a)
        return;
    /* the task running there now is charged up to this moment, so that its time before the
     * wake-up is not counted as part of this wait */
    charge(a, a->cur_cg, now);
    struct rq_wait_start ws = {.ts = now, .cpu = cpu};
    for (int i = 0; i < RQ_NSLOT; i++)
        ws.snap[i] = a->run[i];
    bpf_map_update_elem(&wstart, &tid, &ws, BPF_ANY);
}

static __always_inline struct rq_val *slot(u32 tid, u32 tgid, u64 cg, u64 victim_cg)
{
    struct rq_key k = {.tid = tid, .culprit_cg = cg};
    struct rq_val *v = bpf_map_lookup_elem(&waits, &k);
    if (v)
        return v;
    struct rq_val z = {.victim_cg = victim_cg, .tgid = tgid};
    bpf_map_update_elem(&waits, &k, &z, BPF_NOEXIST);
    return bpf_map_lookup_elem(&waits, &k);
}

static __always_inline void add_wait(u32 tid, u32 tgid, u64 cg, u64 ns, u64 victim_cg, int migrated)
{
    if (cg != victim_cg) {
        struct rq_thread *t = thread_entry(tid);
        if (t)
            __sync_fetch_and_add(&t->other_wait_ns, ns);
    }
    struct rq_val *v = slot(tid, tgid, cg, victim_cg);
    if (!v)
        return;
    __sync_fetch_and_add(&v->wait_ns, ns);
    __sync_fetch_and_add(&v->waits, 1);
    if (migrated)
        __sync_fetch_and_add(&v->migrated, 1);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
    u32 cpu = bpf_core_field_exists(p->thread_info.cpu) ? BPF_CORE_READ(p, thread_info.cpu)
                                                        : BPF_CORE_READ(p, wake_cpu);
    enqueued(p, cpu, bpf_ktime_get_ns());
    return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
    u32 cpu = bpf_core_field_exists(p->thread_info.cpu) ? BPF_CORE_READ(p, thread_info.cpu)
                                                        : BPF_CORE_READ(p, wake_cpu);
    enqueued(p, cpu, bpf_ktime_get_ns());
    return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
    u64 now = bpf_ktime_get_ns();
    u32 cpu = bpf_get_smp_processor_id();
    struct rq_cpu_acc *a = bpf_map_lookup_elem(&cpu_acc, &cpu);
    if (!a)
        return 0;
    /* the idle task (pid 0) belongs to no cgroup here: its time is not charged (charge) */
    u64 prev_cg = BPF_CORE_READ(prev, pid) ? task_cg(prev) : 0;
    u64 next_cg = BPF_CORE_READ(next, pid) ? task_cg(next) : 0;
    charge(a, prev_cg, now); /* [the last charge, now) was prev's */
    a->cur_cg = next_cg;
    if (BPF_CORE_READ(prev, __state) == 0) { /* preempted, still runnable */
        enqueued(prev, cpu, now);
        u32 ptid = BPF_CORE_READ(prev, pid);
        if (ptid && next_cg && next_cg != prev_cg && wanted(prev)) {
            struct rq_thread *t = thread_entry(ptid);
            if (t)
                __sync_fetch_and_add(&t->other_preemptions, 1);
            struct rq_val *v = slot(ptid, BPF_CORE_READ(prev, tgid), next_cg, prev_cg);
            if (v)
                __sync_fetch_and_add(&v->preemptions, 1);
        }
    }
    u32 tid = BPF_CORE_READ(next, pid);
    if (!tid)
        return 0;
    struct rq_wait_start *ws = bpf_map_lookup_elem(&wstart, &tid);
    if (!ws)
        return 0;
    u64 total = now - ws->ts, victim_cg = next_cg;
    u32 tgid = BPF_CORE_READ(next, tgid);
    if (ws->cpu != cpu) {
        add_wait(tid, tgid, prev_cg, total, victim_cg, 1);
    } else {
        for (int i = 0; i < RQ_NSLOT; i++) {
            u64 d = a->run[i] - ws->snap[i];
            if (d && d <= total)
                add_wait(tid, tgid, a->cg[i], d, victim_cg, 0);
        }
    }
    bpf_map_delete_elem(&wstart, &tid);
    return 0;
}
