"""Shared test configuration. Lab tests (marker ``lab``) need root and the system packages."""

from __future__ import annotations

import os
import shutil

import pytest

LAB_BINARIES = ("haproxy", "lighttpd", "nginx", "stress-ng", "iperf3", "ip", "tc")


def lab_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces, cgroups, tc)"
    missing = [b for b in LAB_BINARIES if shutil.which(b) is None]
    if missing:
        return f"lab tests need {', '.join(missing)} (run `make install`)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = lab_unavailable_reason()
    if reason is None:
        return
    for item in items:
        if "lab" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
