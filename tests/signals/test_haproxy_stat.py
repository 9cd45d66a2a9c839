"""``show stat`` parsing against output captured from HAProxy 2.6.12 on this machine.

The capture: backend be_web with s1 (a live http.server, weight 100, maxconn 50) and s2
(a closed port, weight 50, no maxconn), after 12 requests through the frontend.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.errors import ComponentError
from quell.signals import ServerStat, parse_show_stat

CSV = (
    Path(__file__).resolve().parent.parent / "fixtures" / "haproxy" / "show_stat.csv"
).read_text()


def test_server_rows_exact() -> None:
    assert parse_show_stat(CSV) == [
        ServerStat(
            backend="be_web",
            server="s1",
            status="no check",
            weight=100,
            scur=0,
            qcur=0,
            smax=1,
            slim=50,
            stot=8,
            bin=824,
            bout=3760,
            econ=0,
            eresp=0,
            hrsp_2xx=8,
            hrsp_5xx=0,
            rtime_ms=1,
            ttime_ms=1,
            qtime_ms=0,
            lbtot=8,
        ),
        ServerStat(
            backend="be_web",
            server="s2",
            status="no check",
            weight=50,
            scur=0,
            qcur=0,
            smax=1,
            slim=None,  # empty: no maxconn
            stot=16,
            bin=412,
            bout=868,
            econ=4,
            eresp=0,
            hrsp_2xx=0,
            hrsp_5xx=0,
            rtime_ms=0,
            ttime_ms=0,
            qtime_ms=0,
            lbtot=4,
        ),
    ]


def test_empty_optional_timings_are_none() -> None:
    header, *rows = CSV.splitlines()
    names = header[2:].split(",")
    s2 = next(r for r in rows if r.startswith("be_web,s2,")).split(",")
    for col in ("rtime", "ttime", "qtime", "econ"):
        s2[names.index(col)] = ""
    stat = parse_show_stat(header + "\n" + ",".join(s2) + "\n")[0]
    assert (stat.rtime_ms, stat.ttime_ms, stat.qtime_ms, stat.econ) == (None, None, None, 0)


def test_header_only_gives_no_rows() -> None:
    assert parse_show_stat(CSV.splitlines()[0] + "\n\n") == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Unknown command: 'show stats'\n",
        "# pxname,svname,status\nbe,s1,UP\n",  # header lacks needed columns
        CSV.replace("be_web,s1,0,0,0,1,50,8", "be_web,s1,0,0,0,1,fifty,8"),
        CSV.splitlines()[0] + "\nbe_web,s1,0,0\n",  # truncated row
    ],
)
def test_malformed_is_component_error(text: str) -> None:
    with pytest.raises(ComponentError) as info:
        parse_show_stat(text)
    assert info.value.component == "haproxy"
