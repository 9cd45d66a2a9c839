"""The front tiers of the consolidation lab's n-tier systems: per system an nginx (web tier) and a
php-fpm pool (application tier, ``pdo_pgsql`` with one persistent connection per child to the
system's PostgreSQL cluster), and one HAProxy in front of both systems' web tiers, which holds
each system's queue for its application tier (a server ``maxconn`` equal to the pool's children)
and, with cross-tier priority, serves light transactions first from that queue.

Configurations are pure functions of ``FrontPaths`` and the settings; every program runs in the
foreground under the supervisor (``daemonize = no``, ``daemon off``, ``-db``), with its own
files under the run's work directory.

Transactions: ``GET /light`` and ``GET /heavy`` on a system's HAProxy port. nginx answers each
with the header ``X-Quell-Server: light|heavy``, which the load generator logs as the request's
server, so the request log says each request's class."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quell.lab.balancer import SERVER_HEADER
from quell.lab.servers import WEB_USER

NGINX_BINARY = "nginx"
PHP_FPM_BINARY = "php-fpm8.2"
HAPROXY_BINARY = "haproxy"
CLASSES = ("light", "heavy")
LIGHT_PRIORITY_CLASS = -10
"""HAProxy's priority class of light transactions with CTP (lower is served first; default 0)."""


@dataclass(frozen=True)
class SoftResources:
    """The seed's Table II scaled to this machine: per system, nginx connections per worker,
    php-fpm children (the application tier's threads: each holds one database connection, so
    it is also the database connection pool) and the database's ``max_connections``."""

    name: str
    nginx_worker_connections: int
    php_children: int
    db_max_connections: int


RESOURCES = {
    # Liberal-SR: Apache 340 clients, Tomcat 240 threads, 96 DB connections.
    "liberal": SoftResources("liberal", 1024, 24, 40),
    # Conservative-SR: Apache 120, Tomcat 60, 16 DB connections (a sixth of Liberal's).
    "conservative": SoftResources("conservative", 256, 4, 40),
}


@dataclass(frozen=True)
class FrontPaths:
    """One system's front-tier files under ``base``; the database it reaches."""

    base: Path
    system: str
    web_port: int
    db_socket_dir: Path
    db_port: int

    @property
    def docroot(self) -> Path:
        return self.base / "www"

    @property
    def fpm_socket(self) -> Path:
        return self.base / "run" / "php-fpm.sock"

    @property
    def nginx_conf(self) -> Path:
        return self.base / "nginx.conf"

    @property
    def php_fpm_conf(self) -> Path:
        return self.base / "php-fpm.conf"


def rubbos_php(paths: FrontPaths) -> str:
    """The application: one transaction of the class nginx passes, on a persistent PDO
    connection to the system's cluster (over its unix socket), its rows fetched."""
    return f"""<?php
$class = $_GET['class'] ?? 'light';
$pdo = new PDO('pgsql:host={paths.db_socket_dir};port={paths.db_port};dbname=postgres',
               'postgres', '',
               [PDO::ATTR_PERSISTENT => true, PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
if ($class === 'heavy') {{
    $st = $pdo->prepare("SELECT id, title, date FROM stories WHERE title ILIKE '%' || ? || '%'");
    $st->execute([dechex(mt_rand(256, 4095))]);
}} else {{
    $sid = mt_rand(1, 99950);
    $st = $pdo->prepare('SELECT s.id, s.title, s.date, u.nickname, count(c.id) AS ncomments '
        . 'FROM stories s JOIN users u ON u.id = s.writer '
        . 'LEFT JOIN comments c ON c.story_id = s.id '
        . 'WHERE s.id BETWEEN ? AND ? GROUP BY s.id, u.nickname ORDER BY s.date DESC');
    $st->execute([$sid, $sid + 49]);
}}
$rows = $st->fetchAll(PDO::FETCH_ASSOC);
header('Content-Type: text/plain');
echo "class=$class rows=" . count($rows) . "\\n";
"""


