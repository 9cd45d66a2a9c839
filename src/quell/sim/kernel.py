"""The compiled event core: one pass over time-ordered arrivals, departures and changes (of an
instance's slowdown factor or a resource's capacity).

Design for speed:

* **Virtual-time processor sharing.** Each resource r (a host link or an instance's own
  capacity) keeps a virtual clock V_r that advances at the per-job rate
  φ_r = min(C_r / (n_r + k_r), cap_r) / (1 + γ_r n_r) (n_r active jobs, k_r permanent
  antagonist streams, cap_r a per-job cap for FCFS workers or one CPU core, γ_r an apache
  instance's overhead per active worker, 0 elsewhere). A job admitted at V with work w finishes when V_r
  reaches its tag V + w, so a resource needs only a min-heap of tags: O(log n) per event, no
  per-job updates when the population changes.
* **One event heap.** An indexed min-heap over resources keyed by each one's next departure
  time; an arrival or departure at r only re-keys r. Dispatch uses a second indexed heap over
  instances (stride keys for weighted round robin, (conns + 1) / weight for least connections).
* **Arrays.** All state lives in flat numpy arrays, compiled with numba; no Python objects per
  request. Per-resource job heaps and per-instance wait queues are slabs of one pool each
  (offset + capacity); a full slab moves to the end of its pool at twice the size, and when a pool
  is exhausted the loop returns ``NEED_SPACE`` so the caller can compact/grow it and resume.
* **Workers and users.** An instance serves at most ``climit`` requests at once (FCFS workers,
  maxconn, apache's MaxRequestWorkers, counting the workers idle kept-alive connections hold);
  the rest wait in its accept queue. On an apache instance a PHP page also needs one of
  ``plimit`` php-fpm children, waiting for one in a second queue while it holds its worker.
  Closed-loop users live in a third indexed heap keyed by their next event (send a request
  after thinking, or a kept-alive connection timing out); each user's requests and think times
  are drawn ahead in blocks (a row per user), and the loop returns ``NEED_DRAWS`` when a user
  has sent its block.

The functions here are pure state transitions on arrays, and the sums over an interval's
records; ``quell.sim.core.EventCore`` owns the arrays, and ``quell.sim.core`` is the only caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

ALGO_WEIGHTED_RR = 0
ALGO_PLAIN_RR = 1
ALGO_LEASTCONN = 2
OK = 0
NEED_SPACE = 1
NEED_DRAWS = 2
NEED_OUT = 3

# A request's code (int64 ≥ 0; a probe's is -(instance + 1)): bits 0-23 its instance, bit 24
# set when it came on a new connection, bits 25-31 its PHP page (0: a static file), bits 32 on
# its closed-loop user + 1 (0: an open-loop request).
INST_MASK = (1 << 24) - 1
MAX_INSTANCES = 1 << 24
CONN_SHIFT = 24
PAGE_SHIFT = 25
PAGE_MASK = 127
MAX_PAGES = 127
USER_SHIFT = 32
USER_ONE = 1 << USER_SHIFT
# what a closed-loop user does next (at its key in the users' heap)
USER_ISSUE = 0
USER_EXPIRY = 1
USER_BUSY = 2
USER_DONE = 3


def compiled(fn: F) -> F:
    """Compile ``fn`` with numba (nopython) on first call, and cache the machine code on disk
    for the next process. numba picks the cache directory: ``$NUMBA_CACHE_DIR`` when set, else
    ``__pycache__`` beside this file when writable (a source checkout, an editable install),
    else the user's ``~/.cache/numba`` (a read-only install). Where none is writable it
    compiles in memory, in every process."""
    try:
        return cast(F, numba.njit(cache=True, error_model="numpy")(fn))
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return cast(F, numba.njit(cache=False, error_model="numpy")(fn))


# -- indexed heap over ids with (k1, k2) lexicographic keys -------------------------------------


@compiled
def _ih_down(heap: Any, pos: Any, k1: Any, k2: Any, p: int, n: int) -> None:
    x = heap[p]
    while True:
        c = 2 * p + 1
        if c >= n:
            break
        d = c + 1
        if d < n:
            hc = heap[c]
            hd = heap[d]
            if k1[hd] < k1[hc] or (k1[hd] == k1[hc] and k2[hd] < k2[hc]):
                c = d
        y = heap[c]
        if k1[y] < k1[x] or (k1[y] == k1[x] and k2[y] < k2[x]):
            heap[p] = y
            pos[y] = p
            p = c
        else:
            break
    heap[p] = x
    pos[x] = p


@compiled
def _ih_build(heap: Any, pos: Any, k1: Any, k2: Any, n: int) -> None:
    for i in range(n):
        heap[i] = i
        pos[i] = i
    for p in range(n // 2 - 1, -1, -1):
        _ih_down(heap, pos, k1, k2, p, n)


# -- per-resource job heap keyed by finish tag (four parallel arrays) ---------------------------


@compiled
def _jh_push(
    tag: Any, st: Any, ins: Any, sz: Any, o: int, n: int, t: float, s: float, i: int, z: float
) -> None:
    """Push onto the heap at ``[o, o + n)``."""
    p = n
    while p > 0:
        parent = (p - 1) >> 1
        if tag[o + parent] <= t:
            break
        tag[o + p] = tag[o + parent]
        st[o + p] = st[o + parent]
        ins[o + p] = ins[o + parent]
        sz[o + p] = sz[o + parent]
        p = parent
    tag[o + p] = t
    st[o + p] = s
    ins[o + p] = i
    sz[o + p] = z


@compiled
def _jh_sift_down(tag: Any, st: Any, ins: Any, sz: Any, o: int, p: int, n: int) -> None:
    t = tag[o + p]
    s = st[o + p]
    i = ins[o + p]
    z = sz[o + p]
    while True:
        c = 2 * p + 1
        if c >= n:
            break
        if c + 1 < n and tag[o + c + 1] < tag[o + c]:
            c += 1
        if tag[o + c] >= t:
            break
        tag[o + p] = tag[o + c]
        st[o + p] = st[o + c]
        ins[o + p] = ins[o + c]
        sz[o + p] = sz[o + c]
        p = c
    tag[o + p] = t
    st[o + p] = s
    ins[o + p] = i
    sz[o + p] = z


# -- slab pools ---------------------------------------------------------------------------------


@compiled
def _reserve_job(
    r: int,
    r_n: Any,
    r_off: Any,
    r_capn: Any,
    jtag: Any,
    jstart: Any,
    jinst: Any,
    jsize: Any,
    iscal: Any,
) -> bool:
    """Make room for one more job on resource ``r``; False if the pool is exhausted."""
    n = r_n[r]
    cap = r_capn[r]
    if n < cap:
        return True
    new_cap = max(2 * cap, 8)
    used = iscal[0]
    if used + new_cap > jtag.size:
        return False
    o = r_off[r]
    jtag[used : used + n] = jtag[o : o + n]
    jstart[used : used + n] = jstart[o : o + n]
    jinst[used : used + n] = jinst[o : o + n]
    jsize[used : used + n] = jsize[o : o + n]
    r_off[r] = used
    r_capn[r] = new_cap
    iscal[0] = used + new_cap
    return True


@compiled
def _reserve_queue(
    i: int,
    i_wait: Any,
    q_off: Any,
    q_capn: Any,
    qhead: Any,
    qst: Any,
    qsz: Any,
    qcode: Any,
    iscal: Any,
) -> bool:
    """Make room at the tail of instance ``i``'s queue (its accept queue, or with the php
    arrays its php-fpm queue); False if the pool is exhausted."""
    w = i_wait[i]
    h = qhead[i]
    cap = q_capn[i]
    o = q_off[i]
    if h + w < cap:
        return True
    if h > 0 and w <= cap // 2:
        qst[o : o + w] = qst[o + h : o + h + w].copy()
        qsz[o : o + w] = qsz[o + h : o + h + w].copy()
        qcode[o : o + w] = qcode[o + h : o + h + w].copy()
        qhead[i] = 0
        return True
    new_cap = max(2 * cap, 8)
    used = iscal[1]
    if used + new_cap > qst.size:
        return False
    qst[used : used + w] = qst[o + h : o + h + w]
    qsz[used : used + w] = qsz[o + h : o + h + w]
    qcode[used : used + w] = qcode[o + h : o + h + w]
    q_off[i] = used
    q_capn[i] = new_cap
    qhead[i] = 0
    iscal[1] = used + new_cap
    return True


# -- resource helpers ---------------------------------------------------------------------------


@compiled
def _rate(r_cap: Any, r_jobcap: Any, r_perm: Any, r_ovh: Any, n: int, r: int) -> float:
    """Per-job rate of resource r with n jobs: its share, at most the per-job cap, divided by
    1 + overhead × n (an apache instance's per-active-worker overhead; 0 elsewhere)."""
    phi: float = min(r_cap[r] / (n + r_perm[r]), r_jobcap[r])
    if r_ovh[r] > 0.0:
        phi = phi / (1.0 + r_ovh[r] * n)
    return phi


@compiled
def _advance(res: Any, r: int, t: float) -> None:
    r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, _, _, r_ovh = res
    dt = t - r_tlast[r]
    if dt > 0.0:
        if r_n[r] > 0:
            r_vtime[r] += _rate(r_cap, r_jobcap, r_perm, r_ovh, r_n[r], r) * dt
            r_busy[r] += dt
        r_tlast[r] = t


@compiled
def _next_departure(res: Any, jtag: Any, r: int) -> float:
    r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, _, r_off, _, r_ovh = res
    if r_n[r] == 0:
        return np.inf
    remaining = jtag[r_off[r]] - r_vtime[r]
    if remaining < 0.0:
        remaining = 0.0
    t: float = r_tlast[r] + remaining / _rate(r_cap, r_jobcap, r_perm, r_ovh, r_n[r], r)
    return t


@compiled
def _work(inst: Any, page_work: Any, i: int, code: int, z: float) -> float:
    """Work of a job of instance i (before its slowdown factor): its size; on an apache
    instance its size times the work per byte plus the work of every request, and for a
    request a new connection's and its PHP page's. ``run_segment`` writes the same out."""
    i_apache, i_rwork, i_bwork, i_cwork = inst[21], inst[22], inst[23], inst[24]
    if not i_apache[i]:
        return z
    w: float = z * i_bwork[i] + i_rwork[i]
    if code >= 0:
        w += i_cwork[i] * ((code >> CONN_SHIFT) & 1) + page_work[(code >> PAGE_SHIFT) & PAGE_MASK]
    return w


@compiled
def _admit(
    res: Any, jobs: Any, inst: Any, page_work: Any, t: float, code: int, start: float, z: float
) -> None:
    """Put a job (``code``: a request or probe of its instance) into service at time ``t``.
    The caller has reserved a slot on the instance's resource and counted its worker."""
    r_n, r_vtime, r_tlast, r_off = res[3], res[4], res[5], res[7]
    jtag, jstart, jinst, jsize = jobs
    i_res, i_factor = inst[0], inst[1]
    i = code & INST_MASK if code >= 0 else -code - 1
    r = i_res[i]
    _advance(res, r, t)
    n = r_n[r]
    if n == 0:
        r_tlast[r] = t
        r_vtime[r] = 0.0
    tag = r_vtime[r] + _work(inst, page_work, i, code, z) * i_factor[i]
    _jh_push(jtag, jstart, jinst, jsize, r_off[r], n, tag, start, code, z)
    r_n[r] = n + 1


@compiled
def _ih_fix(heap: Any, pos: Any, k1: Any, k2: Any, x: int, n: int) -> None:
    """Restore x's place in an indexed heap after its key changed."""
    p = pos[x]
    while p > 0:
        parent = (p - 1) >> 1
        y = heap[parent]
        if k1[x] < k1[y] or (k1[x] == k1[y] and k2[x] < k2[y]):
            heap[p] = y
            pos[y] = p
            p = parent
        else:
            break
    heap[p] = x
    pos[x] = p
    _ih_down(heap, pos, k1, k2, p, n)


@compiled
def _user_next(users: Any, u: int, state: int, t: float) -> None:
    """User u's next event: ``state`` (``USER_ISSUE``, ``USER_EXPIRY``, ...) at time t."""
    uheap, upos, uk1, uk2, u_state = users[0], users[1], users[2], users[3], users[4]
    u_state[u] = state
    uk1[u] = t
    _ih_fix(uheap, upos, uk1, uk2, u, uheap.size)


# -- the segment loop ---------------------------------------------------------------------------
#
# The loop below calls no helper on its hot paths: a numba call that passes arrays costs an
# atomic reference-count increment and decrement per array, which used to be most of the time
# per event. The hot helpers are therefore written out by hand where they are used, each marked
# "inlined: <helper>"; an event sets flags for the work every event type shares (free a php
# child or a worker, admit jobs, re-key the resource in the departure heap, re-key the instance
# in the dispatch heap) and the tail of the loop does it once. Divisions are on the critical
# path of every event, so the loop keeps each resource's per-job rate (``_rate``) in ``rate``
# and recomputes it only when the resource's job count changes, and each instance's stride step
# in ``step``; the values are the same expressions, so results are bit-identical to calling
# the helpers. Closed-loop users and apache's pools take helper calls: they are not the open
# loop's hot path.


@compiled
def run_segment(
    t_end: float,
    algo: int,
    extended: Any,
    keepalive: bool,
    arr_t: Any,
    arr_size: Any,
    arr_page: Any,
    probe_t: Any,
    probe_inst: Any,
    probe_size: Any,
    chg_t: Any,
    chg_inst: Any,
    chg_factor: Any,
    cursor: Any,
    res: Any,
    jobs: Any,
    inst: Any,
    queues: Any,
    users: Any,
    draws: Any,
    page_work: Any,
    scalars: Any,
    iscal: Any,
    out: Any,
    probe_rt: Any,
) -> int:
    """Run from the current state up to ``t_end``; returns ``OK``, or ``NEED_SPACE`` (a pool
    is full), ``NEED_DRAWS`` (closed-loop users need more requests drawn) or ``NEED_OUT`` (the
    output records are full), after which the caller makes room and calls again.

    A change with ``chg_inst[k] >= 0`` sets that instance's slowdown factor to
    ``chg_factor[k]``; one with ``chg_inst[k] = -(r + 1)`` sets resource r's capacity to it.

    ``cursor`` = [next arrival, next probe, next change, output records written, requests the
    users sent, the user whose drawn requests ran out (with ``NEED_DRAWS``), unused, unused, most
    requests the users may send], updated in place so that a call after a status other than
    ``OK`` resumes exactly. ``scalars`` = [stride pass, leastconn sequence]; ``iscal`` = [job
    pool used, queue pool used]. Output records are completions (rt ≥ 0) and refusals (rt = -1;
    instance -1 when no server was eligible). Probe jobs carry instance -(i + 1) and are
    reported in ``probe_rt`` only: row 0 adds up the times of instance i's probes that
    completed, row 1 counts them. Requests carry a code (``INST_MASK``, ``CONN_SHIFT``...): the
    instance, whether it came on a new connection, its PHP page, its closed-loop user.
    """
    r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, r_off, r_capn, r_ovh = res
    jtag, jstart, jinst, jsize = jobs
    i_res, i_factor, i_climit, i_qlimit, i_weight, i_elig, i_active, i_wait = inst[:8]
    i_pos, i_seq, i_area, i_tlast, i_work, i_rej = inst[8:14]
    i_plimit, i_pact, i_pwait, i_held, i_warea, i_kat, i_hold, i_apache = inst[14:22]
    i_rwork, i_bwork, i_cwork = inst[22:]
    q_off, q_capn, qhead, qst, qsz, qcode, pq_off, pq_capn, pqhead = queues
    uheap, _, uk1, _, u_state, u_inst, u_until, u_next, u_sent = users
    cl_size, cl_page, cl_think = draws
    out_inst, out_start, out_rt, out_size = out
    out_cap = out_inst.size
    n_res = r_cap.size
    n_inst = i_res.size
    n_users = uheap.size
    leastconn = algo == ALGO_LEASTCONN
    # ``extended`` is None for a run with neither apache instances nor closed-loop users: numba
    # compiles a version of its own for that, in which ``ext`` is the constant False and every
    # piece of the pools, the overhead and the users is left out (the open loop's hot path)
    ext = extended is not None
    # per-job rate of each resource (capacity, caps and antagonists only change between
    # segments; the job count is tracked below), and each instance's stride step
    rate = np.empty(n_res)
    for r in range(n_res):
        rate[r] = _rate(r_cap, r_jobcap, r_perm, r_ovh, r_n[r], r)
    step = np.ones(n_inst)
    if algo == ALGO_WEIGHTED_RR:
        step = 1.0 / i_weight
    # departure heap over resources
    dk1 = np.empty(n_res)
    dk2 = np.arange(n_res).astype(np.float64)
    dheap = np.empty(n_res, dtype=np.int64)
    dpos = np.empty(n_res, dtype=np.int64)
    for r in range(n_res):
        dk1[r] = _next_departure(res, jtag, r)
    _ih_build(dheap, dpos, dk1, dk2, n_res)
    # dispatch heap over instances
    sk1 = np.empty(n_inst)
    sk2 = np.empty(n_inst)
    sheap = np.empty(n_inst, dtype=np.int64)
    spos = np.empty(n_inst, dtype=np.int64)
    for i in range(n_inst):
        ok = i_elig[i] and i_weight[i] > 0.0
        if leastconn:
            sk1[i] = (i_active[i] + i_wait[i] + 1.0) / i_weight[i] if ok else np.inf
            sk2[i] = i_seq[i]
        else:
            sk1[i] = i_pos[i] if ok else np.inf
            sk2[i] = i
    if n_inst > 0:
        _ih_build(sheap, spos, sk1, sk2, n_inst)

    na = arr_t.size
    npr = probe_t.size
    nc = chg_t.size
    ia = cursor[0]
    ip = cursor[1]
    ic = cursor[2]
    nout = cursor[3]
    issued = cursor[4]
    max_issued = cursor[8]
    drawn = cl_size.shape[1]  # requests drawn ahead per user: user u sends u_sent[u] of them
    status = OK
    while True:
        ta = arr_t[ia] if ia < na else np.inf
        tp = probe_t[ip] if ip < npr else np.inf
        tc = chg_t[ic] if ic < nc else np.inf
        td = dk1[dheap[0]] if n_res > 0 else np.inf
        tu = uk1[uheap[0]] if ext and n_users > 0 else np.inf
        tmin = min(min(ta, tp), min(min(tc, td), tu))
        if tmin >= t_end:
            break
        # work left for the tail of the loop: free a php child or a worker of instance i (the
        # next waiting request takes it), admit job (a_code, a_start, a_z) onto i's resource r
        # at t (a second one, when a departure frees a php child and a worker, is admitted by
        # _admit), re-key r
        # in the departure heap, re-key i in the dispatch heap (least connections)
        free_child = False
        free_worker = False
        admit = False
        a_code = 0
        a_start = 0.0
        a_z = 0.0
        rekey_res = False
        rekey_inst = False
        if td == tmin:
            # ---- departure
            r = dheap[0]
            code = jinst[r_off[r]]
            i = code & INST_MASK if code >= 0 else -code - 1
            if ext and nout >= out_cap:
                status = NEED_OUT
                break
            if (
                ext
                and i_apache[i]
                and not (
                    _reserve_job(r, r_n, r_off, r_capn, jtag, jstart, jinst, jsize, iscal)
                    and _reserve_queue(i, i_pwait, pq_off, pq_capn, pqhead, qst, qsz, qcode, iscal)
                )
            ):
                # room for what the freed worker and php child may admit
                status = NEED_SPACE
                break
            t = td
            # inlined: _advance, without the virtual time that is set from the tag below
            dt = t - r_tlast[r]
            if dt > 0.0:
                r_busy[r] += dt
                r_tlast[r] = t
            o = r_off[r]
            n = r_n[r]
            tag0 = jtag[o]
            s0 = jstart[o]
            z0 = jsize[o]
            # pop the root: move the last job there and sift it down (as _jh_sift_down)
            last = n - 1
            if last > 0:
                lt = jtag[o + last]
                ls = jstart[o + last]
                li = jinst[o + last]
                lz = jsize[o + last]
                p = 0
                while True:
                    c = 2 * p + 1
                    if c >= last:
                        break
                    if c + 1 < last and jtag[o + c + 1] < jtag[o + c]:
                        c += 1
                    if jtag[o + c] >= lt:
                        break
                    jtag[o + p] = jtag[o + c]
                    jstart[o + p] = jstart[o + c]
                    jinst[o + p] = jinst[o + c]
                    jsize[o + p] = jsize[o + c]
                    p = c
                jtag[o + p] = lt
                jstart[o + p] = ls
                jinst[o + p] = li
                jsize[o + p] = lz
            r_n[r] = n - 1
            # inlined: _rate
            rr = min(r_cap[r] / (n - 1 + r_perm[r]), r_jobcap[r])
            if ext and r_ovh[r] > 0.0:
                rr = rr / (1.0 + r_ovh[r] * (n - 1))
            rate[r] = rr
            r_vtime[r] = 0.0 if n == 1 else tag0
            dt = t - i_tlast[i]
            if dt > 0.0:
                i_area[i] += (i_active[i] + i_wait[i]) * dt
                if ext:
                    i_warea[i] += (i_active[i] + i_held[i]) * dt
                i_tlast[i] = t
            i_active[i] -= 1
            # inlined: _work
            w = z0
            if ext and i_apache[i]:
                w = z0 * i_bwork[i] + i_rwork[i]
                if code >= 0:
                    w += (
                        i_cwork[i] * ((code >> CONN_SHIFT) & 1)
                        + page_work[(code >> PAGE_SHIFT) & PAGE_MASK]
                    )
            i_work[i] += w * i_factor[i]
            free_worker = True
            if code >= 0:
                out_inst[nout] = i
                out_start[nout] = s0
                out_rt[nout] = t - s0
                out_size[nout] = z0
                nout += 1
                if ext and i_apache[i] and (code >> PAGE_SHIFT) & PAGE_MASK:
                    i_pact[i] -= 1
                    free_child = True
                if code >= USER_ONE:
                    # a closed-loop user has its answer: it thinks, keeping its connection
                    # (and, with the worker MPM, its worker) for at most KeepAliveTimeout;
                    # a worker above a lowered MaxRequestWorkers closes it and exits instead
                    u = (code >> USER_SHIFT) - 1
                    think = cl_think[u, u_sent[u] - 1]
                    if (
                        keepalive
                        and i_apache[i]
                        and not (i_hold[i] and i_active[i] + i_held[i] >= i_climit[i])
                    ):
                        u_inst[u] = i
                        u_until[u] = t + i_kat[i]
                        if i_hold[i]:
                            i_held[i] += 1
                            free_worker = False
                        if i_hold[i] and think > i_kat[i]:
                            u_next[u] = t + think
                            _user_next(users, u, USER_EXPIRY, t + i_kat[i])
                        else:
                            _user_next(users, u, USER_ISSUE, t + think)
                    else:
                        u_inst[u] = -1
                        _user_next(users, u, USER_ISSUE, t + think)
            else:
                probe_rt[0, i] += t - s0
                probe_rt[1, i] += 1.0
            rekey_res = True
            rekey_inst = leastconn and sk1[i] < np.inf
        elif tc == tmin:
            t = tc
            i = chg_inst[ic]
            f_new = chg_factor[ic]
            ic += 1
            if i < 0:
                # ---- capacity change of resource -i - 1 (a neighbour on the host's link, an
                # apache reload): the virtual clock runs at the old rate up to t, the new after
                r = -i - 1
                _advance(res, r, t)
                r_cap[r] = f_new
                rate[r] = _rate(r_cap, r_jobcap, r_perm, r_ovh, r_n[r], r)
                rekey_res = True
            else:
                # ---- slowdown factor change: rescale the remaining work of the instance's jobs
                r = i_res[i]
                _advance(res, r, t)
                ratio = f_new / i_factor[i]
                n = r_n[r]
                if ratio != 1.0 and n > 0:
                    o = r_off[r]
                    v = r_vtime[r]
                    for k in range(o, o + n):
                        jk = jinst[k]
                        if (jk >= 0 and jk & INST_MASK == i) or jk == -i - 1:
                            jtag[k] = v + (jtag[k] - v) * ratio
                    for p in range(n // 2 - 1, -1, -1):
                        _jh_sift_down(jtag, jstart, jinst, jsize, o, p, n)
                i_factor[i] = f_new
                rekey_res = True
        elif tu == tmin and tp > tmin and u_state[uheap[0]] == USER_EXPIRY:
            # ---- a kept-alive connection times out: its worker is free again
            u = uheap[0]
            i = u_inst[u]
            r = i_res[i]
            if not (
                _reserve_job(r, r_n, r_off, r_capn, jtag, jstart, jinst, jsize, iscal)
                and _reserve_queue(i, i_pwait, pq_off, pq_capn, pqhead, qst, qsz, qcode, iscal)
            ):
                status = NEED_SPACE
                break
            t = tu
            dt = t - i_tlast[i]
            if dt > 0.0:
                i_area[i] += (i_active[i] + i_wait[i]) * dt
                i_warea[i] += (i_active[i] + i_held[i]) * dt
                i_tlast[i] = t
            i_held[i] -= 1
            u_inst[u] = -1
            _user_next(users, u, USER_ISSUE, u_next[u])
            free_worker = True
        else:
            # ---- arrival: a probe straight to its instance, or a request (an open-loop
            # arrival or a closed-loop user's) through the balancer or on a kept-alive
            # connection to its instance
            if ext and nout >= out_cap:
                status = NEED_OUT
                break
            probe = tp == tmin
            u = -1
            held = False
            if probe:
                t = tp
                i = probe_inst[ip]
                z = probe_size[ip]
                code = -i - 1
            else:
                pinned = False
                if tu == tmin:
                    t = tu
                    u = uheap[0]
                    if issued == max_issued:
                        # the users have sent workload.max_requests: this one stops
                        _user_next(users, u, USER_DONE, np.inf)
                        continue
                    if u_sent[u] == drawn:
                        status = NEED_DRAWS
                        cursor[5] = u
                        break
                    z = cl_size[u, u_sent[u]]
                    pg = cl_page[u, u_sent[u]]
                    pinned = u_inst[u] >= 0 and t <= u_until[u]
                else:
                    t = ta
                    z = arr_size[ia]
                    pg = arr_page[ia] if ext else 0
                i = u_inst[u] if pinned else (sheap[0] if n_inst > 0 else -1)
                if not pinned and (i < 0 or sk1[i] == np.inf):
                    if u >= 0:
                        issued += 1
                        u_sent[u] += 1
                        u_inst[u] = -1
                        _user_next(users, u, USER_ISSUE, t + cl_think[u, u_sent[u] - 1])
                    else:
                        ia += 1
                    out_inst[nout] = -1
                    out_start[nout] = t
                    out_rt[nout] = -1.0
                    out_size[nout] = z
                    nout += 1
                    continue
                code = i + (pg << PAGE_SHIFT) + (u + 1) * USER_ONE
                if not pinned:
                    code += 1 << CONN_SHIFT
                held = pinned and i_hold[i]  # the connection holds a worker: it serves
            r = i_res[i]
            busy = i_active[i] + i_held[i] if ext else i_active[i]
            refuse = not held and i_qlimit[i] >= 0 and busy + i_wait[i] >= i_qlimit[i]
            serve = held or busy < i_climit[i]
            to_php = (
                serve
                and code >= 0
                and ext
                and i_apache[i]
                and (code >> PAGE_SHIFT) & PAGE_MASK != 0
                and i_pact[i] >= i_plimit[i]
            )
            if not refuse:
                if to_php:
                    room = _reserve_queue(
                        i, i_pwait, pq_off, pq_capn, pqhead, qst, qsz, qcode, iscal
                    )
                elif serve:
                    # the common case (a free slot in the slab) inlined from _reserve_job
                    room = r_n[r] < r_capn[r] or _reserve_job(
                        r, r_n, r_off, r_capn, jtag, jstart, jinst, jsize, iscal
                    )
                else:
                    room = qhead[i] + i_wait[i] < q_capn[i] or _reserve_queue(
                        i, i_wait, q_off, q_capn, qhead, qst, qsz, qcode, iscal
                    )
                if not room:
                    status = NEED_SPACE
                    break
            # from here on the event is committed
            if probe:
                ip += 1
            elif u >= 0:
                issued += 1
                u_sent[u] += 1
                _user_next(users, u, USER_BUSY, np.inf)
            else:
                ia += 1
            if probe or (code & (1 << CONN_SHIFT)) == 0:
                pass  # a probe, or a request on a kept-alive connection: no balancer choice
            elif leastconn:
                i_seq[i] = scalars[1]
                sk2[i] = scalars[1]
                scalars[1] += 1.0
            else:
                scalars[0] = sk1[i]
                i_pos[i] += step[i]
                sk1[i] = i_pos[i]
                # inlined: _ih_down(sheap, spos, sk1, sk2, 0, n_inst)
                x = sheap[0]
                p = 0
                while True:
                    c = 2 * p + 1
                    if c >= n_inst:
                        break
                    d = c + 1
                    if d < n_inst:
                        hc = sheap[c]
                        hd = sheap[d]
                        if sk1[hd] < sk1[hc] or (sk1[hd] == sk1[hc] and sk2[hd] < sk2[hc]):
                            c = d
                    y = sheap[c]
                    if sk1[y] < sk1[x] or (sk1[y] == sk1[x] and sk2[y] < sk2[x]):
                        sheap[p] = y
                        spos[y] = p
                        p = c
                    else:
                        break
                sheap[p] = x
                spos[x] = p
            dt = t - i_tlast[i]
            if dt > 0.0:
                i_area[i] += (i_active[i] + i_wait[i]) * dt
                if ext:
                    i_warea[i] += (i_active[i] + i_held[i]) * dt
                i_tlast[i] = t
            if held:
                i_held[i] -= 1
            if refuse:
                i_rej[i] += 1
                if not probe:
                    out_inst[nout] = i
                    out_start[nout] = t
                    out_rt[nout] = -1.0
                    out_size[nout] = z
                    nout += 1
                    if u >= 0:
                        u_inst[u] = -1
                        _user_next(users, u, USER_ISSUE, t + cl_think[u, u_sent[u] - 1])
            elif to_php:
                # it holds a worker and waits for a php-fpm child
                i_active[i] += 1
                k = pq_off[i] + pqhead[i] + i_pwait[i]
                qst[k] = t
                qsz[k] = z
                qcode[k] = code
                i_pwait[i] += 1
            elif serve:
                i_active[i] += 1
                if ext and code >= 0 and i_apache[i] and (code >> PAGE_SHIFT) & PAGE_MASK:
                    i_pact[i] += 1
                admit = True
                a_code = code
                a_start = t
                a_z = z
            else:
                k = q_off[i] + qhead[i] + i_wait[i]
                qst[k] = t
                qsz[k] = z
                qcode[k] = code
                i_wait[i] += 1
            # a refused request changed the instance's sequence number, so it is re-keyed too;
            # a probe must not make an instance the balancer may not use (booting, removed)
            # eligible
            rekey_inst = leastconn and sk1[i] < np.inf
        if free_child and i_pwait[i] > 0 and i_pact[i] < i_plimit[i]:
            # the php waiter at the head takes the child (it holds its worker already)
            h = pq_off[i] + pqhead[i]
            pqhead[i] += 1
            i_pwait[i] -= 1
            i_pact[i] += 1
            admit = True
            a_code = qcode[h]
            a_start = qst[h]
            a_z = qsz[h]
        if free_worker and i_wait[i] > 0 and i_active[i] + (i_held[i] if ext else 0) < i_climit[i]:
            # the head of the accept queue takes the worker
            h = q_off[i] + qhead[i]
            qhead[i] += 1
            i_wait[i] -= 1
            i_active[i] += 1
            hcode = qcode[h]
            php = ext and hcode >= 0 and i_apache[i] and (hcode >> PAGE_SHIFT) & PAGE_MASK != 0
            if php and i_pact[i] >= i_plimit[i]:
                k = pq_off[i] + pqhead[i] + i_pwait[i]
                qst[k] = qst[h]
                qsz[k] = qsz[h]
                qcode[k] = hcode
                i_pwait[i] += 1
            else:
                if php:
                    i_pact[i] += 1
                if admit:
                    _admit(res, jobs, inst, page_work, t, hcode, qst[h], qsz[h])
                else:
                    admit = True
                    a_code = hcode
                    a_start = qst[h]
                    a_z = qsz[h]
        if admit:
            # inlined: _admit (job a_code of instance i onto its resource r)
            dt = t - r_tlast[r]
            if dt > 0.0:
                if r_n[r] > 0:
                    r_vtime[r] += rate[r] * dt
                    r_busy[r] += dt
                r_tlast[r] = t
            n = r_n[r]
            if n == 0:
                r_tlast[r] = t
                r_vtime[r] = 0.0
            o = r_off[r]
            # inlined: _work
            w = a_z
            if ext and i_apache[i]:
                w = a_z * i_bwork[i] + i_rwork[i]
                if a_code >= 0:
                    w += (
                        i_cwork[i] * ((a_code >> CONN_SHIFT) & 1)
                        + page_work[(a_code >> PAGE_SHIFT) & PAGE_MASK]
                    )
            tag = r_vtime[r] + w * i_factor[i]
            # inlined: _jh_push
            p = n
            while p > 0:
                parent = (p - 1) >> 1
                if jtag[o + parent] <= tag:
                    break
                jtag[o + p] = jtag[o + parent]
                jstart[o + p] = jstart[o + parent]
                jinst[o + p] = jinst[o + parent]
                jsize[o + p] = jsize[o + parent]
                p = parent
            jtag[o + p] = tag
            jstart[o + p] = a_start
            jinst[o + p] = a_code
            jsize[o + p] = a_z
            r_n[r] = n + 1
            # inlined: _rate
            rr = min(r_cap[r] / (n + 1 + r_perm[r]), r_jobcap[r])
            if ext and r_ovh[r] > 0.0:
                rr = rr / (1.0 + r_ovh[r] * (n + 1))
            rate[r] = rr
            rekey_res = True
        if rekey_res:
            # inlined: _next_departure, then restore r's place in the departure heap (sift
            # up, then down as in _ih_down)
            if r_n[r] == 0:
                dk1[r] = np.inf
            else:
                remaining = jtag[r_off[r]] - r_vtime[r]
                if remaining < 0.0:
                    remaining = 0.0
                dk1[r] = r_tlast[r] + remaining / rate[r]
            k1 = dk1[r]
            k2 = dk2[r]
            p = dpos[r]
            while p > 0:
                parent = (p - 1) >> 1
                y = dheap[parent]
                if k1 < dk1[y] or (k1 == dk1[y] and k2 < dk2[y]):
                    dheap[p] = y
                    dpos[y] = p
                    p = parent
                else:
                    break
            while True:
                c = 2 * p + 1
                if c >= n_res:
                    break
                d = c + 1
                if d < n_res:
                    hc = dheap[c]
                    hd = dheap[d]
                    if dk1[hd] < dk1[hc] or (dk1[hd] == dk1[hc] and dk2[hd] < dk2[hc]):
                        c = d
                y = dheap[c]
                if dk1[y] < k1 or (dk1[y] == k1 and dk2[y] < k2):
                    dheap[p] = y
                    dpos[y] = p
                    p = c
                else:
                    break
            dheap[p] = r
            dpos[r] = p
        if rekey_inst:
            # restore i's place in the dispatch heap after its new key (as for the departure
            # heap above)
            sk1[i] = (i_active[i] + i_wait[i] + 1.0) / i_weight[i]
            k1 = sk1[i]
            k2 = sk2[i]
            p = spos[i]
            while p > 0:
                parent = (p - 1) >> 1
                y = sheap[parent]
                if k1 < sk1[y] or (k1 == sk1[y] and k2 < sk2[y]):
                    sheap[p] = y
                    spos[y] = p
                    p = parent
                else:
                    break
            while True:
                c = 2 * p + 1
                if c >= n_inst:
                    break
                d = c + 1
                if d < n_inst:
                    hc = sheap[c]
                    hd = sheap[d]
                    if sk1[hd] < sk1[hc] or (sk1[hd] == sk1[hc] and sk2[hd] < sk2[hc]):
                        c = d
                y = sheap[c]
                if sk1[y] < k1 or (sk1[y] == k1 and sk2[y] < k2):
                    sheap[p] = y
                    spos[y] = p
                    p = c
                else:
                    break
            sheap[p] = i
            spos[i] = p
    cursor[0] = ia
    cursor[1] = ip
    cursor[2] = ic
    cursor[3] = nout
    cursor[4] = issued
    if status == OK:
        # bring every clock to the end so that changes made between segments apply from there
        for r in range(n_res):
            _advance(res, r, t_end)
            r_tlast[r] = t_end
        for i in range(n_inst):
            dt = t_end - i_tlast[i]
            if dt > 0.0:
                i_area[i] += (i_active[i] + i_wait[i]) * dt
                if ext:
                    i_warea[i] += (i_active[i] + i_held[i]) * dt
                i_tlast[i] = t_end
    return status


@compiled
def admit_waiting(
    res: Any, jobs: Any, inst: Any, queues: Any, page_work: Any, iscal: Any, t: float
) -> int:
    """Move waiting requests on where a raised limit now allows it: php waiters onto a free
    php-fpm child, the accept queue's head onto a free worker (and on to php-fpm's queue when
    it is a PHP page and no child is free)."""
    r_n, r_off, r_capn = res[3], res[7], res[8]
    jtag, jstart, jinst, jsize = jobs
    i_res, i_climit, i_active, i_wait = inst[0], inst[2], inst[6], inst[7]
    i_plimit, i_pact, i_pwait, i_held, i_apache = inst[14], inst[15], inst[16], inst[17], inst[21]
    q_off, _, qhead, qst, qsz, qcode, pq_off, pq_capn, pqhead = queues
    for i in range(i_res.size):
        r = i_res[i]
        while True:
            if not _reserve_job(r, r_n, r_off, r_capn, jtag, jstart, jinst, jsize, iscal):
                return NEED_SPACE
            if i_pwait[i] > 0 and i_pact[i] < i_plimit[i]:
                h = pq_off[i] + pqhead[i]
                pqhead[i] += 1
                i_pwait[i] -= 1
                i_pact[i] += 1
                _admit(res, jobs, inst, page_work, t, qcode[h], qst[h], qsz[h])
                continue
            if i_wait[i] == 0 or i_active[i] + i_held[i] >= i_climit[i]:
                break
            if not _reserve_queue(i, i_pwait, pq_off, pq_capn, pqhead, qst, qsz, qcode, iscal):
                return NEED_SPACE
            h = q_off[i] + qhead[i]
            qhead[i] += 1
            i_wait[i] -= 1
            i_active[i] += 1
            code = qcode[h]
            php = code >= 0 and i_apache[i] and (code >> PAGE_SHIFT) & PAGE_MASK != 0
            if php and i_pact[i] >= i_plimit[i]:
                k = pq_off[i] + pqhead[i] + i_pwait[i]
                qst[k] = qst[h]
                qsz[k] = qsz[h]
                qcode[k] = code
                i_pwait[i] += 1
            else:
                if php:
                    i_pact[i] += 1
                _admit(res, jobs, inst, page_work, t, code, qst[h], qsz[h])
    return OK


@compiled
def drop_instance(
    i: int, t: float, res: Any, jobs: Any, inst: Any, queues: Any, users: Any, draws: Any
) -> int:
    """Abort every job of instance ``i`` (in service, waiting for a worker or a php-fpm
    child) and close its kept-alive connections; returns how many requests were aborted. A
    closed-loop user whose request is aborted thinks and sends its next one."""
    r_n, r_vtime, r_off = res[3], res[4], res[7]
    jtag, jstart, jinst, jsize = jobs
    i_res, i_active, i_wait = inst[0], inst[6], inst[7]
    i_pact, i_pwait, i_held = inst[15], inst[16], inst[17]
    q_off, qcode, pq_off, pqhead, qhead = queues[0], queues[5], queues[6], queues[8], queues[2]
    u_state, u_inst, u_next, u_sent = users[4], users[5], users[7], users[8]
    cl_think = draws[2]
    r = i_res[i]
    o = r_off[r]
    n = r_n[r]
    keep = 0
    aborted = 0
    for k in range(o, o + n):
        code = jinst[k]
        mine = (code >= 0 and code & INST_MASK == i) or code == -i - 1
        if not mine:
            jtag[o + keep] = jtag[k]
            jstart[o + keep] = jstart[k]
            jinst[o + keep] = jinst[k]
            jsize[o + keep] = jsize[k]
            keep += 1
        elif code >= 0:
            aborted += 1
            if code >= USER_ONE:
                u = (code >> USER_SHIFT) - 1
                u_inst[u] = -1
                _user_next(users, u, USER_ISSUE, t + cl_think[u, u_sent[u] - 1])
    for which in range(2):
        start = q_off[i] + qhead[i] if which == 0 else pq_off[i] + pqhead[i]
        count = i_wait[i] if which == 0 else i_pwait[i]
        for k in range(start, start + count):
            aborted += 1
            code = qcode[k]
            if code >= USER_ONE:
                u = (code >> USER_SHIFT) - 1
                u_inst[u] = -1
                _user_next(users, u, USER_ISSUE, t + cl_think[u, u_sent[u] - 1])
    for u in range(u_inst.size):
        if u_inst[u] == i:  # a kept-alive connection, closed
            u_inst[u] = -1
            if u_state[u] == USER_EXPIRY:
                _user_next(users, u, USER_ISSUE, u_next[u])
    r_n[r] = keep
    for p in range(keep // 2 - 1, -1, -1):
        _jh_sift_down(jtag, jstart, jinst, jsize, o, p, keep)
    if keep == 0:
        r_vtime[r] = 0.0
    i_active[i] = 0
    i_wait[i] = 0
    i_pact[i] = 0
    i_pwait[i] = 0
    i_held[i] = 0
    qhead[i] = 0
    pqhead[i] = 0
    return aborted


@compiled
def close_kept_alive(i: int, inst: Any, users: Any) -> int:
    """Close instance ``i``'s idle kept-alive connections (a graceful restart: the old children
    exit, ending them), freeing the workers they held; returns how many were closed. Each of
    those users sends its next request on a new connection, when its think ends."""
    u_state, u_inst, u_next = users[4], users[5], users[7]
    i_held = inst[17]
    closed = 0
    for u in range(u_inst.size):
        if u_inst[u] == i and u_state[u] != USER_DONE:
            u_inst[u] = -1
            closed += 1
            if u_state[u] == USER_EXPIRY:
                _user_next(users, u, USER_ISSUE, u_next[u])
    i_held[i] = 0
    return closed


# -- what an interval's records add up to -------------------------------------------------------


@compiled
def interval_stats(inst: Any, rt: Any, n: int, quantiles: Any) -> Any:
    """Per instance over one interval's records (``inst``, ``rt``: instance and response time,
    -1 for none): completed requests, the sum of their response times, and each of
    ``quantiles`` of them (linear between order statistics, NaN for an instance with none);
    and how many requests no server was eligible for. The sums add in record order, as
    ``np.bincount`` does."""
    counts = np.zeros(n, dtype=np.int64)
    sums = np.zeros(n)
    unrouted = 0
    for k in range(inst.size):
        i = inst[k]
        if i < 0:
            unrouted += 1
        elif rt[k] >= 0.0:
            counts[i] += 1
            sums[i] += rt[k]
    first = np.empty(n, dtype=np.int64)
    total = 0
    for i in range(n):
        first[i] = total
        total += counts[i]
    fill = first.copy()
    grouped = np.empty(total)
    for k in range(inst.size):
        i = inst[k]
        if i >= 0 and rt[k] >= 0.0:
            grouped[fill[i]] = rt[k]
            fill[i] += 1
    quant = np.full((quantiles.size, n), np.nan)
    pos = np.empty(quantiles.size)
    ranks = np.empty(2 * quantiles.size, dtype=np.int64)  # each quantile's two neighbours
    for i in range(n):
        c = counts[i]
        if c == 0:
            continue
        for q in range(quantiles.size):
            pos[q] = (c - 1) * quantiles[q]
            ranks[2 * q] = np.int64(np.floor(pos[q]))
            ranks[2 * q + 1] = min(ranks[2 * q] + 1, c - 1)
        # only the order statistics at ``ranks`` are needed: a partial sort puts them in place
        ordered = np.partition(grouped[first[i] : first[i] + c], ranks)
        for q in range(quantiles.size):
            lo, hi = ranks[2 * q], ranks[2 * q + 1]
            frac = pos[q] - lo
            quant[q, i] = ordered[lo] * (1 - frac) + ordered[hi] * frac
    return counts, sums, quant, unrouted


@compiled
def oldest_start(
    r_n: Any,
    r_off: Any,
    jstart: Any,
    jinst: Any,
    i_wait: Any,
    q_off: Any,
    qhead: Any,
    i_pwait: Any,
    pq_off: Any,
    pqhead: Any,
    qst: Any,
) -> Any:
    """Per instance, the arrival time of its oldest request in service (probes left out) or at
    the head of its accept queue or php-fpm queue; ``inf`` for an instance that holds none. (The arrays it reads,
    not the argument groups: a call pays for every array it passes.)"""
    out = np.full(i_wait.size, np.inf)
    for r in range(r_n.size):
        o = r_off[r]
        for k in range(o, o + r_n[r]):
            code = jinst[k]
            if code >= 0:
                i = code & INST_MASK
                if jstart[k] < out[i]:
                    out[i] = jstart[k]
    for i in range(i_wait.size):
        if i_wait[i] > 0 and qst[q_off[i] + qhead[i]] < out[i]:
            out[i] = qst[q_off[i] + qhead[i]]
        if i_pwait[i] > 0 and qst[pq_off[i] + pqhead[i]] < out[i]:
            out[i] = qst[pq_off[i] + pqhead[i]]
    return out
