"""The settings IC2 moves, read from and written into an operator's own Apache and php-fpm
configuration texts: exact values, one line each changed and every other byte kept, and every
missing, repeated or unreadable setting named at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from quell.actuate.apache import ApacheConfig, ServerSettings, read_settings, with_settings
from quell.errors import InputError
from quell.lab.apache import ApachePaths, httpd_config, php_fpm_config
from quell.scenario.model import ApacheSettings
from tests.lab.test_apache_config import SETTINGS


def lab_config(tmp_path: Path, settings: ApacheSettings = SETTINGS) -> ApacheConfig:
    p = ApachePaths(tmp_path / "i-web", tmp_path / "server-web.log")
    return ApacheConfig(
        httpd_config(p, settings, "127.0.0.1", 80, tmp_path / "www"),
        php_fpm_config(p, settings, 10, 200 << 20),
    )


def test_the_settings_are_read_from_the_texts(tmp_path: Path) -> None:
    assert read_settings(lab_config(tmp_path)) == ServerSettings(24, 2.5, 5)


def test_written_settings_change_one_line_each_and_read_back(tmp_path: Path) -> None:
    config = lab_config(tmp_path)
    after = with_settings(config, ServerSettings(16, 7.0, 12))
    assert read_settings(after) == ServerSettings(16, 7.0, 12)
    for old, new in ((config.httpd, after.httpd), (config.php_fpm, after.php_fpm)):
        changed = [
            (a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b
        ]
        assert len(changed) == (2 if old is config.httpd else 1), changed
    assert "KeepAliveTimeout 7\n" in after.httpd and "MaxRequestWorkers 16\n" in after.httpd
    assert "pm.max_children = 12\n" in after.php_fpm
    # what the lab renders for those settings is what editing gives, for the edited lines
    assert with_settings(after, ServerSettings(24, 2.5, 5)) == config


def test_every_unusable_setting_is_named_at_once() -> None:
    config = ApacheConfig(
        "MaxRequestWorkers 8\n<IfModule x>\nMaxRequestWorkers 16\n</IfModule>\n"
        "KeepAliveTimeout soon\n",
        "[www]\npm = static\n",
    )
    with pytest.raises(InputError) as err:
        read_settings(config, "host h1")
    assert err.value.source == "host h1"
    assert {(p.location, p.message) for p in err.value.problems} == {
        ("max_request_workers", "the apache configuration has 2 such lines, not one"),
        ("keepalive_timeout_s", "'soon' is not a number"),
        ("php_max_children", "the php-fpm configuration has 0 such lines, not one"),
    }


def test_milliseconds_and_case_are_apaches() -> None:
    config = ApacheConfig("maxrequestworkers 32\n  KeepAliveTimeout 500ms\n", "pm.max_children=3\n")
    assert read_settings(config) == ServerSettings(32, 0.5, 3)
    assert "  KeepAliveTimeout 250ms\n" in with_settings(config, ServerSettings(32, 0.25, 3)).httpd
