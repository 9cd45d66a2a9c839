"""An agent on a recorded cgroup v2 tree, made as the agent's tests make it: with nothing but
the agent's own install (no httpx, numpy or any extra), so the install-roles test can use it."""

from __future__ import annotations

from pathlib import Path

from quell.live.agent import Agent
from quell.live.config import AgentConfig, parse_config
from quell.signals.cgroup import CgroupLayout

TOKEN = "0123456789abcdef0123"


def cgroup_tree(root: Path) -> CgroupLayout:
    g = root / "svc"
    g.mkdir()
    (g / "cpu.stat").write_text(
        "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n"
        "nr_periods 10\nnr_throttled 2\nthrottled_usec 250000\n"
    )
    (g / "cpu.pressure").write_text(
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=100\n"
    )
    (g / "cpu.max").write_text("max 100000\n")
    (g / "cgroup.procs").write_text("")
    return CgroupLayout("v2", root, root, root, root, None)


def agent_at(tmp_path: Path, allow: list[str]) -> Agent:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    cfg = parse_config(
        AgentConfig,
        {
            "host": "h1",
            "listen": {"port": 1},
            "token_file": str(token),
            "allow": allow,
            "instances": [{"id": "a", "cgroup": "svc"}],
        },
        "<test>",
    )
    return Agent(
        cfg.model_copy(update={"listen": cfg.listen.model_copy(update={"port": 0})}),
        cgroup_tree(tmp_path / "cg"),
    )
