"""The eBPF run-queue split's decoding, hierarchy choice, id-to-path walk and probe: no root and
no kernel program needed (raw map bytes are packed with the layouts of rqwait.h)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from quell.instrument import bpf
from quell.instrument.bpf.records import KEY, OVERFLOW_CG, OVERFLOW_PATH, VALUE


def entry(
    tid: int, culprit: int, wait_ns: int, waits: int, victim: int, **kw: int
) -> tuple[bytes, bytes]:
    return KEY.pack(tid, 0, culprit), VALUE.pack(
        wait_ns,
        waits,
        victim,
        kw.get("migrated", 0),
        kw.get("preemptions", 0),
        kw.get("tgid", tid),
        0,
    )


def test_the_layouts_match_rqwait_h() -> None:
    # struct rq_key: u32 tid, u32 pad, u64 culprit_cg; struct rq_val: five u64, two u32
    assert KEY.size == 16
    assert VALUE.size == 48
    assert struct.calcsize("<iI") == bpf.records.CONFIG.size == 8


def test_wait_is_split_into_own_and_other_cgroups_per_thread() -> None:
    entries = [
        entry(101, 7, 2_000, 4, 7, tgid=100),
        entry(101, 9, 30_000, 3, 7, preemptions=5, migrated=1, tgid=100),
        entry(101, 11, 5_000, 1, 7, preemptions=2, tgid=100),
        entry(102, OVERFLOW_CG, 400, 1, 7, tgid=100),
        entry(101, 12, 0, 0, 7, preemptions=1, tgid=100),  # a preemption that left no wait
    ]
    splits = bpf.decode(entries, {7: "/victim", 9: "/noisy", 11: "/other"})
    assert [s.tid for s in splits] == [101, 102]
    a, b = splits
    assert (a.tgid, a.cgroup_id, a.cgroup_path) == (100, 7, "/victim")
    assert (a.wait_ns, a.own_wait_ns, a.other_wait_ns) == (37_000, 2_000, 35_000)
    assert a.preemptions_by_others == 8
    assert a.migrated_waits == 1
    assert [(c.cgroup_path, c.wait_ns, c.own) for c in a.culprits] == [
        ("/noisy", 30_000, False),
        ("/other", 5_000, False),
        ("/victim", 2_000, True),
        (None, 0, False),  # id 12 is not in the tree: no path, still counted
    ]
    assert (b.own_wait_ns, b.other_wait_ns) == (0, 400)
    assert b.culprits[0].cgroup_path == OVERFLOW_PATH
    doc = a.to_json()
    assert doc["other_wait_seconds"] == 35e-6
    assert doc["culprits"][0] == {  # type: ignore[index]
        "cgroup": "/noisy",
        "cgroup_id": 9,
        "own": False,
        "wait_seconds": 30e-6,
        "waits": 3,
        "migrated_waits": 1,
        "preemptions": 5,
    }


def test_no_entries_no_threads() -> None:
    assert bpf.decode([]) == []


def test_the_v1_cpu_hierarchy_is_preferred_over_cgroup2() -> None:
    hybrid = "\n".join(
        [
            "tmpfs /sys/fs/cgroup tmpfs ro,nosuid 0 0",
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nsdelegate 0 0",
            "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0",
            "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0",
        ]
    )
    assert bpf.cgroup_layout(hybrid) == bpf.CgroupLayout(False, Path("/sys/fs/cgroup/cpu,cpuacct"))
    pure_v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\nproc /proc proc rw 0 0"
    assert bpf.cgroup_layout(pure_v2) == bpf.CgroupLayout(True, Path("/sys/fs/cgroup"))
    # cpuacct alone is not the cpu controller
    only_acct = "cgroup /sys/fs/cgroup/cpuacct cgroup rw,cpuacct 0 0"
    assert bpf.cgroup_layout(only_acct) is None


def test_ids_resolve_to_paths_by_inode_on_a_fixture_tree(tmp_path: Path) -> None:
    root = tmp_path / "cpu"
    (root / "svc" / "web").mkdir(parents=True)
    (root / "noisy").mkdir()
    (root / "tasks").write_text("")  # files are not groups
    paths = bpf.cgroup_paths(root)
    assert paths == {
        os.stat(root).st_ino: "/",
        os.stat(root / "svc").st_ino: "/svc",
        os.stat(root / "svc" / "web").st_ino: "/svc/web",
        os.stat(root / "noisy").st_ino: "/noisy",
    }
    assert bpf.cgroup_paths(tmp_path / "absent") == {}


def test_cgroup_of_a_process_reads_its_hierarchy_line(tmp_path: Path) -> None:
    from quell.instrument.bpf.cgroups import cgroup_of

    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text("12:cpuset:/\n4:cpu,cpuacct:/svc/web\n0::/user.slice\n")
    v1 = bpf.CgroupLayout(False, Path("/x"))
    v2 = bpf.CgroupLayout(True, Path("/x"))
    assert cgroup_of(42, v1, proc=tmp_path) == "/svc/web"
    assert cgroup_of(42, v2, proc=tmp_path) == "/user.slice"
    assert cgroup_of(43, v1, proc=tmp_path) is None


def test_probe_says_the_program_is_not_built(tmp_path: Path) -> None:
    missing = tmp_path / "rqwait.bpf.o"
    result = bpf.probe(obj=missing, euid=lambda: 0)
    assert not result.ok
    assert result.reason is not None
    assert str(missing) in result.reason
    assert "make native" in result.reason


def test_probe_says_btf_root_and_libbpf_are_missing(tmp_path: Path) -> None:
    obj = tmp_path / "rqwait.bpf.o"
    obj.write_bytes(b"\x7fELF")
    no_btf = bpf.probe(obj=obj, btf=tmp_path / "vmlinux", euid=lambda: 0)
    assert not no_btf.ok and "BTF" in (no_btf.reason or "")
    btf = tmp_path / "btf"
    btf.write_bytes(b"")
    not_root = bpf.probe(obj=obj, btf=btf, euid=lambda: 1000)
    assert not not_root.ok and "root" in (not_root.reason or "")
    no_lib = bpf.probe(obj=obj, btf=btf, euid=lambda: 0, libbpf="libquell-no-such-bpf.so.9")
    assert not no_lib.ok and "libbpf is not installed" in (no_lib.reason or "")


def test_probe_reports_libbpf_s_refusal_of_a_broken_object(tmp_path: Path) -> None:
    import ctypes

    ctypes.CDLL("libbpf.so.1")  # make test installs it (libbpf-dev): missing is a failure
    obj = tmp_path / "rqwait.bpf.o"
    obj.write_bytes(b"\x7fELF not an object")
    btf = tmp_path / "btf"
    btf.write_bytes(b"")
    result = bpf.probe(obj=obj, btf=btf, euid=lambda: 0)
    assert not result.ok
    assert f"opening {obj} failed" in (result.reason or "")
    assert "libbpf:" in (result.reason or "")  # libbpf's own words come along
