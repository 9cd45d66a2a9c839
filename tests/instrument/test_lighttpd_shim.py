"""The lighttpd shim's request parser (the class is the path without its query; the id an
X-Request-Id header, else a rid= query parameter, else -1), called through ctypes: a ctypes
load of the shim interposes nothing, only LD_PRELOAD does. The shim on a real lighttpd is
tests/lab/test_instrument_lab.py."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest


def parse(shim: Path, request: bytes, cls_bytes: int = 48) -> tuple[int, str, int]:
    lib = ctypes.CDLL(str(shim))
    fn = lib.quell_http_parse
    fn.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_int64),
    ]
    fn.restype = ctypes.c_int
    cls = ctypes.create_string_buffer(cls_bytes)
    rid = ctypes.c_int64(7)
    rc = fn(request, len(request), cls, cls_bytes, ctypes.byref(rid))
    return rc, cls.value.decode(), rid.value


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n", (0, "/index.html", -1)),
        (b"GET /a/b.php?rid=42&x=1 HTTP/1.1\r\nHost: x\r\n\r\n", (0, "/a/b.php", 42)),
        (b"GET /a?x=1&rid=9 HTTP/1.1\r\n\r\n", (0, "/a", 9)),
        (b"GET /a?grid=5 HTTP/1.1\r\n\r\n", (0, "/a", -1)),  # not a rid= parameter
        (b"GET /a?rid=3 HTTP/1.1\r\nx-request-id: 1234\r\n\r\n", (0, "/a", 1234)),
        (b"GET /v HTTP/1.1\r\nHost: x\r\nX-Request-Id:   77\r\n\r\n", (0, "/v", 77)),
        (b"GET /v HTTP/1.1\r\nX-Request-Id: abc\r\n\r\n", (0, "/v", -1)),
        (b"GET /v HTTP/1.1\r\nX-Request-Idx: 5\r\n\r\n", (0, "/v", -1)),
        (b"POST /upload HTTP/1.1\r\nX-Request-Id: 8", (0, "/upload", 8)),  # cut short
        (b"GET", (-1, "", -1)),
        (b"", (-1, "", -1)),
    ],
)
def test_the_request_line_and_headers_name_the_request(
    shim_path: Path, request_bytes: bytes, expected: tuple[int, str, int]
) -> None:
    assert parse(shim_path, request_bytes) == expected


def test_a_long_path_is_cut_to_the_record_s_class(shim_path: Path) -> None:
    path = "/" + "p" * 100
    rc, cls, rid = parse(shim_path, f"GET {path}?rid=1 HTTP/1.1\r\n\r\n".encode())
    assert (rc, cls, rid) == (0, path[:47], 1)
