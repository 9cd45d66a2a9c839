"""The compiled event core: one pass over time-ordered arrivals, departures and changes (of an
instance's slowdown factor or a resource's capacity).

Design for speed:

* **Virtual-time processor sharing.** Each resource r (a host link or an instance's own
  capacity) keeps a virtual clock V_r that advances at the per-job rate
  φ_r = min(C_r / (n_r + k_r), cap_r) / (1 + γ_r n_r) (n_r active jobs, k_r permanent
  antagonist streams, cap_r a per-job cap for FCFS workers or one CPU core, γ_r an apache
  instance's overhead per active worker, 0 elsewhere). A job admitted at V with work w finishes
  when V_r reaches its tag V + w, so a resource needs only a min-heap of tags: O(log n) per
  event, no per-job updates when the population changes.
* **Served capacity from the virtual clock.** Every job of resource r in service received the
  same ΔV_r, so instance i's served capacity (finished or not, a NIC's bytes out) grows by
  (its jobs in service) × ΔV_r, counted when that number changes (``_serve_clock``: a
  multiply-add at each of its admissions and completions) and read in between as
  count × (V_r − mark); its busy time is its busy periods' ends less their starts, touched only
  when one starts or ends. Nothing is touched per job.
* **One event heap.** An indexed min-heap over resources keyed by each one's next departure
  time; an arrival or departure at r only re-keys r. Dispatch uses a second indexed heap over
  instances (stride keys for weighted round robin, (conns + 1) / weight for least connections).
* **Arrays in named groups.** All state lives in flat numpy arrays, grouped in named tuples
  (``State``: ``Resources``, ``Jobs``, ``Instances``, two ``Queue`` s, ``Users``...), compiled
  with numba; no Python objects per request. Per-resource job heaps and per-instance wait queues
  are slabs of one pool each (offset + capacity); a full slab moves to the end of its pool at
  twice the size, and when a pool is exhausted the loop returns ``NEED_SPACE`` so the caller can
  compact/grow it and resume.
* **Workers and users.** An instance serves at most ``climit`` requests at once (FCFS workers,
  maxconn, apache's MaxRequestWorkers, counting the workers idle kept-alive connections hold);
  the rest wait in its accept queue. On an apache instance a PHP page also needs one of
  ``plimit`` php-fpm children, waiting for one in a second queue while it holds its worker.
  Closed-loop users live in a third indexed heap keyed by their next event (send a request
  after thinking, or a kept-alive connection timing out); each user's requests and think times
  are drawn ahead in blocks (a row per user), and the loop returns ``NEED_DRAWS`` when a user
  has sent its block.
* **One function per kind of event, inlined, no reference counting.** ``run_segment`` picks the
  next event and calls its function (a completion, a capacity or slowdown change, a kept-alive
  connection's timeout, a probe, an open-loop request, a user's request); those and the pieces
  they share (``@step``) are inlined into their callers, so no call passes the state's arrays.
  Every function here but ``interval_stats`` allocates nothing (the caller passes the arrays a
  segment works in, ``Segment``), so it is compiled without numba's reference counting
  (``_nrt=False``): with it, each call that passes arrays costs an atomic increment and
  decrement per array, which was most of the time per event while the loop called out to
  functions. Divisions are on the critical path of every event, so a segment keeps each
  resource's per-job rate (``_rate``) in ``Segment.rate`` and recomputes it only when the
  resource's job count or capacity changes, and each instance's stride step in ``Segment.step``;
  the positions in the schedule and the output stay in registers.

The functions here are pure state transitions on arrays, and the sums over an interval's
records; ``quell.sim.core.EventCore`` owns the arrays, and ``quell.sim.core`` is the only caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

F = TypeVar("F", bound=Callable[..., Any])
Floats = NDArray[np.float64]
Ints = NDArray[np.int64]
Flags = NDArray[np.bool_]

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
# where a run stands (``cursor``), kept across the calls of one ``EventCore.run``
ARRIVAL = 0  # the next open-loop arrival
PROBE = 1  # the next probe
CHANGE = 2  # the next change
WRITTEN = 3  # output records written
SENT = 4  # requests the closed-loop users have sent
NEEDY = 5  # the user whose drawn requests ran out (with NEED_DRAWS)
MAX_SENT = 6  # the most requests the users may send
CURSOR_SIZE = 7


def compiled(fn: F) -> F:
    """Compile ``fn`` with numba (nopython; no reference counting, so it must allocate
    nothing) on first call, and cache the machine code on disk for the next process. numba
    picks the cache directory: ``$NUMBA_CACHE_DIR`` when set, else ``__pycache__`` beside this
    file when writable (a source checkout, an editable install), else the user's
    ``~/.cache/numba`` (a read-only install). Where none is writable it compiles in memory, in
    every process."""
    return _jit(fn, _nrt=False)


def step(fn: F) -> F:
    """``compiled`` for a part of the functions that call it: inlined into each (no call, no
    arguments passed), not callable from Python."""
    return _jit(fn, _nrt=False, forceinline=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)


def allocating(fn: F) -> F:
    """``compiled`` for a function that builds arrays (its result), with reference counting."""
    return _jit(fn)


def _jit(fn: F, **options: Any) -> F:
    try:
        return cast(F, numba.njit(cache=True, error_model="numpy", **options)(fn))
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return cast(F, numba.njit(cache=False, error_model="numpy", **options)(fn))


# -- the state ------------------------------------------------------------------------------------


class Resources(NamedTuple):
    """Per resource: a host's link, an instance's own capacity, or an apache instance's CPU."""

    cap: Floats  # capacity: bytes/s, or cores
    jobcap: Floats  # the most one job gets (an FCFS worker's share, one core)
    perm: Floats  # antagonist streams that share it like jobs that never finish
    ovh: Floats  # overhead per job: the per-job rate is divided by 1 + ovh × jobs
    n: Ints  # jobs in service
    vtime: Floats  # virtual time: the work each job in service has received
    tlast: Floats  # when vtime was brought up to date
    busy: Floats  # time with at least one job in service (seconds)
    off: Ints  # its slab of the job pool: offset
    capn: Ints  # and capacity


