"""The web servers an instance runs (lighttpd or nginx), their configs and the files they serve.

Servers run in the foreground under the supervisor (no daemonizing), so the pid we hold is the
server's and teardown never depends on pid files."""

from __future__ import annotations

import os
import pwd
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from quell.core.rng import component_rng
from quell.instrument.native import lighttpd_shim
from quell.instrument.token import LOG_DIR_ENV
from quell.scenario.model import FileSpec, Instance
from quell.workload.sessions import video_files

WEB_USER = "www-data"
PORT = 80
PROBE_PORT = 8081
"""Where each instance's probe server listens, on the instance's own address."""


@dataclass(frozen=True)
class ServerFiles:
    """Where an instance's config and logs live, and the command that runs it in the foreground."""

    config: Path
    command: tuple[str, ...]
    token_logs: Path | None = None
    """An instrumented server's quelltoken logs (one file per thread)."""


def _web_ids() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam(WEB_USER)
    except KeyError:
        return 0, 0
    return pw.pw_uid, pw.pw_gid


def write_docroot(
    root: Path, files: Sequence[FileSpec], seed: int, stream: str = "lab/docroot"
) -> None:
    """Generate the served files: random bytes, or text that compresses (gzip then costs CPU)."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    rng = component_rng(seed, stream)
    words = np.array(
        [
            "".join(chr(97 + c) for c in rng.integers(0, 26, size=int(n))) + " "
            for n in rng.integers(2, 10, size=2048)
        ]
    )
    for spec in files:
        path = root / spec.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            remaining = spec.size_bytes
            while remaining > 0:
                chunk = min(remaining, 1 << 20)
                if spec.compressible:
                    text = "".join(rng.choice(words, size=chunk // 4)).encode()
                    while len(text) < chunk:
                        text += text
                    data = text[:chunk]
                else:
                    data = rng.bytes(chunk)
                f.write(data)
                remaining -= chunk
        path.chmod(0o644)


def write_video_docroot(
    root: Path, paths: Sequence[str], sizes_bytes: Sequence[int], seed: int
) -> int:
    """Make every chunk path of a video schedule servable: one file of random bytes per video,
    of its chunk size (``/v{v}/chunk.bin``), and each chunk path the schedule uses a hard link
    to it. Hard links, not symlinks: every server serves them as plain files whatever its
    symlink settings, and they take no space. Returns the number of files written."""
    videos = video_files(paths, sizes_bytes)
    write_docroot(
        root,
        [FileSpec(path=v.path, size_bytes=v.size_bytes) for v in videos],
        seed,
        stream="lab/videos",
    )
    for v in videos:
        target = root / v.path.lstrip("/")
        for chunk in v.chunk_paths:
            os.link(target, root / chunk.lstrip("/"))
    return len(videos)


def _logs_dir(base: Path) -> Path:
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    uid, gid = _web_ids()
    os.chown(logs, uid, gid)
    return logs


def _lighttpd(base: Path, docroot: Path, addr: str, port: int, max_connections: int) -> ServerFiles:
    logs = _logs_dir(base)
    config = base / "lighttpd.conf"
    config.write_text(
        f"""server.document-root = "{docroot}"
server.bind = "{addr}"
server.port = {port}
server.errorlog = "{logs}/error.log"
server.username = "{WEB_USER}"
server.groupname = "{WEB_USER}"
server.max-connections = {max_connections}
server.max-fds = {2 * max_connections}
server.max-keep-alive-idle = 5
server.max-keep-alive-requests = 1000
server.max-worker = 0
index-file.names = ("index.html")
mimetype.assign = (".html" => "text/html", ".txt" => "text/plain", "" => "application/octet-stream")
"""
    )
    return ServerFiles(config, ("lighttpd", "-D", "-f", str(config)))


def lighttpd_files(base: Path, docroot: Path, addr: str, inst: Instance) -> ServerFiles:
    files = _lighttpd(base, docroot, addr, PORT, 4096)
    if not inst.instrument:
        return files
    logs = token_logs_dir(base)
    return replace(files, command=preloaded(files.command, lighttpd_shim(), logs), token_logs=logs)


def token_logs_dir(base: Path) -> Path:
    """An instrumented instance's quelltoken logs, ``base/qtlog``: writable by the user the
    server drops to (a thread opens its log at its first record, after the server dropped)."""
    logs = base / "qtlog"
    logs.mkdir(parents=True, exist_ok=True)
    uid, gid = _web_ids()
    os.chown(logs, uid, gid)
    return logs


def preloaded(command: Sequence[str], shim: Path, token_logs: Path) -> tuple[str, ...]:
    """``command`` run with a quelltoken shim preloaded and its logs in ``token_logs``; ``env``
    sets the variables for the server alone, not for the launchers before it."""
    return ("env", f"LD_PRELOAD={shim}", f"{LOG_DIR_ENV}={token_logs}", *command)


def probe_server_files(base: Path, docroot: Path, addr: str) -> ServerFiles:
    """The instance's probe server: lighttpd on ``PROBE_PORT``, serving the probe file."""
    base.mkdir(parents=True, exist_ok=True)
    return _lighttpd(base, docroot, addr, PROBE_PORT, 64)


def nginx_files(base: Path, docroot: Path, addr: str, inst: Instance) -> ServerFiles:
    logs = _logs_dir(base)
    tmp = base / "tmp"
    tmp.mkdir(exist_ok=True)
    gzip = (
        "gzip on; gzip_comp_level 9; gzip_min_length 0; gzip_proxied any; gzip_types *;"
        if inst.gzip
        else "gzip off;"
    )
    config = base / "nginx.conf"
    config.write_text(
        f"""daemon off;
master_process on;
worker_processes 1;
pid {base}/nginx.pid;
error_log {logs}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    keepalive_timeout 5s;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    {gzip}
    server {{
        listen {addr}:{PORT};
        root {docroot};
    }}
}}
"""
    )
    return ServerFiles(
        config, ("nginx", "-p", str(base), "-c", str(config), "-e", f"{logs}/error.log")
    )


SERVERS = {"lighttpd": lighttpd_files, "nginx": nginx_files}


def server_files(base: Path, docroot: Path, addr: str, inst: Instance) -> ServerFiles:
    base.mkdir(parents=True, exist_ok=True)
    return SERVERS[inst.server](base, docroot, addr, inst)
