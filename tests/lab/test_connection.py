"""The keep-alive client's response parser, fed the answers HAProxy, lighttpd and nginx give,
whole and cut at every byte (no network)."""

from __future__ import annotations

import pytest

from quell.lab.connection import (
    HEAD_LIMIT_BYTES,
    Answer,
    BadAnswerError,
    ClosedBeforeAnswerError,
    IncompleteAnswerError,
    ResponseParser,
)

HEADER = "X-Quell-Server"


def feed_in_pieces(raw: bytes, cut: int | None = None) -> Answer | None:
    """Feed ``raw`` whole, or in two pieces cut at ``cut``; the answer if it completed."""
    p = ResponseParser(HEADER)
    pieces = [raw] if cut is None else [raw[:cut], raw[cut:]]
    answer = None
    for piece in pieces:
        if piece:
            assert answer is None, "an answer before its last byte"
            answer = p.feed(piece)
    return answer


LENGTH = (
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nx-quell-server: i1\r\n"
    b"content-type: application/octet-stream\r\n\r\n0123456789"
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Quell-Server: i2\r\n"
    b"Content-Encoding: gzip\r\n\r\n"
    b"4\r\nabcd\r\n1a;ext=1\r\n" + b"z" * 26 + b"\r\n0\r\nx-trailer: 1\r\n\r\n"
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (LENGTH, Answer(200, 10, "i1", True)),
        (CHUNKED, Answer(200, 30, "i2", True)),
        (b"HTTP/1.1 204 No Content\r\nX-Quell-Server: i1\r\n\r\n", Answer(204, 0, "i1", True)),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n"
            b"Connection: close\r\n\r\nnot",
            Answer(404, 3, "", False),
        ),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", Answer(200, 2, "", False)),
        (
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: Keep-Alive\r\n\r\nok",
            Answer(200, 2, "", True),
        ),
    ],
)
def test_complete_answers_whole_and_cut_anywhere(raw: bytes, expected: Answer) -> None:
    assert feed_in_pieces(raw) == expected
    for cut in range(1, len(raw)):
        assert feed_in_pieces(raw, cut) == expected, cut


def test_a_body_without_length_runs_until_the_peer_closes() -> None:
    p = ResponseParser(HEADER)
    assert p.feed(b"HTTP/1.1 200 OK\r\nX-Quell-Server: i3\r\n\r\nabc") is None
    assert p.feed(b"defg") is None
    assert p.eof() == Answer(200, 7, "i3", False)


def test_a_large_body_is_counted_not_kept() -> None:
    p = ResponseParser(HEADER)
    assert p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n") is None
    for _ in range(15):
        assert p.feed(b"x" * 65536) is None
    assert p.feed(b"x" * (1_000_000 - 15 * 65536)) == Answer(200, 1_000_000, "", True)


def test_one_parser_reads_one_answer_after_another() -> None:
    p = ResponseParser(HEADER)
    for _ in range(3):
        p.reset()
        assert p.feed(LENGTH) == Answer(200, 10, "i1", True)


def test_what_a_close_means() -> None:
    p = ResponseParser(HEADER)
    with pytest.raises(ClosedBeforeAnswerError):
        p.eof()
    p.feed(LENGTH[:30])
    with pytest.raises(IncompleteAnswerError) as exc:
        p.eof()
    assert exc.value.received_bytes == 30


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 abc OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc", "not followed by CRLF"),
        (LENGTH + b"HTTP/1.1", "bytes after a complete answer"),
        (b"HTTP/1.1 200 OK\r\n" + b"a" * (HEAD_LIMIT_BYTES + 10), "head longer than"),
    ],
)
def test_what_is_not_http_is_refused(raw: bytes, fragment: str) -> None:
    with pytest.raises(BadAnswerError, match=fragment):
        ResponseParser(HEADER).feed(raw)