class Jobs(NamedTuple):
    """The job pool: each resource's jobs in service, a min-heap by tag in its slab."""

    tag: Floats  # virtual time at which the job is done
    start: Floats  # when the request arrived
    code: Ints  # the request's code (a probe's: -(instance + 1))
    size: Floats  # its size as it came


class Instances(NamedTuple):
    """Per instance."""

    res: Ints  # the resource its jobs run on
    factor: Floats  # slowdown factor: each job's work is multiplied by it
    climit: Ints  # requests in service at most (workers, maxconn)
    qlimit: Ints  # requests in the instance at most, beyond refused (-1: no limit)
    weight: Floats  # the balancer's weight
    elig: Flags  # the balancer may send it new requests (booted, not removed)
    pos: Floats  # weighted round robin: its stride position
    seq: Floats  # least connections: when it was last picked
    active: Ints  # requests holding a worker (in service or waiting for a php-fpm child)
    area: Floats  # ∫ (requests in service + waiting) dt: Little's L times elapsed time
    tlast: Floats  # when area (and warea) were brought up to date
    work: Floats  # capacity used by completed jobs (work × slowdown)
    rej: Ints  # requests refused (admission limit)
    apache: Flags  # an apache server: worker pool, php-fpm pool, keep-alive
    plimit: Ints  # php-fpm children (PHP pages served at once)
    pact: Ints  # PHP requests with a child
    held: Ints  # workers held by idle kept-alive connections (the worker MPM)
    warea: Floats  # ∫ (workers busy: serving, waiting for php-fpm, held) dt
    kat: Floats  # how long a connection it answered stays open idle
    hold: Flags  # an idle kept-alive connection holds its worker
    rwork: Floats  # work of every request,
    bwork: Floats  # per byte of its size,
    cwork: Floats  # and of a new connection (+ its PHP page's: ``State.page_work``)
    serving: Ints  # its jobs in service on its resource (requests and probes)
    served: Floats  # capacity its jobs received, finished or not (∫ serving × dV_r),
    busy: Floats  # time with a job of it in service: its busy periods' ends less their starts
    vmark: Floats  # its resource's virtual time when ``served`` was brought up (``_serve_clock``)


class Queue(NamedTuple):
    """Per instance, a FIFO queue in its slab of the queue pool: the accept queue (requests
    waiting for a worker) or the php-fpm queue (PHP pages holding a worker, waiting for a
    child)."""

    n: Ints  # requests waiting
    head: Ints  # the first one's place in the slab
    off: Ints  # the slab: offset in the pool
    capn: Ints  # and capacity


class QueuePool(NamedTuple):
    """The requests waiting in every ``Queue``."""

    start: Floats  # when the request arrived
    size: Floats  # its size
    code: Ints  # its code


class IndexedHeap(NamedTuple):
    """A min-heap over ids 0..n-1 by the key (k1[id], k2[id]), lexicographic; ``pos`` finds an
    id in it, so one whose key changed is moved to its place (``_ih_fix``)."""

    heap: Ints  # ids in heap order
    pos: Ints  # each id's place in heap
    k1: Floats  # the key
    k2: Floats  # the tie-break


class Users(NamedTuple):
    """Closed-loop users."""

    queue: IndexedHeap  # by the time of each one's next event (tie: the user's index)
    state: Ints  # what that event is: USER_ISSUE, USER_EXPIRY, USER_BUSY, USER_DONE
    inst: Ints  # the instance of its kept-alive connection (-1: none)
    until: Floats  # when that connection closes
    next: Floats  # when the user sends after it (USER_EXPIRY)
    sent: Ints  # how many of its drawn requests it has sent


class Draws(NamedTuple):
    """Each user's requests drawn ahead, a row per user."""

    size: Floats
    page: Ints
    think: Floats  # the think time after each request's answer


class State(NamedTuple):
    """Everything a run changes, kept between runs (``EventCore``)."""

    res: Resources
    jobs: Jobs
    inst: Instances
    accept: Queue
    php: Queue
    waiting: QueuePool
    users: Users
    draws: Draws
    page_work: Floats  # work of each PHP page (index 1 on; 0 is a static file's: none)
    lb: Floats  # the balancer: [stride pass, least-connections sequence]
    used: Ints  # [job pool used, queue pool used]


class Schedule(NamedTuple):
    """What one run is given, each sorted by time."""

    arrival_t: Floats
    arrival_size: Floats
    arrival_page: Ints
    probe_t: Floats
    probe_inst: Ints
    probe_size: Floats
    change_t: Floats
    change_target: Ints  # ≥ 0: that instance's slowdown factor; -(r + 1): resource r's capacity
    change_value: Floats


class Segment(NamedTuple):
    """What one call of ``run_segment`` derives from the state when it starts (arrays of the
    caller's, filled by ``_start_segment``)."""

    rate: Floats  # per resource: the per-job rate at its job count (``_rate``)
    step: Floats  # per instance: its stride step (1 / weight; 1 for plain round robin)
    departures: IndexedHeap  # resources by their next departure
    dispatch: IndexedHeap  # instances by the balancer's key (inf: not eligible)


class Output(NamedTuple):
    """Completions (rt ≥ 0) and refusals (rt = -1; instance -1 when no server was eligible)."""

    inst: Ints
    start: Floats
    rt: Floats
    size: Floats


# -- heaps ----------------------------------------------------------------------------------------
#
# The indexed heaps (departures, dispatch, users) and the job heaps share the sift: an element
# that sinks is held in registers while the elements it passes move up one place each.


