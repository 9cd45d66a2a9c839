"""The clamscan neighbour's data set and database, and clamav really scanning them: the files
as specified and the same for the same seed, a clean scan exits 0, and a file holding the
database's marker is found (so clamscan loaded the database the lab wrote, offline)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from quell.lab.antagonists import SIGNATURE_NAME, clamscan_argv, write_clamscan_data
from quell.scenario.model import ClamScan

ANT = ClamScan(kind="clamscan", id="clam", host="h1", data_mb=4, files=200)


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(root)).encode() + f.read_bytes())
    return h.hexdigest()


def test_the_data_set_is_as_specified_and_seeded(tmp_path: Path) -> None:
    write_clamscan_data(ANT, tmp_path / "a", seed=5)
    write_clamscan_data(ANT, tmp_path / "b", seed=5)
    write_clamscan_data(ANT, tmp_path / "c", seed=6)
    data = tmp_path / "a" / "data"
    counts = {d.name: len(list(d.iterdir())) for d in data.iterdir()}
    assert counts == {"large": 2, "gzip": 10, "text": 40, "small": 148}
    raw = sum(f.stat().st_size for d in ("large", "text", "small") for f in (data / d).iterdir())
    assert (4 << 20) * 0.85 <= raw <= 4 << 20  # the gzip tenth is compressed
    assert digest(tmp_path / "a") == digest(tmp_path / "b") != digest(tmp_path / "c")


def test_clamscan_loads_the_database_and_finds_only_the_planted_marker(tmp_path: Path) -> None:
    db = write_clamscan_data(ANT, tmp_path, seed=5)
    clean = subprocess.run(clamscan_argv(tmp_path, 60), capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    marker = bytes.fromhex(db.read_text().split(":")[3].strip())
    (tmp_path / "data" / "small" / "planted").write_bytes(b"x" * 100 + marker + b"y" * 100)
    found = subprocess.run(clamscan_argv(tmp_path, 60), capture_output=True, text=True)
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"planted: {SIGNATURE_NAME}.UNOFFICIAL FOUND" in found.stdout