def php_fpm_config(paths: FrontPaths, res: SoftResources) -> str:
    """A static pool of ``php_children`` (each keeps its database connection for good)."""
    return f"""; quell consolidation lab: php-fpm of {paths.system}
[global]
pid = {paths.base / "run" / "php-fpm.pid"}
error_log = /proc/self/fd/2
daemonize = no
process_control_timeout = 5s

[{paths.system}]
user = {WEB_USER}
group = {WEB_USER}
listen = {paths.fpm_socket}
listen.owner = {WEB_USER}
listen.group = {WEB_USER}
listen.mode = 0666
listen.backlog = 4096
pm = static
pm.max_children = {res.php_children}
pm.max_requests = 0
request_terminate_timeout = 60s
catch_workers_output = yes
"""


def php_fpm_argv(paths: FrontPaths) -> list[str]:
    return [PHP_FPM_BINARY, "--nodaemonize", "--fpm-config", str(paths.php_fpm_conf)]


def nginx_config(paths: FrontPaths, res: SoftResources) -> str:
    """One worker; ``/light`` and ``/heavy`` to php-fpm, each answer naming its class."""
    locations = "\n".join(
        f"""        location = /{c} {{
            fastcgi_pass fpm;
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME {paths.docroot / "rubbos.php"};
            fastcgi_param QUERY_STRING class={c};
            add_header {SERVER_HEADER} {c} always;
        }}"""
        for c in CLASSES
    )
    tmp = paths.base / "tmp"
    return f"""# quell consolidation lab: nginx of {paths.system}
daemon off;
master_process on;
worker_processes 1;
pid {paths.base / "run" / "nginx.pid"};
error_log stderr warn;
events {{ worker_connections {res.nginx_worker_connections}; }}
http {{
    access_log off;
    keepalive_timeout 60s;
    keepalive_requests 1000000;
    client_body_temp_path {tmp}/client;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream fpm {{ server unix:{paths.fpm_socket}; }}
    server {{
        listen 127.0.0.1:{paths.web_port} backlog=4096;
        location = /ping {{ default_type text/plain; return 200 "ok\\n"; }}
{locations}
    }}
}}
"""


def nginx_argv(paths: FrontPaths) -> list[str]:
    return [NGINX_BINARY, "-p", str(paths.base), "-c", str(paths.nginx_conf)]


def write_front(paths: FrontPaths, res: SoftResources) -> None:
    """Everything one system's nginx and php-fpm read."""
    for d in (paths.base, paths.docroot, paths.base / "run", paths.base / "tmp"):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    (paths.docroot / "rubbos.php").write_text(rubbos_php(paths))
    (paths.docroot / "rubbos.php").chmod(0o644)
    paths.php_fpm_conf.write_text(php_fpm_config(paths, res))
    paths.nginx_conf.write_text(nginx_config(paths, res))


@dataclass(frozen=True)
class HAProxyFront:
    """One system as HAProxy sees it: the port the users reach and its web tier behind."""

    system: str
    port: int
    web_port: int
    app_slots: int
    """At most this many requests in the application tier at once (the pool's children); the
    rest wait in HAProxy's queue."""


def haproxy_config(fronts: list[HAProxyFront], ctp: bool, admin_socket: Path) -> str:
    """HAProxy in front of the systems' web tiers; with ``ctp`` light transactions get priority
    class ``LIGHT_PRIORITY_CLASS`` and leave the queue before any heavy one."""
    blocks = []
    for f in fronts:
        prio = (
            f"    http-request set-priority-class int({LIGHT_PRIORITY_CLASS}) "
            "if { path_beg /light }\n"
            if ctp
            else ""
        )
        blocks.append(
            f"""frontend fe_{f.system}
    bind 127.0.0.1:{f.port}
{prio}    default_backend app_{f.system}

backend app_{f.system}
    http-reuse always
    server web_{f.system} 127.0.0.1:{f.web_port} maxconn {f.app_slots}
"""
        )
    return f"""# quell consolidation lab: HAProxy (cross-tier priority {"on" if ctp else "off"})
global
    maxconn 4000
    stats socket {admin_socket} mode 600 level admin

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout queue 60s
    timeout http-keep-alive 120s

{chr(10).join(blocks)}"""


def haproxy_argv(config: Path) -> list[str]:
    return [HAPROXY_BINARY, "-db", "-f", str(config)]
