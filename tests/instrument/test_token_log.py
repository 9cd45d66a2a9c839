"""The per-thread logs: what the library writes and what quell.instrument.log reads, with exact
values from a recorded fixture (tests/fixtures/instrument/record_fixture.py) and every kind of
damaged file refused with its name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from quell.instrument import token as qt
from quell.instrument.log import (
    COLUMNS,
    HEADER_BYTES,
    RECORD_BYTES,
    LogError,
    read_log,
    read_records,
    write_records,
)
from tests.instrument.conftest import in_thread

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instrument" / "qtlog"
FIRST = FIXTURE / "quell-13898-13899-0.qtlog"


def test_the_recorded_fixture_reads_exactly() -> None:
    df = read_records(FIXTURE)
    assert tuple(df.columns) == COLUMNS
    assert len(df) == 10
    assert df["request_id"].tolist() == [101, 102, 103, -1, 105, 201, 202, 203, -1, 205]
    long = "/a/very/long/path/that/is/longer/than/forty-sev"  # kept to 47 bytes
    assert df["request_class"].tolist() == ["/sleep", "/spin", "/yielded", "", long] * 2
    assert df["thread_id"].tolist() == [13899] * 5 + [13900] * 5
    first = df.iloc[0]
    assert first["start_ns"] == 22956371118163 and first["end_ns"] == 22956384092133
    assert (first["wall_ns"], first["cpu_ns"], first["runq_wait_ns"]) == (12973970, 71056, 2831035)
    assert (first["timeslices"], first["vol_cs"], first["invol_cs"]) == (1, 1, 0)
    yielded = df.iloc[2]
    assert (yielded["cpu_ns"], yielded["yields"], yielded["wall_ns"]) == (4036004, 1, 12779251)
    spin2 = df.iloc[6]
    assert (spin2["cpu_ns"], spin2["runq_wait_ns"], spin2["invol_cs"]) == (5044144, 6620663, 3)
    assert (df["wall_ns"] == df["end_ns"] - df["start_ns"]).all()
    assert all(df[c].dtype == np.int64 for c in COLUMNS if c != "request_class")
    assert "runq_wait_other_cgroup_ns" not in df.columns  # no eBPF part in this recording


def test_one_file_and_the_roll_over() -> None:
    # four records per file in the recording: each thread's fifth request went to a second file
    assert len(read_log(FIRST)) == 4
    assert len(read_records(FIXTURE / "quell-13898-13899-1.qtlog")) == 1


def test_an_empty_directory_is_an_empty_table(tmp_path: Path) -> None:
    df = read_records(tmp_path)
    assert tuple(df.columns) == COLUMNS and len(df) == 0


def test_the_gzip_table_round_trips(tmp_path: Path) -> None:
    df = read_records(FIXTURE)
    write_records(df, tmp_path / "requests.csv.gz")
    back = read_records(tmp_path / "requests.csv.gz")
    pd.testing.assert_frame_equal(back, df)
    pd.testing.assert_frame_equal(read_records(tmp_path), df)  # a run directory holding it


def _damaged(tmp_path: Path, edit: object) -> Path:
    raw = bytearray(FIRST.read_bytes())
    assert callable(edit)
    out = tmp_path / "damaged.qtlog"
    out.write_bytes(bytes(edit(raw)))
    return out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b[:40], "truncated: 40 bytes, shorter than the 64-byte header"),
        (lambda b: b"NOTALOG!" + b[8:], "not a quelltoken log"),
        (lambda b: b[:8] + (9).to_bytes(4, "little") + b[12:], "log version 9"),
        (lambda b: b[:12] + (128).to_bytes(4, "little") + b[16:], "records of 128 bytes"),
        (lambda b: b[:40] + (5).to_bytes(8, "little") + b[48:], "5 records written, room for 4"),
        (lambda b: b[: HEADER_BYTES + 3 * RECORD_BYTES + 10], "truncated: 554 bytes, 704 needed"),
        # record 1's end before its start
        (
            lambda b: (
                b[: HEADER_BYTES + RECORD_BYTES + 24]
                + (1).to_bytes(8, "little")
                + b[HEADER_BYTES + RECORD_BYTES + 32 :]
            ),
            "corrupt record 1 of 4",
        ),
    ],
)
def test_a_damaged_log_is_refused_naming_the_file(
    tmp_path: Path, edit: object, message: str
) -> None:
    bad = _damaged(tmp_path, edit)
    with pytest.raises(LogError, match=message) as info:
        read_records(bad)
    assert info.value.path == bad and str(bad) in str(info.value)
    # and through a directory, the same file is named
    shutil.copy(FIRST, tmp_path / "good.qtlog")
    with pytest.raises(LogError) as info:
        read_records(tmp_path)
    assert info.value.path == bad


def test_a_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="no such file"):
        read_records(tmp_path / "nothing.qtlog")


def test_the_library_writes_what_the_reader_reads(
    lib: qt.TokenLibrary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(qt.LOG_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(qt.LOG_RECORDS_ENV, "3")

    def run() -> tuple[list[qt.Reading], Path | None]:
        seen = []
        for i in range(7):
            with qt.token(1000 + i, f"/c{i % 2}", library=lib) as t:
                pass
            seen.append(t.read())
        path = lib.log_path()
        lib.log_close()
        return seen, path

    seen, path = in_thread(run)
    assert path is not None and path.parent == tmp_path
    files = sorted(tmp_path.glob("*.qtlog"))
    assert len(files) == 3  # 3 + 3 + 1 records
    df = read_records(tmp_path)
    assert df["request_id"].tolist() == list(range(1000, 1007))
    assert df["request_class"].tolist() == ["/c0", "/c1"] * 3 + ["/c0"]
    for r, (_, row) in zip(seen, df.iterrows(), strict=True):
        assert (row["start_ns"], row["end_ns"], row["cpu_ns"], row["thread_id"]) == (
            r.start_ns,
            r.end_ns,
            r.cpu_ns,
            r.thread_id,
        )


def test_without_the_directory_nothing_is_written(
    lib: qt.TokenLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(qt.LOG_DIR_ENV, raising=False)

    def run() -> Path | None:
        with qt.token(1, "/x", library=lib):
            pass
        return lib.log_path()

    assert in_thread(run) is None


def test_the_directory_named_at_load_survives_a_cleared_environment(
    lib_path: Path, tmp_path: Path
) -> None:
    """php-fpm clears its workers' environment (clear_env) after the library was loaded."""
    code = (
        "import ctypes, os, sys\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "lib.qt_start.restype = ctypes.c_int64\n"
        "lib.qt_start.argtypes = [ctypes.c_int64, ctypes.c_char_p]\n"
        "lib.qt_end.argtypes = [ctypes.c_int64]\n"
        "os.environ.clear()\n"
        "lib.qt_end(lib.qt_start(31, b'/cleared'))\n"
    )
    env = {**os.environ, qt.LOG_DIR_ENV: str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(lib_path)], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    df = read_records(tmp_path)
    assert df["request_id"].tolist() == [31] and df["request_class"].tolist() == ["/cleared"]