@step
def _before(a1: float, a2: float, b1: float, b2: float) -> bool:
    """(a1, a2) < (b1, b2), lexicographic."""
    return a1 < b1 or (a1 == b1 and a2 < b2)


@step
def _ih_put(h: Any, p: int, x: int) -> None:
    h.heap[p] = x
    h.pos[x] = p


@step
def _ih_sink(h: Any, p: int, x: int, x1: float, x2: float) -> None:
    """Place id x, key (x1, x2), at place p of the indexed heap h or below it."""
    heap, k1, k2 = h.heap, h.k1, h.k2
    n = heap.size
    while True:
        c = 2 * p + 1
        if c >= n:
            break
        if c + 1 < n and _before(k1[heap[c + 1]], k2[heap[c + 1]], k1[heap[c]], k2[heap[c]]):
            c += 1
        y = heap[c]
        if not _before(k1[y], k2[y], x1, x2):
            break
        _ih_put(h, p, y)
        p = c
    _ih_put(h, p, x)


@step
def _ih_down(h: Any, p: int) -> None:
    """Sift the id at place p down to its place."""
    x = h.heap[p]
    _ih_sink(h, p, x, h.k1[x], h.k2[x])


@step
def _ih_fix(h: Any, x: int) -> None:
    """Restore x's place in the heap after its key changed: up, then down."""
    x1, x2 = h.k1[x], h.k2[x]
    p = h.pos[x]
    while p > 0:
        parent = (p - 1) >> 1
        y = h.heap[parent]
        if not _before(x1, x2, h.k1[y], h.k2[y]):
            break
        _ih_put(h, p, y)
        p = parent
    _ih_sink(h, p, x, x1, x2)


