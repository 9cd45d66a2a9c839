"""Reconfiguring an Apache + php-fpm pair (``quell.actuate.apache``) against stand-ins that keep
the real servers' contracts: a procfs tree with Apache's parent and php-fpm's master and pool,
Apache's error log, and the commands' answers (the refusal is Apache's, recorded). What is
tested first, what is applied, what is read back, and what a failure rolls back."""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest

from quell.actuate.apache import ApacheConfig, ApacheLayout, ApacheServer, Part, ServerSettings
from quell.errors import ComponentError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "apache"
RESUMED = (
    "[mpm_worker:notice] AH00292: Apache/2.4.71 (Debian) configured -- resuming normal operations\n"
)
START = ApacheConfig("MaxRequestWorkers 16\nKeepAliveTimeout 5\n", "pm.max_children = 2\n")
WANT = ServerSettings(16, 5.0, 2)


class Pair:
    """Stand-ins for one Apache (parent 100) and one php-fpm (master 200)."""

    def __init__(self, tmp: Path) -> None:
        self.proc = tmp / "proc"
        self.layout = ApacheLayout(
            tmp / "httpd.conf",
            tmp / "php-fpm.conf",
            tmp / "httpd.pid",
            tmp / "php-fpm.pid",
            tmp / "error.log",
        )
        self.layout.httpd_conf.write_text(START.httpd)
        self.layout.php_fpm_conf.write_text(START.php_fpm)
        self.layout.error_log.write_text(RESUMED)
        self.next_pid = 300
        self.kid_title = "php-fpm: pool www"
        self.pool_titles_at: float | None = None
        """When the children of php-fpm take the pool's title (None: they have it)."""
        self.start("apache", 100)
        self.start("php-fpm", 200)
        self.tests: dict[Part, tuple[int, str]] = {"apache": (0, "Syntax OK"), "php-fpm": (0, "")}
        self.fpm_dies_on_reload = False
        self.apache_resumes = True
        self.calls: list[str] = []
        self.now = 0.0

    def start(self, part: Part, pid: int | None = None) -> None:
        pid = pid or self.take_pid()
        self.layout.pid_file(part).write_text(f"{pid}\n")
        kids = [] if part == "apache" else [self.take_pid() for _ in range(self.pool_size())]
        self.process(pid, "S", kids)
        if part == "apache":
            with open(self.layout.error_log, "a") as log:
                log.write(RESUMED)

    def take_pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def pool_size(self) -> int:
        found = re.search(r"pm\.max_children = (\d+)", self.layout.php_fpm_conf.read_text())
        assert found is not None
        return int(found.group(1))

    def process(self, pid: int, state: str, children: list[int]) -> None:
        task = self.proc / str(pid) / "task" / str(pid)
        task.mkdir(parents=True, exist_ok=True)
        (self.proc / str(pid) / "stat").write_text(f"{pid} (x) {state} 1\n")
        (task / "children").write_text(" ".join(map(str, children)))
        for kid in children:
            self.title(kid, self.kid_title)

    def title(self, pid: int, title: str) -> None:
        (self.proc / str(pid)).mkdir(parents=True, exist_ok=True)
        (self.proc / str(pid) / "cmdline").write_bytes(title.encode() + b"\0")

    # what ApacheServer calls
    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        self.calls.append(" ".join(argv[:3]))
        if argv[1] == "-t":
            return self.tests["apache" if "apache2" in argv[0] else "php-fpm"]
        if self.apache_resumes:
            with open(self.layout.error_log, "a") as log:
                log.write("AH00297: SIGUSR1 received.  Doing graceful restart\n" + RESUMED)
        return 0, ""

    def kill(self, pid: int, sig: int) -> None:
        assert sig == signal.SIGUSR2 and pid == int(self.layout.php_fpm_pid_file.read_text())
        self.calls.append(f"USR2 {pid}")
        if self.fpm_dies_on_reload:
            self.process(pid, "Z", [])
        else:
            self.process(pid, "S", [self.take_pid() for _ in range(self.pool_size())])

    def restart(self, part: Part) -> None:
        self.calls.append(f"restart {part}")
        self.start(part)

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.pool_titles_at is not None and self.now >= self.pool_titles_at:
            self.pool_titles_at = None
            pid = int(self.layout.php_fpm_pid_file.read_text())
            kids = (self.proc / str(pid) / "task" / str(pid) / "children").read_text().split()
            for kid in kids:
                self.title(int(kid), "php-fpm: pool www")

    def server(self) -> ApacheServer:
        def fetch(path: str) -> str:
            raise ComponentError("apache", "nobody answers")

        server = ApacheServer(
            self.layout,
            START,
            fetch,
            self.restart,
            settle_timeout_s=2.0,
            proc_root=self.proc,
            monotonic=lambda: self.now,
            sleep=self.sleep,
            run=self.run,
            kill=self.kill,
        )
        assert server.read_back(WANT) == WANT
        return server


