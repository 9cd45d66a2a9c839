"""The compiled event core: one pass over time-ordered arrivals, departures and changes (of an
instance's slowdown factor or a resource's capacity).

Design for speed:

* **Virtual-time processor sharing.** Each resource r (a host link or an instance's own
  capacity) keeps a virtual clock V_r that advances at the per-job rate
  φ_r = min(C_r / (n_r + k_r), cap_r) (n_r active jobs, k_r permanent antagonist streams,
  cap_r a per-job cap for FCFS workers). A job admitted at V with work w finishes when V_r
  reaches its tag V + w, so a resource needs only a min-heap of tags: O(log n) per event, no
  per-job updates when the population changes.
* **One event heap.** An indexed min-heap over resources keyed by each one's next departure
  time; an arrival or departure at r only re-keys r. Dispatch uses a second indexed heap over
  instances (stride keys for weighted round robin, (conns + 1) / weight for least connections).
* **Arrays.** All state lives in flat numpy arrays, compiled with numba; no Python objects per
  request. Per-resource job heaps and per-instance wait queues are slabs of one pool each
  (offset + capacity); a full slab moves to the end of its pool at twice the size, and when a pool
  is exhausted the loop returns ``NEED_SPACE`` so the caller can compact/grow it and resume.

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
    i: int, i_wait: Any, q_off: Any, q_capn: Any, qhead: Any, qst: Any, qsz: Any, iscal: Any
) -> bool:
    """Make room at the tail of instance ``i``'s wait queue; False if the pool is exhausted."""
    w = i_wait[i]
    h = qhead[i]
    cap = q_capn[i]
    o = q_off[i]
    if h + w < cap:
        return True
    if h > 0 and w <= cap // 2:
        qst[o : o + w] = qst[o + h : o + h + w].copy()
        qsz[o : o + w] = qsz[o + h : o + h + w].copy()
        qhead[i] = 0
        return True
    new_cap = max(2 * cap, 8)
    used = iscal[1]
    if used + new_cap > qst.size:
        return False
    qst[used : used + w] = qst[o + h : o + h + w]
    qsz[used : used + w] = qsz[o + h : o + h + w]
    q_off[i] = used
    q_capn[i] = new_cap
    qhead[i] = 0
    iscal[1] = used + new_cap
    return True


# -- resource helpers ---------------------------------------------------------------------------


@compiled
def _rate(r_cap: Any, r_jobcap: Any, r_perm: Any, r_n: Any, r: int) -> float:
    phi: float = r_cap[r] / (r_n[r] + r_perm[r])
    cap: float = r_jobcap[r]
    return min(phi, cap)


@compiled
def _advance(
    r_cap: Any,
    r_jobcap: Any,
    r_perm: Any,
    r_n: Any,
    r_vtime: Any,
    r_tlast: Any,
    r_busy: Any,
    r: int,
    t: float,
) -> None:
    dt = t - r_tlast[r]
    if dt > 0.0:
        if r_n[r] > 0:
            r_vtime[r] += _rate(r_cap, r_jobcap, r_perm, r_n, r) * dt
            r_busy[r] += dt
        r_tlast[r] = t


@compiled
def _next_departure(
    r_cap: Any,
    r_jobcap: Any,
    r_perm: Any,
    r_n: Any,
    r_vtime: Any,
    r_tlast: Any,
    r_off: Any,
    jtag: Any,
    r: int,
) -> float:
    if r_n[r] == 0:
        return np.inf
    remaining = jtag[r_off[r]] - r_vtime[r]
    if remaining < 0.0:
        remaining = 0.0
    t: float = r_tlast[r] + remaining / _rate(r_cap, r_jobcap, r_perm, r_n, r)
    return t


@compiled
def _admit(
    res: Any,
    jobs: Any,
    i_res: Any,
    i_factor: Any,
    i_active: Any,
    i: int,
    t: float,
    start: float,
    z: float,
) -> None:
    """Put a job of instance ``i`` (``z < 0``: a probe of size -z) into service at time ``t``.
    The caller has reserved a slot on the instance's resource."""
    r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, r_off, _ = res
    jtag, jstart, jinst, jsize = jobs
    r = i_res[i]
    _advance(r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, r, t)
    n = r_n[r]
    if n == 0:
        r_tlast[r] = t
        r_vtime[r] = 0.0
    o = r_off[r]
    code = i if z >= 0.0 else -i - 1
    size = z if z >= 0.0 else -z
    _jh_push(
        jtag,
        jstart,
        jinst,
        jsize,
        o,
        n,
        r_vtime[r] + size * i_factor[i],
        start,
        code,
        size,
    )
    r_n[r] = n + 1
    i_active[i] += 1


