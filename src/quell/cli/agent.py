"""``quell agent``: the per-host agent of live mode (``quell.live.agent``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOpt = Annotated[
    Path, typer.Option("--config", help="The agent's config file (agent.yaml).", show_default=False)
]


def agent_command(config: ConfigOpt) -> None:
    """Export this host's instances' signals and PRIMA's probe on /metrics (Prometheus text
    format), bound to loopback unless the config says otherwise; state-changing endpoints only
    with a token, and only those the config allows."""
    from quell.cli.console import say
    from quell.live.agent import Agent
    from quell.live.config import load_agent_config
    from quell.signals.cgroup import detect_layout

    cfg = load_agent_config(config)
    agent = Agent(cfg, detect_layout())
    try:
        agent.start()
    except OSError as exc:
        agent.stop()
        from quell.errors import ComponentError

        raise ComponentError(
            "agent", f"cannot listen on {cfg.listen.addr}:{cfg.listen.port}: {exc}"
        ) from None
    say(f"agent for {cfg.host}: http://{cfg.listen.addr}:{agent.port}/metrics")
    try:
        agent.serve_forever()
    finally:
        agent.stop()