@pytest.fixture()
def pair(tmp_path: Path) -> Pair:
    return Pair(tmp_path)


def leftovers(pair: Pair) -> list[str]:
    return sorted(p.name for p in pair.layout.httpd_conf.parent.glob("*.new"))


def test_a_change_is_tested_applied_and_read_back(pair: Pair) -> None:
    server = pair.server()
    new = ApacheConfig("MaxRequestWorkers 8\nKeepAliveTimeout 10\n", "pm.max_children = 3\n")
    reading = server.reconfigure(new, ServerSettings(8, 10.0, 3))
    assert reading == ServerSettings(8, 10.0, 3) == server.in_force
    assert pair.calls == [
        "apache2 -t -f",
        "php-fpm8.2 -t -y",
        "apache2 -k graceful",
        "USR2 200",
    ]
    assert pair.layout.httpd_conf.read_text() == new.httpd
    assert pair.layout.php_fpm_conf.read_text() == new.php_fpm
    assert len(server.children()) == 3 and leftovers(pair) == []


def test_a_pool_counts_once_its_children_are_pool_workers(pair: Pair) -> None:
    # After the reload the new children still have the master's title for a while (just
    # forked); the pool counts only once each is a pool worker, and not at all if none becomes.
    server = pair.server()
    pair.kid_title = "php-fpm: master process (/etc/php-fpm.conf)"
    pair.pool_titles_at = pair.now + 0.5
    server.reconfigure(
        ApacheConfig(START.httpd, "pm.max_children = 3\n"), ServerSettings(16, 5.0, 3)
    )
    assert pair.now >= 0.5
    assert server.in_force == ServerSettings(16, 5.0, 3)
    with pytest.raises(ComponentError, match="4 not pool workers yet"):
        server.reconfigure(
            ApacheConfig(START.httpd, "pm.max_children = 4\n"), ServerSettings(16, 5.0, 4)
        )


def test_only_what_changed_is_reloaded(pair: Pair) -> None:
    server = pair.server()
    server.reconfigure(
        ApacheConfig(START.httpd, "pm.max_children = 5\n"), ServerSettings(16, 5.0, 5)
    )
    assert pair.calls == ["php-fpm8.2 -t -y", "USR2 200"]
    assert server.in_force == ServerSettings(16, 5.0, 5)


def test_what_apache_lowers_max_request_workers_to_is_what_is_read_back(pair: Pair) -> None:
    server = pair.server()
    pair.tests["apache"] = (0, (FIXTURES / "config-test-not-a-multiple.txt").read_text())
    reading = server.reconfigure(
        ApacheConfig("MaxRequestWorkers 20\n", START.php_fpm), ServerSettings(20, 5.0, 2)
    )
    assert reading.max_request_workers == 16


