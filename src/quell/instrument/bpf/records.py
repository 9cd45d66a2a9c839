"""The run-queue split's maps decoded into plain records (layouts from ``rqwait.h``).

The ``waits`` map holds one entry per (thread, culprit cgroup): the run-queue wait charged to
that cgroup, the waits it took part in, those that ended on another CPU, and the preemptions of
the thread by a task of that cgroup. :func:`decode` turns raw key/value bytes into one
:class:`ThreadSplit` per thread, own cgroup apart from the others."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

KEY = struct.Struct("<IIQ")  # struct rq_key: tid, pad, culprit_cg
VALUE = struct.Struct(
    "<5QII"
)  # struct rq_val: wait_ns waits victim_cg migrated preemptions tgid pad
CONFIG = struct.Struct("<iI")  # struct rq_config: use_cgroup_v2, target_tgid
OVERFLOW_CG = 2**64 - 1  # RQ_OVERFLOW_CG: a CPU saw more cgroups than it has slots
OVERFLOW_PATH = "(more cgroups than the per-CPU slots)"


@dataclass(frozen=True)
class CulpritWait:
    """The wait one thread spent behind the tasks of one cgroup, and their preemptions of it."""

    cgroup_id: int
    cgroup_path: str | None
    own: bool
    wait_ns: int
    waits: int
    migrated_waits: int
    preemptions: int


@dataclass(frozen=True)
class ThreadSplit:
    """One thread's run-queue wait, split between its own cgroup and the others."""

    tid: int
    tgid: int
    cgroup_id: int
    cgroup_path: str | None
    wait_ns: int
    own_wait_ns: int
    other_wait_ns: int
    migrated_waits: int
    preemptions_by_others: int
    culprits: tuple[CulpritWait, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "tid": self.tid,
            "tgid": self.tgid,
            "cgroup": self.cgroup_path,
            "cgroup_id": self.cgroup_id,
            "wait_seconds": self.wait_ns / 1e9,
            "own_wait_seconds": self.own_wait_ns / 1e9,
            "other_wait_seconds": self.other_wait_ns / 1e9,
            "migrated_waits": self.migrated_waits,
            "preemptions_by_others": self.preemptions_by_others,
            "culprits": [
                {
                    "cgroup": c.cgroup_path,
                    "cgroup_id": c.cgroup_id,
                    "own": c.own,
                    "wait_seconds": c.wait_ns / 1e9,
                    "waits": c.waits,
                    "migrated_waits": c.migrated_waits,
                    "preemptions": c.preemptions,
                }
                for c in self.culprits
            ],
        }


def _path(cg: int, paths: Mapping[int, str]) -> str | None:
    return OVERFLOW_PATH if cg == OVERFLOW_CG else paths.get(cg)


def decode(
    entries: Iterable[tuple[bytes, bytes]], paths: Mapping[int, str] | None = None
) -> list[ThreadSplit]:
    """Raw ``waits`` entries to one record per thread (by tid), culprits by wait, largest first;
    ``paths`` names cgroup ids (:func:`quell.instrument.bpf.cgroups.cgroup_paths`)."""
    names = paths or {}
    by_tid: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    for key, value in entries:
        tid, _pad, culprit = KEY.unpack(key[: KEY.size])
        by_tid.setdefault(tid, []).append((culprit, VALUE.unpack(value[: VALUE.size])))
    out = []
    for tid in sorted(by_tid):
        rows = by_tid[tid]
        victim = rows[0][1][2]
        tgid = rows[0][1][5]
        culprits = tuple(
            sorted(
                (
                    CulpritWait(
                        cgroup_id=cg,
                        cgroup_path=_path(cg, names),
                        own=cg == v[2],
                        wait_ns=v[0],
                        waits=v[1],
                        migrated_waits=v[3],
                        preemptions=v[4],
                    )
                    for cg, v in rows
                ),
                key=lambda c: (-c.wait_ns, c.cgroup_id),
            )
        )
        own = sum(c.wait_ns for c in culprits if c.own)
        other = sum(c.wait_ns for c in culprits if not c.own)
        out.append(
            ThreadSplit(
                tid=tid,
                tgid=tgid,
                cgroup_id=victim,
                cgroup_path=_path(victim, names),
                wait_ns=own + other,
                own_wait_ns=own,
                other_wait_ns=other,
                migrated_waits=sum(c.migrated_waits for c in culprits),
                preemptions_by_others=sum(c.preemptions for c in culprits if not c.own),
                culprits=culprits,
            )
        )
    return out
