"""Arrival processes and video sessions against their targets (seeded; tolerances stated)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from quell.core.rng import component_rng
from quell.errors import InputError
from quell.scenario import parse_scenario
from quell.scenario.schedule import build_schedule
from quell.workload.arrival import Mmpp2, Poisson, Trace, index_of_dispersion
from quell.workload.schedule import RequestSchedule
from quell.workload.sessions import VideoFile, video_files, zipf_probabilities


@pytest.mark.parametrize("dispersion", [5.0, 20.0])
def test_mmpp2_mean_rate_and_index_of_dispersion(dispersion: float) -> None:
    # Fit by mean rate and asymptotic index of dispersion; windows of 20 s are far longer than
    # the modulating chain's time scale (< 0.1 s). Mean within 2 %, dispersion within 10 %.
    proc = Mmpp2.fit(100.0, dispersion)
    assert proc.mean_rate_rps == pytest.approx(100.0) and proc.dispersion == pytest.approx(
        dispersion
    )
    duration = 40_000.0
    times = proc.times(duration, component_rng(1, "test/mmpp"))
    assert times.size / duration == pytest.approx(100.0, rel=0.02)
    assert index_of_dispersion(times, 20.0) == pytest.approx(dispersion, rel=0.10)


def test_poisson_index_of_dispersion_is_one() -> None:
    times = Poisson(50.0).times(20_000.0, component_rng(2, "test/poisson"))
    assert times.size / 20_000.0 == pytest.approx(50.0, rel=0.01)
    assert index_of_dispersion(times, 10.0) == pytest.approx(1.0, rel=0.1)


def fit_zipf_alpha(counts: np.ndarray) -> float:
    """Maximum-likelihood α of a Zipf law over ranks 1..len(counts) from per-rank counts."""

    def nll(alpha: float) -> float:
        return -float(np.sum(counts * np.log(zipf_probabilities(counts.size, alpha))))

    res = minimize_scalar(nll, bounds=(0.01, 3.0), method="bounded")
    return float(res.x)


def test_video_sessions_zipf_and_pacing() -> None:
    s = parse_scenario(
        {
            "name": "video",
            "seed": 4,
            "duration_s": 4000,
            "hosts": [{"id": "h1", "link_mbit": 1000}],
            "instances": [{"id": "i1", "host": "h1"}],
            "files": [{"path": "/x", "size_bytes": 1}],
            "workload": {"arrival": {"process": "poisson", "rate_rps": 5}, "sessions": {}},
        }
    )
    sched = build_schedule(s, Path("."))
    paths = np.asarray(sched.paths)[sched.path_index]
    first = np.char.endswith(paths.astype(str), "/c0")
    videos = np.array([int(p.split("/")[1][1:]) for p in paths[first]])
    # one first chunk per session: ~ 5/s x 4000 s sessions, Poisson (within 3 %)
    assert videos.size == pytest.approx(20_000, rel=0.03)
    counts = np.bincount(videos, minlength=100)
    # Zipf α = 0.8 over 100 videos, fitted back by maximum likelihood: within ±0.03
    assert fit_zipf_alpha(counts) == pytest.approx(0.8, abs=0.03)
    # chunk sizes average ~0.5 MB; first three chunks at the session start, then every 10 s
    sizes = np.asarray(sched.sizes_bytes)
    assert sizes.mean() == pytest.approx(500_000, rel=0.1)
    t_first = sched.times_s[first][0]
    same = paths[np.isclose(sched.times_s, t_first)]
    vid = same[0].split("/")[1]
    chunks_at_start = [p for p in same if p.startswith(f"/{vid}/")]
    assert len(chunks_at_start) >= 3
    c3 = np.flatnonzero(paths == f"/{vid}/c3")
    c4 = np.flatnonzero(paths == f"/{vid}/c4")
    assert np.any(np.isclose(sched.times_s[c3], t_first + 10.0))
    assert np.any(np.isclose(sched.times_s[c4], t_first + 20.0))


def test_video_files_group_chunk_paths_by_video_with_the_video_chunk_size() -> None:
    paths = ["/v3/c0", "/v0/c2", "/v3/c1", "/v0/c0"]
    sizes = [700, 250, 700, 250]
    assert video_files(paths, sizes) == [
        VideoFile("/v0/chunk.bin", 250, ("/v0/c2", "/v0/c0")),
        VideoFile("/v3/chunk.bin", 700, ("/v3/c0", "/v3/c1")),
    ]
    with pytest.raises(ValueError, match="video 0 has chunks of 250 and 300 bytes"):
        video_files(["/v0/c0", "/v0/c1"], [250, 300])
    with pytest.raises(ValueError, match="not a video chunk path"):
        video_files(["/f100k.bin"], [1])


def test_a_catalog_seed_fixes_the_videos_whatever_the_scenario_seed() -> None:
    def schedule(seed: int, catalog_seed: int | None) -> RequestSchedule:
        sessions: dict[str, object] = {"videos": 20, "mean_video_bytes": 2_000_000}
        if catalog_seed is not None:
            sessions["catalog_seed"] = catalog_seed
        s = parse_scenario(
            {
                "name": "video",
                "seed": seed,
                "duration_s": 600,
                "hosts": [{"id": "h1"}],
                "instances": [{"id": "i1", "host": "h1"}],
                "files": [{"path": "/x", "size_bytes": 1}],
                "workload": {
                    "arrival": {"process": "poisson", "rate_rps": 2},
                    "sessions": sessions,
                },
            }
        )
        return build_schedule(s, Path("."))

    def sizes(sched: RequestSchedule) -> dict[str, int]:
        return {v.path: v.size_bytes for v in video_files(sched.paths, sched.sizes_bytes)}

    a, b = schedule(1, 7), schedule(2, 7)
    assert not np.array_equal(a.times_s[:50], b.times_s[:50])  # own sessions
    shared = sizes(a).keys() & sizes(b).keys()
    assert len(shared) >= 10
    assert all(sizes(a)[p] == sizes(b)[p] for p in shared)  # same videos
    # without it, each scenario seed draws its own library
    c, d = sizes(schedule(1, None)), sizes(schedule(2, None))
    assert any(c[p] != d[p] for p in c.keys() & d.keys())


def test_a_trace_names_every_line_that_is_no_time(tmp_path: Path) -> None:
    """nan, inf and text are refused (nan and inf were read as times, and the run went on)."""
    path = tmp_path / "arrivals.txt"
    path.write_text("# t_s\n0.5\nnan\n1.0, GET /a\ninf\n1.5 s\n" + "x\n" * 12 + "2.0\n")
    with pytest.raises(InputError) as info:
        Trace.from_file(path)
    assert info.value.source == str(path)
    assert [str(p) for p in info.value.problems[:4]] == [
        "line 3: not a time in seconds: 'nan'",
        "line 5: not a time in seconds: 'inf'",
        "line 6: not a time in seconds: '1.5 s'",
        "line 7: not a time in seconds: 'x'",
    ]
    assert len(info.value.problems) == 11
    assert str(info.value.problems[-1]) == "5 more lines are not times in seconds"
    path.write_text("0.5\n1.0, GET /a\n2\n")
    assert Trace.from_file(path, 2.0).arrivals_s == (0.5, 1.0, 2.0)
