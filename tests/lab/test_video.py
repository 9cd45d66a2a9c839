"""The video-streaming workload in the lab: every chunk path the schedule asks for is served,
at its video's chunk size, by lighttpd and by nginx."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from quell.lab.servers import write_video_docroot
from quell.scenario import parse_scenario
from quell.scenario.schedule import build_schedule
from quell.store.run import RunStore
from quell.workload.sessions import video_files
from tests.lab.leftovers import run_clean

SCENARIO = {
    "name": "video",
    "seed": 9,
    "duration_s": 8,
    "hosts": [{"id": "h1", "link_mbit": 100}],
    "instances": [
        {"id": "lt", "host": "h1", "server": "lighttpd"},
        {"id": "ng", "host": "h1", "server": "nginx"},
    ],
    "files": [{"path": "/x.bin", "size_bytes": 1000}],
    "workload": {
        "arrival": {"process": "poisson", "rate_rps": 2.5},
        "sessions": {
            "videos": 6,
            "chunk_seconds": 0.5,
            "mean_chunk_bytes": 30_000,
            "mean_video_bytes": 150_000,
            "prefetch_chunks": 2,
        },
    },
}


def test_video_docroot_has_one_file_per_video_and_a_link_per_chunk(tmp_path: Path) -> None:
    sched = build_schedule(parse_scenario(SCENARIO))
    videos = video_files(sched.paths, sched.sizes_bytes)
    assert len({v.size_bytes for v in videos}) == len(videos) > 1  # sizes differ by video
    n = write_video_docroot(tmp_path, sched.paths, sched.sizes_bytes, seed=9)
    assert n == len(videos)
    for v in videos:
        data = tmp_path / v.path.lstrip("/")
        assert data.stat().st_size == v.size_bytes
        assert data.stat().st_nlink == 1 + len(v.chunk_paths)
        for chunk in v.chunk_paths:
            assert os.path.samefile(data, tmp_path / chunk.lstrip("/"))
    served = {c for v in videos for c in v.chunk_paths}
    assert served == set(sched.paths)


@pytest.mark.lab
def test_lab_serves_every_chunk_at_its_size_from_lighttpd_and_nginx(tmp_path: Path) -> None:
    scenario = parse_scenario(SCENARIO)
    sched = build_schedule(scenario)
    run_dir = run_clean(scenario, tmp_path)
    with RunStore.open(run_dir) as store:
        req = store.request_arrays()
    # every scheduled chunk request was sent once and answered 200 by one of the two servers
    assert req["status"].size == len(sched) >= 30
    assert (req["status"] == 200).all(), np.unique(req["status"], return_counts=True)
    assert set(req["server"].tolist()) == {"lt", "ng"}
    # in send order, each response carried its own chunk's size (sizes differ by video)
    assert req["bytes"].tolist() == sched.size_bytes.tolist()