@step
def _ih_build(h: Any) -> None:
    """Make the heap of every id from their keys."""
    n = h.heap.size
    for i in range(n):
        _ih_put(h, i, i)
    for p in range(n // 2 - 1, -1, -1):
        _ih_down(h, p)


@step
def _jh_put(jobs: Any, k: int, tag: float, start: float, code: int, size: float) -> None:
    jobs.tag[k] = tag
    jobs.start[k] = start
    jobs.code[k] = code
    jobs.size[k] = size


@step
def _jh_move(jobs: Any, dst: int, src: int) -> None:
    _jh_put(jobs, dst, jobs.tag[src], jobs.start[src], jobs.code[src], jobs.size[src])


@step
def _jh_push(jobs: Any, o: int, n: int, tag: float, start: float, code: int, size: float) -> None:
    """Push a job onto the heap at ``[o, o + n)``."""
    p = n
    while p > 0:
        parent = (p - 1) >> 1
        if jobs.tag[o + parent] <= tag:
            break
        _jh_move(jobs, o + p, o + parent)
        p = parent
    _jh_put(jobs, o + p, tag, start, code, size)


@step
def _jh_sink(
    jobs: Any, o: int, p: int, n: int, tag: float, start: float, code: int, size: float
) -> None:
    """Place a job at place p of the heap at ``[o, o + n)`` or below it."""
    while True:
        c = 2 * p + 1
        if c >= n:
            break
        if c + 1 < n and jobs.tag[o + c + 1] < jobs.tag[o + c]:
            c += 1
        if jobs.tag[o + c] >= tag:
            break
        _jh_move(jobs, o + p, o + c)
        p = c
    _jh_put(jobs, o + p, tag, start, code, size)


@step
def _jh_pop(jobs: Any, o: int, n: int) -> None:
    """Remove the root of the heap at ``[o, o + n)``: the last job sinks from the root."""
    k = o + n - 1
    if n > 1:
        _jh_sink(jobs, o, 0, n - 1, jobs.tag[k], jobs.start[k], jobs.code[k], jobs.size[k])


@step
def _jh_heapify(jobs: Any, o: int, n: int) -> None:
    """Make ``[o, o + n)`` a heap again after its tags changed or jobs left it."""
    for p in range(n // 2 - 1, -1, -1):
        k = o + p
        _jh_sink(jobs, o, p, n, jobs.tag[k], jobs.start[k], jobs.code[k], jobs.size[k])


# -- slab pools -----------------------------------------------------------------------------------


@step
def _reserve_job(st: Any, r: int) -> bool:
    """Make room for one more job on resource ``r``; False if the pool is exhausted."""
    res, jobs = st.res, st.jobs
    n = res.n[r]
    cap = res.capn[r]
    if n < cap:
        return True
    new_cap = max(2 * cap, 8)
    used = st.used[0]
    if used + new_cap > jobs.tag.size:
        return False
    o = res.off[r]
    for k in range(n):
        _jh_move(jobs, used + k, o + k)
    res.off[r] = used
    res.capn[r] = new_cap
    st.used[0] = used + new_cap
    return True


@step
def _reserve_queue(st: Any, q: Any, i: int) -> bool:
    """Make room at the tail of instance ``i``'s queue ``q`` (``st.accept`` or ``st.php``);
    False if the pool is exhausted."""
    pool = st.waiting
    w = q.n[i]
    h = q.head[i]
    cap = q.capn[i]
    o = q.off[i]
    if h + w < cap:
        return True
    if h > 0 and w <= cap // 2:
        dst = o  # slide the waiting requests to the front of the slab
    else:
        new_cap = max(2 * cap, 8)
        dst = st.used[1]
        if dst + new_cap > pool.start.size:
            return False
        q.off[i] = dst
        q.capn[i] = new_cap
        st.used[1] = dst + new_cap
    for k in range(w):  # forward: a slide moves each entry to a lower place
        pool.start[dst + k] = pool.start[o + h + k]
        pool.size[dst + k] = pool.size[o + h + k]
        pool.code[dst + k] = pool.code[o + h + k]
    q.head[i] = 0
    return True


@step
def _queue_push(st: Any, q: Any, i: int, start: float, size: float, code: int) -> None:
    """Add a request at the tail of instance i's queue ``q`` (room reserved)."""
    k = q.off[i] + q.head[i] + q.n[i]
    st.waiting.start[k] = start
    st.waiting.size[k] = size
    st.waiting.code[k] = code
    q.n[i] += 1


@step
def _queue_pop(st: Any, q: Any, i: int) -> tuple[float, float, int]:
    """Take the request at the head of instance i's queue ``q``: its start, size and code."""
    k = q.off[i] + q.head[i]
    q.head[i] += 1
    q.n[i] -= 1
    return st.waiting.start[k], st.waiting.size[k], st.waiting.code[k]


# -- resources, instances, users ------------------------------------------------------------------


@step
def _rate(res: Any, r: int, n: int, extended: Any) -> float:
    """Per-job rate of resource r with n jobs: its share, at most the per-job cap, divided by
    1 + overhead × n (an apache instance's per-active-worker overhead; 0 elsewhere)."""
    phi: float = min(res.cap[r] / (n + res.perm[r]), res.jobcap[r])
    if extended is not None and res.ovh[r] > 0.0:
        phi = phi / (1.0 + res.ovh[r] * n)
    return phi


@step
def _advance(res: Any, r: int, t: float, phi: float) -> None:
    """Bring resource r's virtual clock to t at its per-job rate ``phi``."""
    dt = t - res.tlast[r]
    if dt > 0.0:
        if res.n[r] > 0:
            res.vtime[r] += phi * dt
            res.busy[r] += dt
        res.tlast[r] = t


@step
def _next_departure(st: Any, r: int, phi: float) -> float:
    """When resource r's first job is done at its per-job rate ``phi`` (inf: no job)."""
    res = st.res
    if res.n[r] == 0:
        return np.inf
    remaining = st.jobs.tag[res.off[r]] - res.vtime[r]
    if remaining < 0.0:
        remaining = 0.0
    t: float = res.tlast[r] + remaining / phi
    return t


@step
def _instance_of(code: int) -> int:
    return code & INST_MASK if code >= 0 else -code - 1


@step
def _page_of(code: int) -> int:
    """A request's PHP page (0: a static file, or a probe)."""
    return (code >> PAGE_SHIFT) & PAGE_MASK if code >= 0 else 0


@step
def _work(st: Any, i: int, code: int, z: float, extended: Any) -> float:
    """Work of a job of instance i (before its slowdown factor): its size; on an apache
    instance its size times the work per byte plus the work of every request, and for a
    request a new connection's and its PHP page's."""
    inst = st.inst
    if extended is None or not inst.apache[i]:
        return z
    w: float = z * inst.bwork[i] + inst.rwork[i]
    if code >= 0:
        w += inst.cwork[i] * ((code >> CONN_SHIFT) & 1) + st.page_work[_page_of(code)]
    return w


@step
def _serve_clock(inst: Any, i: int, t: float, v: float, step: int) -> None:
    """Instance i's jobs in service change by ``step`` at t, where its resource's virtual clock
    reads v: each of those it had received v − ``vmark`` since the last change. Its busy time
    is kept as the sum of its busy periods' ends less their starts (read while busy by adding
    now)."""
    k = inst.serving[i]
    if k > 0:
        inst.served[i] += k * (v - inst.vmark[i])
        if k + step == 0:
            inst.busy[i] += t
    elif step > 0:
        inst.busy[i] -= t
    inst.serving[i] = k + step
    inst.vmark[i] = v


@step
def _enter_service(
    st: Any, t: float, code: int, start: float, z: float, phi: float, extended: Any
) -> int:
    """Put job ``code`` (a request or probe of its instance) into service at time ``t`` on its
    instance's resource, whose per-job rate is ``phi``; returns the resource. The caller has
    reserved the slot and counted the job's worker."""
    res = st.res
    i = _instance_of(code)
    r: int = st.inst.res[i]
    _advance(res, r, t, phi)
    n = res.n[r]
    if n == 0:
        res.tlast[r] = t
        res.vtime[r] = 0.0
    v = res.vtime[r]
    _serve_clock(st.inst, i, t, v, 1)
    tag = v + _work(st, i, code, z, extended) * st.inst.factor[i]
    _jh_push(st.jobs, res.off[r], n, tag, start, code, z)
    res.n[r] = n + 1
    return r


@step
def _admit(st: Any, seg: Any, t: float, code: int, start: float, z: float, extended: Any) -> None:
    """``_enter_service`` in a segment, which keeps the resource's per-job rate."""
    r = st.inst.res[_instance_of(code)]
    _enter_service(st, t, code, start, z, seg.rate[r], extended)
    seg.rate[r] = _rate(st.res, r, st.res.n[r], extended)


@step
def _instance_clock(st: Any, i: int, t: float, extended: Any) -> None:
    """Bring instance i's areas (requests in it, busy workers) up to t."""
    inst = st.inst
    dt = t - inst.tlast[i]
    if dt > 0.0:
        inst.area[i] += (inst.active[i] + st.accept.n[i]) * dt
        if extended is not None:
            inst.warea[i] += (inst.active[i] + inst.held[i]) * dt
        inst.tlast[i] = t


@step
def _take_free(
    st: Any, seg: Any, i: int, t: float, child: bool, worker: bool, extended: Any
) -> bool:
    """A php-fpm child (``child``) and a worker (``worker``) of instance i came free at t: the
    php waiter at the head takes the child (it holds its worker already), the head of the
    accept queue the worker (and waits for a child in turn when it is a PHP page and none is
    free). Returns whether a job went into service."""
    ext = extended is not None
    inst = st.inst
    waiter = False
    w_start, w_size, w_code = 0.0, 0.0, 0
    if child and st.php.n[i] > 0 and inst.pact[i] < inst.plimit[i]:
        w_start, w_size, w_code = _queue_pop(st, st.php, i)
        inst.pact[i] += 1
        waiter = True
    admitted = waiter
    held = inst.held[i] if ext else 0
    if worker and st.accept.n[i] > 0 and inst.active[i] + held < inst.climit[i]:
        start, size, code = _queue_pop(st, st.accept, i)
        inst.active[i] += 1
        php = ext and inst.apache[i] and _page_of(code) != 0
        if php and inst.pact[i] >= inst.plimit[i]:
            _queue_push(st, st.php, i, start, size, code)
        else:
            if php:
                inst.pact[i] += 1
            _admit(st, seg, t, code, start, size, extended)
            admitted = True
    if waiter:
        _admit(st, seg, t, w_code, w_start, w_size, extended)
    return admitted


@step
def _rekey_resource(st: Any, seg: Any, r: int) -> None:
    """Resource r's next departure changed: its place in the departure heap."""
    seg.departures.k1[r] = _next_departure(st, r, seg.rate[r])
    _ih_fix(seg.departures, r)


@step
def _rekey_instance(st: Any, seg: Any, i: int) -> None:
    """Least connections: instance i's connections changed, and so its key."""
    seg.dispatch.k1[i] = (st.inst.active[i] + st.accept.n[i] + 1.0) / st.inst.weight[i]
    _ih_fix(seg.dispatch, i)


@step
def _user_next(users: Any, u: int, state: int, t: float) -> None:
    """User u's next event: ``state`` (``USER_ISSUE``, ``USER_EXPIRY``, ...) at time t."""
    users.state[u] = state
    users.queue.k1[u] = t
    _ih_fix(users.queue, u)


@step
def _user_thinks(st: Any, u: int, t: float) -> None:
    """User u's last request ended at t without a connection kept: it thinks, then sends."""
    users = st.users
    users.inst[u] = -1
    _user_next(users, u, USER_ISSUE, t + st.draws.think[u, users.sent[u] - 1])


@step
def _user_answered(st: Any, i: int, u: int, t: float, keepalive: bool) -> bool:
    """User u has its answer from instance i at t: it thinks, keeping its connection (and,
    with the worker MPM, its worker) for at most KeepAliveTimeout; a worker above a lowered
    MaxRequestWorkers closes it and exits instead. Returns whether the worker is free."""
    inst, users = st.inst, st.users
    if (
        not keepalive
        or not inst.apache[i]
        or (inst.hold[i] and inst.active[i] + inst.held[i] >= inst.climit[i])
    ):
        _user_thinks(st, u, t)
        return True
    think = st.draws.think[u, users.sent[u] - 1]
    users.inst[u] = i
    users.until[u] = t + inst.kat[i]
    if not inst.hold[i]:
        _user_next(users, u, USER_ISSUE, t + think)
        return True
    inst.held[i] += 1
    if think > inst.kat[i]:
        users.next[u] = t + think
        _user_next(users, u, USER_EXPIRY, t + inst.kat[i])
    else:
        _user_next(users, u, USER_ISSUE, t + think)
    return False


@step
def _record(out: Any, k: int, i: int, start: float, rt: float, size: float) -> int:
    """Write output record k; returns the next one's place."""
    out.inst[k] = i
    out.start[k] = start
    out.rt[k] = rt
    out.size[k] = size
    return k + 1


# -- the events -----------------------------------------------------------------------------------


@step
def _complete(
    st: Any,
    seg: Any,
    out: Any,
    nout: int,
    probe_rt: Any,
    extended: Any,
    keepalive: bool,
    leastconn: bool,
) -> tuple[int, int]:
    """The first job of the resource at the head of the departure heap is done: record it (as
    output record ``nout``), free its worker (and php-fpm child) for whoever waits, answer its
    closed-loop user. Returns the status and the records written."""
    ext = extended is not None
    res, jobs, inst = st.res, st.jobs, st.inst
    r = seg.departures.heap[0]
    code = jobs.code[res.off[r]]
    i = _instance_of(code)
    if ext and nout >= out.inst.size:
        return NEED_OUT, nout
    if ext and inst.apache[i] and not (_reserve_job(st, r) and _reserve_queue(st, st.php, i)):
        return NEED_SPACE, nout  # room for what the freed worker and php child may admit
    o = res.off[r]  # (the reservation may have moved the slab)
    t = seg.departures.k1[r]
    dt = t - res.tlast[r]  # the virtual clock is set from the tag below
    if dt > 0.0:
        res.busy[r] += dt
        res.tlast[r] = t
    n = res.n[r]
    tag, start, z = jobs.tag[o], jobs.start[o], jobs.size[o]
    _jh_pop(jobs, o, n)
    res.n[r] = n - 1
    seg.rate[r] = _rate(res, r, n - 1, extended)
    res.vtime[r] = 0.0 if n == 1 else tag
    _serve_clock(inst, i, t, tag, -1)  # (a resource left empty: its mark is set at the next)
    _instance_clock(st, i, t, extended)
    inst.active[i] -= 1
    inst.work[i] += _work(st, i, code, z, extended) * inst.factor[i]
    child = False
    worker = True
    if code >= 0:
        nout = _record(out, nout, i, start, t - start, z)
        if ext and inst.apache[i] and _page_of(code):
            inst.pact[i] -= 1
            child = True
        if code >= USER_ONE:
            worker = _user_answered(st, i, (code >> USER_SHIFT) - 1, t, keepalive)
    else:
        probe_rt[0, i] += t - start
        probe_rt[1, i] += 1.0
    _take_free(st, seg, i, t, child, worker, extended)
    _rekey_resource(st, seg, r)
    if leastconn and seg.dispatch.k1[i] < np.inf:
        _rekey_instance(st, seg, i)
    return OK, nout


@step
def _set_capacity(st: Any, seg: Any, r: int, t: float, capacity: float, extended: Any) -> None:
    """Resource r's capacity changes at t (a neighbour on the host's link, an apache reload):
    the virtual clock runs at the old rate up to t, the new after."""
    _advance(st.res, r, t, seg.rate[r])
    st.res.cap[r] = capacity
    seg.rate[r] = _rate(st.res, r, st.res.n[r], extended)
    _rekey_resource(st, seg, r)


@step
def _set_slowdown(st: Any, seg: Any, i: int, t: float, factor: float) -> None:
    """Instance i's slowdown factor changes at t: the remaining work of its jobs scales."""
    res, jobs = st.res, st.jobs
    r = st.inst.res[i]
    _advance(res, r, t, seg.rate[r])
    ratio = factor / st.inst.factor[i]
    n = res.n[r]
    if ratio != 1.0 and n > 0:
        o = res.off[r]
        v = res.vtime[r]
        for k in range(o, o + n):
            if _instance_of(jobs.code[k]) == i:
                jobs.tag[k] = v + (jobs.tag[k] - v) * ratio
        _jh_heapify(jobs, o, n)
    st.inst.factor[i] = factor
    _rekey_resource(st, seg, r)


@step
def _keepalive_ends(st: Any, seg: Any, extended: Any) -> int:
    """The kept-alive connection of the user at the head of the users' heap times out: its
    worker is free again."""
    users, inst = st.users, st.inst
    u = users.queue.heap[0]
    i = users.inst[u]
    r = inst.res[i]
    if not (_reserve_job(st, r) and _reserve_queue(st, st.php, i)):
        return NEED_SPACE
    t = users.queue.k1[u]
    _instance_clock(st, i, t, extended)
    inst.held[i] -= 1
    users.inst[u] = -1
    _user_next(users, u, USER_ISSUE, users.next[u])
    if _take_free(st, seg, i, t, False, True, extended):
        _rekey_resource(st, seg, r)
    return OK


@step
def _dispatched(st: Any, seg: Any, i: int, leastconn: bool) -> None:
    """The balancer sent a new connection to instance i (the head of the dispatch heap)."""
    if leastconn:
        st.inst.seq[i] = st.lb[1]
        seg.dispatch.k2[i] = st.lb[1]
        st.lb[1] += 1.0
    else:
        st.lb[0] = seg.dispatch.k1[i]
        st.inst.pos[i] += seg.step[i]
        seg.dispatch.k1[i] = st.inst.pos[i]
        _ih_down(seg.dispatch, 0)


@step
def _arrive(
    st: Any,
    seg: Any,
    cursor: Any,
    out: Any,
    nout: int,
    t: float,
    i: int,
    z: float,
    code: int,
    u: int,
    held: bool,
    extended: Any,
    leastconn: bool,
) -> tuple[int, int]:
    """A probe (``code`` < 0) or a request (of user ``u``, -1: an open-loop one) arrives at
    instance i at t: refused (output record ``nout``), served, waiting for a php-fpm child or
    for a worker. ``held``: it came on a kept-alive connection that holds a worker. Returns
    the status, ``NEED_SPACE`` (and nothing changed) when there is no room for it, and the
    records written."""
    ext = extended is not None
    inst = st.inst
    r = inst.res[i]
    busy = inst.active[i] + inst.held[i] if ext else inst.active[i]
    refuse = not held and inst.qlimit[i] >= 0 and busy + st.accept.n[i] >= inst.qlimit[i]
    serve = held or busy < inst.climit[i]
    to_php = (
        serve and ext and inst.apache[i] and _page_of(code) != 0 and inst.pact[i] >= inst.plimit[i]
    )
    if not refuse:
        if to_php:
            room = _reserve_queue(st, st.php, i)
        elif serve:
            room = st.res.n[r] < st.res.capn[r] or _reserve_job(st, r)
        else:
            room = st.accept.head[i] + st.accept.n[i] < st.accept.capn[i] or _reserve_queue(
                st, st.accept, i
            )
        if not room:
            return NEED_SPACE, nout
    # from here on the event is committed (the caller moves on past a probe or an open-loop
    # request)
    if u >= 0:
        cursor[SENT] += 1
        st.users.sent[u] += 1
        _user_next(st.users, u, USER_BUSY, np.inf)
    if code >= 0 and (code >> CONN_SHIFT) & 1:  # not on a kept-alive connection
        _dispatched(st, seg, i, leastconn)
    _instance_clock(st, i, t, extended)
    if held:
        inst.held[i] -= 1
    if refuse:
        inst.rej[i] += 1
        if code >= 0:
            nout = _record(out, nout, i, t, -1.0, z)
            if u >= 0:
                _user_thinks(st, u, t)
    elif to_php:
        inst.active[i] += 1  # it holds a worker and waits for a php-fpm child
        _queue_push(st, st.php, i, t, z, code)
    elif serve:
        inst.active[i] += 1
        if ext and inst.apache[i] and _page_of(code):
            inst.pact[i] += 1
        _admit(st, seg, t, code, t, z, extended)
        _rekey_resource(st, seg, r)
    else:
        _queue_push(st, st.accept, i, t, z, code)
    # a refused request changed the instance's sequence number, so it is re-keyed too; a probe
    # must not make an instance the balancer may not use (booting, removed) eligible
    if leastconn and seg.dispatch.k1[i] < np.inf:
        _rekey_instance(st, seg, i)
    return OK, nout


@step
def _picked(seg: Any) -> int:
    """The instance the balancer picks for a new connection (-1: none is eligible)."""
    if seg.dispatch.heap.size == 0:
        return -1
    i: int = seg.dispatch.heap[0]
    return i if seg.dispatch.k1[i] < np.inf else -1


@step
def _request_arrives(
    st: Any,
    seg: Any,
    sched: Any,
    k: int,
    cursor: Any,
    out: Any,
    nout: int,
    extended: Any,
    leastconn: bool,
) -> tuple[int, int]:
    """Open-loop request k goes to the instance the balancer picks."""
    t, z = sched.arrival_t[k], sched.arrival_size[k]
    i = _picked(seg)
    if i < 0:  # refused: no server is eligible
        return OK, _record(out, nout, -1, t, -1.0, z)
    page = sched.arrival_page[k] if extended is not None else 0
    code = i + (page << PAGE_SHIFT) + (1 << CONN_SHIFT)
    return _arrive(st, seg, cursor, out, nout, t, i, z, code, -1, False, extended, leastconn)


@step
def _user_sends(
    st: Any, seg: Any, cursor: Any, out: Any, nout: int, extended: Any, leastconn: bool
) -> tuple[int, int]:
    """The user at the head of the users' heap sends its next request: on its kept-alive
    connection while it is open, else to the instance the balancer picks."""
    users, draws = st.users, st.draws
    u = users.queue.heap[0]
    t = users.queue.k1[u]
    if cursor[SENT] == cursor[MAX_SENT]:  # the users have sent workload.max_requests: it stops
        _user_next(users, u, USER_DONE, np.inf)
        return OK, nout
    j = users.sent[u]
    if j == draws.size.shape[1]:
        cursor[NEEDY] = u
        return NEED_DRAWS, nout
    z = draws.size[u, j]
    pinned = users.inst[u] >= 0 and t <= users.until[u]
    i = users.inst[u] if pinned else _picked(seg)
    if i < 0:  # refused: no server is eligible
        cursor[SENT] += 1
        users.sent[u] += 1
        _user_thinks(st, u, t)
        return OK, _record(out, nout, -1, t, -1.0, z)
    code = i + (draws.page[u, j] << PAGE_SHIFT) + (u + 1) * USER_ONE
    if not pinned:
        code += 1 << CONN_SHIFT
    held = pinned and st.inst.hold[i]  # the connection holds a worker: it serves
    return _arrive(st, seg, cursor, out, nout, t, i, z, code, u, held, extended, leastconn)


# -- a segment ------------------------------------------------------------------------------------


@step
def _start_segment(st: Any, seg: Any, algo: int, extended: Any) -> None:
    """Each resource's per-job rate and next departure, each instance's stride step and
    balancer key, and the heaps over them, from the state as it stands."""
    res, inst = st.res, st.inst
    for r in range(res.n.size):
        seg.rate[r] = _rate(res, r, res.n[r], extended)
        seg.departures.k1[r] = _next_departure(st, r, seg.rate[r])
        seg.departures.k2[r] = r
    _ih_build(seg.departures)
    leastconn = algo == ALGO_LEASTCONN
    for i in range(inst.res.size):
        seg.step[i] = 1.0 / inst.weight[i] if algo == ALGO_WEIGHTED_RR else 1.0
        ok = inst.elig[i] and inst.weight[i] > 0.0
        if leastconn:
            seg.dispatch.k1[i] = (
                (inst.active[i] + st.accept.n[i] + 1.0) / inst.weight[i] if ok else np.inf
            )
            seg.dispatch.k2[i] = inst.seq[i]
        else:
            seg.dispatch.k1[i] = inst.pos[i] if ok else np.inf
            seg.dispatch.k2[i] = i
    _ih_build(seg.dispatch)


@step
def _end_segment(st: Any, seg: Any, t: float, extended: Any) -> None:
    """Bring every clock to t, so that changes made between segments apply from there."""
    res = st.res
    for r in range(res.n.size):
        _advance(res, r, t, seg.rate[r])
        res.tlast[r] = t
    for i in range(st.inst.res.size):
        _instance_clock(st, i, t, extended)


@compiled
def run_segment(
    t_end: float,
    algo: int,
    extended: Any,
    keepalive: bool,
    sched: Any,
    cursor: Any,
    st: Any,
    seg: Any,
    out: Any,
    probe_rt: Any,
) -> int:
    """Run from the current state ``st`` up to ``t_end``; returns ``OK``, or ``NEED_SPACE`` (a
    pool is full), ``NEED_DRAWS`` (closed-loop users need more requests drawn) or ``NEED_OUT``
    (the output records ``out`` are full), after which the caller makes room and calls again.

    ``cursor`` (``ARRIVAL``, ``PROBE``...) is updated in place so that a call after a status
    other than ``OK`` resumes exactly. ``seg`` is filled from the state as the call starts.
    Probe jobs are reported in ``probe_rt`` only: row 0 adds up the times of instance i's probes
    that completed, row 1 counts them.

    ``extended`` is None for a run with no apache instance, closed-loop user or per-job
    overhead: numba compiles a version of its own for that, in which every piece of the pools,
    the overhead and the users is left out (the open loop's hot path)."""
    ext = extended is not None
    leastconn = algo == ALGO_LEASTCONN
    _start_segment(st, seg, algo, extended)
    users = st.users.queue
    ia, ip, ic, nout = cursor[ARRIVAL], cursor[PROBE], cursor[CHANGE], cursor[WRITTEN]
    status = OK
    while status == OK:
        ta = sched.arrival_t[ia] if ia < sched.arrival_t.size else np.inf
        tp = sched.probe_t[ip] if ip < sched.probe_t.size else np.inf
        tc = sched.change_t[ic] if ic < sched.change_t.size else np.inf
        td = seg.departures.k1[seg.departures.heap[0]] if seg.rate.size > 0 else np.inf
        tu = users.k1[users.heap[0]] if ext and users.heap.size > 0 else np.inf
        tmin = min(min(ta, tp), min(min(tc, td), tu))
        if tmin >= t_end:
            break
        if td == tmin:
            status, nout = _complete(st, seg, out, nout, probe_rt, extended, keepalive, leastconn)
        elif tc == tmin:
            target = sched.change_target[ic]
            if target < 0:
                _set_capacity(st, seg, -target - 1, tc, sched.change_value[ic], extended)
            else:
                _set_slowdown(st, seg, target, tc, sched.change_value[ic])
            ic += 1
        elif tu == tmin and tp > tmin and st.users.state[users.heap[0]] == USER_EXPIRY:
            status = _keepalive_ends(st, seg, extended)
        elif ext and nout >= out.inst.size:
            status = NEED_OUT  # an arrival may need a record
        elif tp == tmin:  # a probe goes straight to its instance
            i = sched.probe_inst[ip]
            z = sched.probe_size[ip]
            status, nout = _arrive(
                st, seg, cursor, out, nout, tp, i, z, -i - 1, -1, False, extended, leastconn
            )
            if status == OK:
                ip += 1
        elif tu == tmin:
            status, nout = _user_sends(st, seg, cursor, out, nout, extended, leastconn)
        else:
            status, nout = _request_arrives(
                st, seg, sched, ia, cursor, out, nout, extended, leastconn
            )
            if status == OK:
                ia += 1
    cursor[ARRIVAL], cursor[PROBE], cursor[CHANGE], cursor[WRITTEN] = ia, ip, ic, nout
    if status == OK:
        _end_segment(st, seg, t_end, extended)
    return status


# -- what the caller changes between runs ---------------------------------------------------------


@compiled
def admit_waiting(st: Any, t: float) -> int:
    """Move waiting requests on where a raised limit now allows it: php waiters onto a free
    php-fpm child, the accept queue's head onto a free worker (and on to php-fpm's queue when
    it is a PHP page and no child is free)."""
    res, inst = st.res, st.inst
    for i in range(inst.res.size):
        r = inst.res[i]
        while True:
            if not _reserve_job(st, r):
                return NEED_SPACE
            if st.php.n[i] > 0 and inst.pact[i] < inst.plimit[i]:
                start, size, code = _queue_pop(st, st.php, i)
                inst.pact[i] += 1
                _enter_service(st, t, code, start, size, _rate(res, r, res.n[r], 1), 1)
                continue
            if st.accept.n[i] == 0 or inst.active[i] + inst.held[i] >= inst.climit[i]:
                break
            if not _reserve_queue(st, st.php, i):
                return NEED_SPACE
            start, size, code = _queue_pop(st, st.accept, i)
            inst.active[i] += 1
            php = inst.apache[i] and _page_of(code) != 0
            if php and inst.pact[i] >= inst.plimit[i]:
                _queue_push(st, st.php, i, start, size, code)
            else:
                if php:
                    inst.pact[i] += 1
                _enter_service(st, t, code, start, size, _rate(res, r, res.n[r], 1), 1)
    return OK


@compiled
def drop_instance(i: int, t: float, st: Any) -> int:
    """Abort every job of instance ``i`` (in service, waiting for a worker or a php-fpm
    child) and close its kept-alive connections; returns how many requests were aborted. A
    closed-loop user whose request is aborted thinks and sends its next one."""
    res, jobs, inst = st.res, st.jobs, st.inst
    r = inst.res[i]
    o = res.off[r]
    n = res.n[r]
    keep = 0
    aborted = 0
    for k in range(o, o + n):
        code = jobs.code[k]
        if _instance_of(code) != i:
            _jh_move(jobs, o + keep, k)
            keep += 1
        elif code >= 0:
            aborted += 1
            if code >= USER_ONE:
                _user_thinks(st, (code >> USER_SHIFT) - 1, t)
    for q in (st.accept, st.php):
        start = q.off[i] + q.head[i]
        for k in range(start, start + q.n[i]):
            aborted += 1
            code = st.waiting.code[k]
            if code >= USER_ONE:
                _user_thinks(st, (code >> USER_SHIFT) - 1, t)
        q.n[i] = 0
        q.head[i] = 0
    _close_connections(st, i, False)
    _serve_clock(inst, i, t, res.vtime[r], -inst.serving[i])
    res.n[r] = keep
    _jh_heapify(jobs, o, keep)
    if keep == 0:
        res.vtime[r] = 0.0
    inst.active[i] = 0
    inst.pact[i] = 0
    inst.held[i] = 0
    return aborted


@step
def _close_connections(st: Any, i: int, idle_only: bool) -> int:
    """Close instance i's kept-alive connections (with ``idle_only``, of users not done);
    returns how many. A user waiting for its connection to time out sends when its think
    ends."""
    users = st.users
    closed = 0
    for u in range(users.inst.size):
        if users.inst[u] == i and not (idle_only and users.state[u] == USER_DONE):
            users.inst[u] = -1
            closed += 1
            if users.state[u] == USER_EXPIRY:
                _user_next(users, u, USER_ISSUE, users.next[u])
    return closed


@compiled
def build_heap(h: Any) -> None:
    """Make the indexed heap ``h`` of every id from their keys."""
    _ih_build(h)


@compiled
def close_kept_alive(i: int, st: Any) -> int:
    """Close instance ``i``'s idle kept-alive connections (a graceful restart: the old children
    exit, ending them), freeing the workers they held; returns how many were closed. Each of
    those users sends its next request on a new connection, when its think ends."""
    closed = _close_connections(st, i, True)
    st.inst.held[i] = 0
    return closed


# -- what an interval's records add up to ---------------------------------------------------------


@allocating
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
def oldest_start(st: Any, out: Any) -> None:
    """Per instance into ``out``, the arrival time of its oldest request in service (probes
    left out) or at the head of its accept queue or php-fpm queue; ``inf`` for an instance that
    holds none."""
    res, jobs = st.res, st.jobs
    for i in range(out.size):
        out[i] = np.inf
    for r in range(res.n.size):
        o = res.off[r]
        for k in range(o, o + res.n[r]):
            code = jobs.code[k]
            if code >= 0:
                i = code & INST_MASK
                if jobs.start[k] < out[i]:
                    out[i] = jobs.start[k]
    for q in (st.accept, st.php):
        for i in range(out.size):
            if q.n[i] > 0 and st.waiting.start[q.off[i] + q.head[i]] < out[i]:
                out[i] = st.waiting.start[q.off[i] + q.head[i]]
