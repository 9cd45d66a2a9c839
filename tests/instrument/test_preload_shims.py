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


# -- php-fpm: the FastCGI request ---------------------------------------------------------------


def _pairs(params: dict[str, str]) -> bytes:
    out = b""
    for k, v in params.items():
        for n in (len(k), len(v)):
            out += bytes([n]) if n < 128 else (n | 0x80000000).to_bytes(4, "big")
        out += k.encode() + v.encode()
    return out


def _record(kind: int, content: bytes, padding: int = 0) -> bytes:
    head = bytes([1, kind, 0, 1, len(content) >> 8, len(content) & 0xFF, padding, 0])
    return head + content + b"\0" * padding


def fcgi_request(params: dict[str, str], split: int = 2) -> bytes:
    """BEGIN_REQUEST, the PARAMS in ``split`` records, the empty PARAMS, an empty STDIN."""
    items = list(params.items())
    chunks = [dict(items[i::split]) for i in range(split)]
    body = _record(1, bytes([0, 1, 0, 0, 0, 0, 0, 0]))
    body += b"".join(_record(4, _pairs(c), padding=3) for c in chunks)
    return body + _record(4, b"") + _record(5, b"")


def fcgi_parse(shim: Path, data: bytes) -> tuple[int, str, int]:
    fn = ctypes.CDLL(str(shim)).quell_fcgi_parse
    fn.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_int64),
    ]
    cls = ctypes.create_string_buffer(48)
    rid = ctypes.c_int64(7)
    rc = fn(data, len(data), cls, 48, ctypes.byref(rid))
    return rc, cls.value.decode(), rid.value


LONG = "x" * 300  # a value whose length takes four bytes


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"REQUEST_URI": "/cpu.php?rid=5", "QUERY_STRING": "rid=5"}, (1, "/cpu.php", 5)),
        (
            {"SCRIPT_NAME": "/a.php", "HTTP_X_REQUEST_ID": "99", "QUERY_STRING": "rid=5"},
            (1, "/a.php", 99),
        ),
        ({"HTTP_COOKIE": LONG, "REQUEST_URI": "/b.php", "QUERY_STRING": ""}, (1, "/b.php", -1)),
        ({"REQUEST_URI": "/c.php?x=1&rid=12"}, (1, "/c.php", 12)),
        ({"QUERY_STRING": "grid=3"}, (1, "", -1)),
    ],
)
def test_the_fastcgi_params_name_the_request(
    phpfpm_shim_path: Path, params: dict[str, str], expected: tuple[int, str, int]
) -> None:
    assert fcgi_parse(phpfpm_shim_path, fcgi_request(params)) == expected


def test_a_fastcgi_request_read_in_pieces_is_named_once_whole(phpfpm_shim_path: Path) -> None:
    data = fcgi_request({"REQUEST_URI": "/d.php", "HTTP_X_REQUEST_ID": "4"})
    end_of_params = data.index(_record(4, b""))
    for cut in (0, 7, 8, 20, end_of_params, end_of_params + 7):
        assert fcgi_parse(phpfpm_shim_path, data[:cut]) == (0, "", -1)
    assert fcgi_parse(phpfpm_shim_path, data[: end_of_params + 8]) == (1, "/d.php", 4)
    assert fcgi_parse(phpfpm_shim_path, b"GET / HTTP/1.1\r\n\r\n")[0] == -1