def test_a_refused_configuration_applies_nothing_and_names_apache_s_message(pair: Pair) -> None:
    server = pair.server()
    pair.tests["apache"] = (1, (FIXTURES / "config-test-refused.txt").read_text())
    new = ApacheConfig("NoSuchDirective on\n", "pm.max_children = 3\n")
    with pytest.raises(ComponentError, match="Invalid command 'NoSuchDirective'"):
        server.reconfigure(new, ServerSettings(16, 5.0, 3))
    assert pair.calls == ["apache2 -t -f", "php-fpm8.2 -t -y"]  # both tested, neither applied
    assert pair.layout.httpd_conf.read_text() == START.httpd
    assert pair.layout.php_fpm_conf.read_text() == START.php_fpm
    assert leftovers(pair) == [] and server.in_force == WANT


def test_a_php_fpm_that_does_not_come_back_is_started_again_with_the_last_good_pool(
    pair: Pair,
) -> None:
    server = pair.server()
    pair.fpm_dies_on_reload = True
    with pytest.raises(ComponentError, match="rolled back to the last configuration that worked"):
        server.reconfigure(
            ApacheConfig(START.httpd, "pm.max_children = 4\n"), ServerSettings(16, 5.0, 4)
        )
    assert pair.calls == ["php-fpm8.2 -t -y", "USR2 200", "restart php-fpm"]
    assert pair.layout.php_fpm_conf.read_text() == START.php_fpm
    assert server.pid("php-fpm") not in (None, 200) and len(server.children()) == 2
    assert server.in_force == WANT and server.last_good == START


def test_an_apache_that_does_not_resume_is_restarted_gracefully_with_the_last_good_config(
    pair: Pair,
) -> None:
    server = pair.server()
    pair.apache_resumes = False
    with pytest.raises(ComponentError, match="did not say it re-read") as caught:
        server.reconfigure(
            ApacheConfig("MaxRequestWorkers 8\n", START.php_fpm), ServerSettings(8, 5.0, 2)
        )
    assert "failed too" in str(caught.value)  # it does not resume with the old one either
    assert pair.calls == ["apache2 -t -f", "apache2 -k graceful", "apache2 -k graceful"]
    assert pair.layout.httpd_conf.read_text() == START.httpd
    assert pair.now == pytest.approx(4.0, abs=0.2)  # two settle timeouts, no more


def test_a_pid_file_being_written_is_a_server_starting_not_one_that_exited(pair: Pair) -> None:
    # php-fpm creates its pid file, then writes it: read in between, it is empty.
    pair.layout.httpd_pid_file.write_text("")
    pair.layout.php_fpm_pid_file.write_text("")
    written = {"apache": "100\n", "php-fpm": "200"}  # php-fpm writes no newline

    def sleep(seconds: float) -> None:
        pair.now += seconds
        for part, text in written.items():
            pair.layout.pid_file(part).write_text(text)

    server = ApacheServer(
        pair.layout,
        START,
        lambda path: "",
        pair.restart,
        settle_timeout_s=2.0,
        proc_root=pair.proc,
        monotonic=lambda: pair.now,
        sleep=sleep,
        run=pair.run,
        kill=pair.kill,
    )
    assert server.pid("apache") is None
    assert server.read_back(WANT) == WANT
    assert pair.now == pytest.approx(0.05)  # one poll: it waited for the write
    assert (server.pid("apache"), server.pid("php-fpm")) == (100, 200)


@pytest.mark.parametrize(("part", "who"), [("apache", "its parent"), ("php-fpm", "its master")])
def test_a_pid_file_naming_an_exited_process_is_a_server_that_exited(
    pair: Pair, part: Part, who: str
) -> None:
    server = pair.server()
    pair.process(100 if part == "apache" else 200, "Z", [])
    with pytest.raises(ComponentError) as caught:
        server.read_back(WANT, mark=0)
    said = str(caught.value)
    assert said.startswith(f"{part}: not running ({who} exited)"), said
    if part == "apache":  # with the end of its log
        assert "its log ends '[mpm_worker:notice]" in said, said
        assert said.endswith("resuming normal operations'"), said
