"""PRIMA's video-streaming sessions (Table I of the PRIMA paper).

Sessions arrive by the workload's arrival process (Poisson in the paper). Each session watches
one video drawn from a Zipf(α) popularity over ``videos`` videos; a video of mean size
``mean_video_bytes`` is cut into chunks of about ``mean_chunk_bytes`` (10 s of play each). The
first ``prefetch_chunks`` are requested at once (filling the buffer), then one chunk every
``chunk_seconds`` (pacing). Requests are open loop: the schedule does not wait for responses.
Paths are ``/v{video}/c{chunk}``; every chunk of a video has the video's chunk size, so the lab
serves each video from one file (``video_files``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.workload.arrival import build_arrival
from quell.workload.schedule import RequestSchedule

if TYPE_CHECKING:
    from quell.workload.spec import ArrivalSpec, SessionSpec

VIDEO_SIZE_SIGMA = 0.5
"""Spread (σ of log size) of video sizes around their mean."""
CHUNK_PATH = re.compile(r"^/v(\d+)/c(\d+)$")
"""The path of chunk ``c`` of video ``v``: ``/v{v}/c{c}``."""
VIDEO_FILE = "chunk.bin"
"""Name of the one file per video directory that every chunk path of that video shares."""


@dataclass(frozen=True)
class VideoFile:
    """What a server needs to serve one video's chunks: a file of the video's chunk size and
    the chunk paths (all alike in size) that stand for it."""

    path: str
    size_bytes: int
    chunk_paths: tuple[str, ...]


def video_files(paths: Sequence[str], sizes_bytes: Sequence[int]) -> list[VideoFile]:
    """Group a video schedule's chunk paths by video: one file per video, in video order.

    Every chunk of a video has the same size, so a server can answer each chunk path with the
    video's one file (the lab links the chunk paths to it)."""
    chunks: dict[int, list[str]] = {}
    size_of: dict[int, int] = {}
    for path, size in zip(paths, sizes_bytes, strict=True):
        m = CHUNK_PATH.match(path)
        if m is None:
            raise ValueError(f"{path!r} is not a video chunk path (/v<video>/c<chunk>)")
        v = int(m.group(1))
        if size_of.setdefault(v, size) != size:
            raise ValueError(f"video {v} has chunks of {size_of[v]} and {size} bytes")
        chunks.setdefault(v, []).append(path)
    return [VideoFile(f"/v{v}/{VIDEO_FILE}", size_of[v], tuple(chunks[v])) for v in sorted(chunks)]


def zipf_probabilities(videos: int, alpha: float) -> NDArray[np.float64]:
    """P(video of rank k) ∝ k^-α for k = 1..videos."""
    w = np.arange(1, videos + 1, dtype=np.float64) ** -alpha
    return np.asarray(w / w.sum(), dtype=np.float64)


def video_chunks(
    videos: int, mean_video_bytes: float, mean_chunk_bytes: float, rng: np.random.Generator
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Chunk count and chunk size of each video (lognormal video sizes with the given mean)."""
    size = mean_video_bytes * np.exp(
        VIDEO_SIZE_SIGMA * rng.standard_normal(videos) - VIDEO_SIZE_SIGMA**2 / 2.0
    )
    n_chunks = np.maximum(1, np.round(size / mean_chunk_bytes)).astype(np.int64)
    return n_chunks, size / n_chunks


def video_schedule(
    spec: SessionSpec, arrival: ArrivalSpec, duration_s: float, seed: int, base_dir: Path
) -> RequestSchedule:
    """Every chunk request of sessions starting by ``arrival`` over ``duration_s``."""
    catalog = seed if spec.catalog_seed is None else spec.catalog_seed
    starts = build_arrival(arrival, base_dir).times(
        duration_s, component_rng(seed, "workload/sessions")
    )
    n_chunks, chunk_bytes = video_chunks(
        spec.videos,
        spec.mean_video_bytes,
        spec.mean_chunk_bytes,
        component_rng(catalog, "workload/videos"),
    )
    video = component_rng(seed, "workload/popularity").choice(
        spec.videos, size=starts.size, p=zipf_probabilities(spec.videos, spec.zipf_alpha)
    )
    per_session = n_chunks[video]
    first = np.cumsum(per_session) - per_session
    chunk = np.arange(int(per_session.sum())) - np.repeat(first, per_session)
    session_start = np.repeat(starts, per_session)
    paced = np.maximum(chunk - spec.prefetch_chunks + 1, 0)
    times = session_start + paced * spec.chunk_seconds
    vid = np.repeat(video, per_session)
    keep = times < duration_s
    times, vid, chunk = times[keep], vid[keep], chunk[keep]
    order = np.argsort(times, kind="stable")
    times, vid, chunk = times[order], vid[order], chunk[order]
    # one path per (video, chunk) that occurs in the schedule
    offsets = np.concatenate([[0], np.cumsum(n_chunks)[:-1]])
    flat = offsets[vid] + chunk
    used, path_index = np.unique(flat, return_inverse=True)
    owner = np.searchsorted(offsets, used, side="right") - 1
    paths = tuple(
        f"/v{int(v)}/c{int(c)}" for v, c in zip(owner, used - offsets[owner], strict=True)
    )
    sizes = tuple(round(float(b)) for b in chunk_bytes[owner])
    return RequestSchedule(times, path_index.astype(np.int32), paths, sizes)