# -- the segment loop ---------------------------------------------------------------------------
#
# The loop below calls no helper on its hot paths: a numba call that passes arrays costs an
# atomic reference-count increment and decrement per array, which used to be most of the time
# per event. The hot helpers are therefore written out by hand where they are used, each marked
# "inlined: <helper>"; an event sets flags for the work every event type shares (admit a job,
# re-key the resource in the departure heap, re-key the instance in the dispatch heap) and the
# tail of the loop does it once. Divisions are on the critical path of every event, so the loop
# keeps each resource's per-job rate (``_rate``) in ``rate`` and recomputes it only when the
# resource's job count changes, and each instance's stride step in ``step``; the values are the
# same expressions, so results are bit-identical to calling the helpers.


@compiled
def run_segment(
    t_end: float,
    algo: int,
    arr_t: Any,
    arr_size: Any,
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
    scalars: Any,
    iscal: Any,
    out: Any,
    probe_rt: Any,
) -> int:
    """Run from the current state up to ``t_end``; returns ``OK`` or ``NEED_SPACE``.

    A change with ``chg_inst[k] >= 0`` sets that instance's slowdown factor to
    ``chg_factor[k]``; one with ``chg_inst[k] = -(r + 1)`` sets resource r's capacity to it.

    ``cursor`` = [next arrival, next probe, next change, output records written], updated in
    place so that a call after ``NEED_SPACE`` resumes exactly. ``scalars`` = [stride pass,
    leastconn sequence]; ``iscal`` = [job pool used, queue pool used]. Output records are
    completions (rt ≥ 0) and refusals (rt = -1; instance -1 when no server was eligible). Probe
    jobs carry instance -(i + 1) and are reported in ``probe_rt`` only: row 0 adds up the times
    of instance i's probes that completed, row 1 counts them.
    """
    r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, r_off, r_capn = res
    jtag, jstart, jinst, jsize = jobs
    i_res, i_factor, i_climit, i_qlimit, i_weight, i_elig, i_active, i_wait = inst[:8]
    i_pos, i_seq, i_area, i_tlast, i_work, i_rej = inst[8:]
    q_off, q_capn, qhead, qst, qsz = queues
    out_inst, out_start, out_rt, out_size = out
    n_res = r_cap.size
    n_inst = i_res.size
    leastconn = algo == ALGO_LEASTCONN
    # per-job rate of each resource (capacity, caps and antagonists only change between
    # segments; the job count is tracked below), and each instance's stride step
    rate = np.empty(n_res)
    for r in range(n_res):
        rate[r] = _rate(r_cap, r_jobcap, r_perm, r_n, r)
    step = np.ones(n_inst)
    if algo == ALGO_WEIGHTED_RR:
        step = 1.0 / i_weight
    # departure heap over resources
    dk1 = np.empty(n_res)
    dk2 = np.arange(n_res).astype(np.float64)
    dheap = np.empty(n_res, dtype=np.int64)
    dpos = np.empty(n_res, dtype=np.int64)
    for r in range(n_res):
        dk1[r] = _next_departure(r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_off, jtag, r)
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
    status = OK
    while True:
        ta = arr_t[ia] if ia < na else np.inf
        tp = probe_t[ip] if ip < npr else np.inf
        tc = chg_t[ic] if ic < nc else np.inf
        td = dk1[dheap[0]] if n_res > 0 else np.inf
        tmin = min(min(ta, tp), min(tc, td))
        if tmin >= t_end:
            break
        # work left for the tail of the loop: admit job (i, a_start, a_z) onto resource r at t,
        # re-key r in the departure heap, re-key i in the dispatch heap (least connections)
        admit = False
        rekey_res = False
        rekey_inst = False
        a_start = 0.0
        a_z = 0.0
        if td == tmin:
            # ---- departure
            r = dheap[0]
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
            code = jinst[o]
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
            rate[r] = min(r_cap[r] / (n - 1 + r_perm[r]), r_jobcap[r])
            r_vtime[r] = 0.0 if n == 1 else tag0
            i = code if code >= 0 else -code - 1
            dt = t - i_tlast[i]
            if dt > 0.0:
                i_area[i] += (i_active[i] + i_wait[i]) * dt
                i_tlast[i] = t
            i_active[i] -= 1
            i_work[i] += z0 * i_factor[i]
            if code >= 0:
                out_inst[nout] = i
                out_start[nout] = s0
                out_rt[nout] = t - s0
                out_size[nout] = z0
                nout += 1
            else:
                probe_rt[0, i] += t - s0
                probe_rt[1, i] += 1.0
            if i_wait[i] > 0 and i_active[i] < i_climit[i]:
                # the departure freed a slot on this instance's resource
                h = q_off[i] + qhead[i]
                qhead[i] += 1
                i_wait[i] -= 1
                admit = True
                a_start = qst[h]
                a_z = qsz[h]
            rekey_res = True
            rekey_inst = leastconn and sk1[i] < np.inf
        elif tc == tmin:
            t = tc
            i = chg_inst[ic]
            f_new = chg_factor[ic]
            ic += 1
            if i < 0:
                # ---- capacity change of resource -i - 1 (a neighbour on the host's link):
                # the virtual clock runs at the old rate up to t, at the new one after
                r = -i - 1
                _advance(r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, r, t)
                r_cap[r] = f_new
                rate[r] = min(f_new / (r_n[r] + r_perm[r]), r_jobcap[r])
                rekey_res = True
            else:
                # ---- slowdown factor change: rescale the remaining work of the instance's jobs
                r = i_res[i]
                _advance(r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, r, t)
                ratio = f_new / i_factor[i]
                n = r_n[r]
                if ratio != 1.0 and n > 0:
                    o = r_off[r]
                    v = r_vtime[r]
                    for k in range(o, o + n):
                        if jinst[k] == i or jinst[k] == -i - 1:
                            jtag[k] = v + (jtag[k] - v) * ratio
                    for p in range(n // 2 - 1, -1, -1):
                        _jh_sift_down(jtag, jstart, jinst, jsize, o, p, n)
                i_factor[i] = f_new
                rekey_res = True
        else:
            # ---- arrival: a probe straight to its instance, or a request through the balancer
            probe = tp == tmin
            if probe:
                t = tp
                i = probe_inst[ip]
                z = -probe_size[ip]  # negative size marks a probe
            else:
                t = ta
                z = arr_size[ia]
                i = sheap[0] if n_inst > 0 else -1
                if i < 0 or sk1[i] == np.inf:
                    ia += 1
                    out_inst[nout] = -1
                    out_start[nout] = t
                    out_rt[nout] = -1.0
                    out_size[nout] = z
                    nout += 1
                    continue
            r = i_res[i]
            refuse = i_qlimit[i] >= 0 and i_active[i] + i_wait[i] >= i_qlimit[i]
            serve = i_active[i] < i_climit[i]
            if not refuse:
                if serve:
                    # the common case (a free slot in the slab) inlined from _reserve_job
                    room = r_n[r] < r_capn[r] or _reserve_job(
                        r, r_n, r_off, r_capn, jtag, jstart, jinst, jsize, iscal
                    )
                else:
                    room = qhead[i] + i_wait[i] < q_capn[i] or _reserve_queue(
                        i, i_wait, q_off, q_capn, qhead, qst, qsz, iscal
                    )
                if not room:
                    status = NEED_SPACE
                    break
            # from here on the event is committed
            if probe:
                ip += 1
            else:
                ia += 1
                if leastconn:
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
                i_tlast[i] = t
            if refuse:
                i_rej[i] += 1
                if not probe:
                    out_inst[nout] = i
                    out_start[nout] = t
                    out_rt[nout] = -1.0
                    out_size[nout] = z
                    nout += 1
            elif serve:
                admit = True
                a_start = t
                a_z = z
                rekey_res = True
            else:
                k = q_off[i] + qhead[i] + i_wait[i]
                qst[k] = t
                qsz[k] = z
                i_wait[i] += 1
            # a refused request changed the instance's sequence number, so it is re-keyed too;
            # a probe must not make an instance the balancer may not use (booting, removed)
            # eligible
            rekey_inst = leastconn and sk1[i] < np.inf
        if admit:
            # inlined: _admit (job i, start a_start, size a_z; a_z < 0: a probe of size -a_z)
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
            code = i if a_z >= 0.0 else -i - 1
            size = a_z if a_z >= 0.0 else -a_z
            tag = r_vtime[r] + size * i_factor[i]
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
            jinst[o + p] = code
            jsize[o + p] = size
            r_n[r] = n + 1
            rate[r] = min(r_cap[r] / (n + 1 + r_perm[r]), r_jobcap[r])
            i_active[i] += 1
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
    if status == OK:
        # bring every clock to the end so that changes made between segments apply from there
        for r in range(n_res):
            _advance(r_cap, r_jobcap, r_perm, r_n, r_vtime, r_tlast, r_busy, r, t_end)
            r_tlast[r] = t_end
        for i in range(n_inst):
            dt = t_end - i_tlast[i]
            if dt > 0.0:
                i_area[i] += (i_active[i] + i_wait[i]) * dt
                i_tlast[i] = t_end
    return status


@compiled
def admit_waiting(res: Any, jobs: Any, inst: Any, queues: Any, iscal: Any, t: float) -> int:
    """Move waiting jobs into service where a raised concurrency limit now allows it."""
    r_n, r_off, r_capn = res[3], res[7], res[8]
    jtag, jstart, jinst, jsize = jobs
    i_res, i_factor, i_climit = inst[0], inst[1], inst[2]
    i_active, i_wait = inst[6], inst[7]
    q_off, _, qhead, qst, qsz = queues
    for i in range(i_res.size):
        while i_wait[i] > 0 and i_active[i] < i_climit[i]:
            if not _reserve_job(i_res[i], r_n, r_off, r_capn, jtag, jstart, jinst, jsize, iscal):
                return NEED_SPACE
            h = q_off[i] + qhead[i]
            qhead[i] += 1
            i_wait[i] -= 1
            _admit(res, jobs, i_res, i_factor, i_active, i, t, qst[h], qsz[h])
    return OK


@compiled
def drop_instance(i: int, res: Any, jobs: Any, inst: Any, queues: Any) -> int:
    """Abort every job of instance ``i`` (in service or waiting); returns how many."""
    r_n, r_vtime, r_off = res[3], res[4], res[7]
    jtag, jstart, jinst, jsize = jobs
    i_res = inst[0]
    i_active = inst[6]
    i_wait = inst[7]
    qhead = queues[2]
    r = i_res[i]
    o = r_off[r]
    n = r_n[r]
    keep = 0
    for k in range(o, o + n):
        if jinst[k] != i and jinst[k] != -i - 1:
            jtag[o + keep] = jtag[k]
            jstart[o + keep] = jstart[k]
            jinst[o + keep] = jinst[k]
            jsize[o + keep] = jsize[k]
            keep += 1
    dropped: int = n - keep + i_wait[i]
    r_n[r] = keep
    for p in range(keep // 2 - 1, -1, -1):
        _jh_sift_down(jtag, jstart, jinst, jsize, o, p, keep)
    if keep == 0:
        r_vtime[r] = 0.0
    i_active[i] = 0
    i_wait[i] = 0
    qhead[i] = 0
    return dropped


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
    r_n: Any, r_off: Any, jstart: Any, jinst: Any, i_wait: Any, q_off: Any, qhead: Any, qst: Any
) -> Any:
    """Per instance, the arrival time of its oldest request in service (probes left out) or at
    the head of its wait queue; ``inf`` for an instance that holds none. (The arrays it reads,
    not the argument groups: a call pays for every array it passes.)"""
    out = np.full(i_wait.size, np.inf)
    for r in range(r_n.size):
        o = r_off[r]
        for k in range(o, o + r_n[r]):
            i = jinst[k]
            if i >= 0 and jstart[k] < out[i]:
                out[i] = jstart[k]
    for i in range(i_wait.size):
        if i_wait[i] > 0:
            head = qst[q_off[i] + qhead[i]]
            if head < out[i]:
                out[i] = head
    return out
