"""``quell live``: the controller of live mode against the user's own HAProxy (``quell.live``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from quell.cli.options import JsonOpt

if TYPE_CHECKING:
    from collections.abc import Callable

    from quell.live.config import LiveConfig
    from quell.live.controller import Controller, PlotCache

live_app = typer.Typer(help="Run a policy against your own HAProxy fleet (agents + Prometheus).")


@live_app.command("run")
def live_run(
    config: Annotated[
        Path,
        typer.Option("--config", help="The controller's config (live.yaml).", show_default=False),
    ],
    apply: Annotated[
        bool,
        typer.Option("--apply", help="Carry the decisions out. Default: a dry run (logged only)."),
    ] = False,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            help="Where the run store and decision log go; an existing one is resumed. "
            "Default: runs/live-<name>.",
        ),
    ] = None,
    duration_s: Annotated[
        float | None,
        typer.Option("--duration", min=0.0, help="Stop after this many seconds (default: never)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Observe through Prometheus and HAProxy every interval, decide with the configured
    policy, and (with --apply) act through HAProxy's runtime API, the agents and the scaler.
    Holds the weights in force whenever a part is missing; resumes a run directory it finds."""
    import signal
    import time

    from quell.core.extras import require

    require(["numpy", "scipy", "httpx"], "quell live run", "controller")

    from quell.actuate.haproxy import HAProxyRuntime
    from quell.cli.console import emit_json, say
    from quell.live.config import load_live_config
    from quell.live.controller import Controller, continuing_clock, make_policy, serve
    from quell.live.environment import AgentClient, LiveEnvironment
    from quell.live.prometheus import PrometheusClient
    from quell.store.run import RunStore

    cfg = load_live_config(config)
    policy = make_policy(cfg, config.parent)
    token = None
    if cfg.token_file is not None:
        from quell.live.agent import read_token

        token = read_token(cfg.token_file)
    out = run_dir or Path("runs") / f"live-{cfg.name}"
    resumed = (out / "run.db").is_file()
    store = RunStore.create(out)
    if not resumed:
        store.set_meta(
            environment="live",
            scenario=cfg.name,
            interval_s=cfg.interval_s,
            config_json=cfg.model_dump(mode="json"),
            started_at=time.time(),
        )
    prom = PrometheusClient(cfg.prometheus.url, cfg.prometheus.timeout_s)
    agents = AgentClient(cfg.agents, token) if cfg.agents else None
    env = LiveEnvironment(
        cfg, prom, HAProxyRuntime(Path(cfg.haproxy.socket), cfg.haproxy.timeout_s), agents
    )
    ctl = Controller(cfg, env, policy, store, apply=apply)
    offset = ctl.resume()
    env.clock = continuing_clock(offset)
    server = None
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for s in old:
        signal.signal(s, lambda *_: ctl.stop_event.set())
    try:
        env.start()
        if cfg.listen is not None:
            server = serve(
                cfg.listen.addr, cfg.listen.port, ctl.metrics, out, _plots(out, cfg), _users(ctl)
            )
        mode = "applying" if apply else "dry run (nothing is changed; --apply to act)"
        how = f"resumed ({ctl.replayed} snapshots replayed to the policy)" if resumed else "new"
        say(f"live {cfg.name}: {policy.name}, {mode}; {how} run {out}")

        def tick(d: object) -> None:
            from quell.core.action import Decision

            if isinstance(d, Decision) and d.actions:
                say(f"{env.clock.now():8.1f} s  {d.reason}")

        ticks = ctl.run(duration_s, tick)
    except KeyboardInterrupt:
        ticks = ctl.ticks
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if server is not None:
            server.shutdown()
            server.server_close()
        env.close()  # and the Prometheus and agent clients with it
        decisions = store.decision_log()
        store.close()
    holds = sum(1 for d in decisions if d[2].startswith("hold:"))
    summary = {"run_dir": str(out), "ticks": ticks, "decisions": len(decisions), "holds": holds}
    say(f"{ticks} intervals, {len(decisions)} decisions logged ({holds} holds) in {out}")
    if as_json:
        emit_json(summary)


def _users(ctl: Controller) -> Callable[[], str]:
    """The page's table of what users felt, from the controller's window of HAProxy's log."""
    from quell.report.live_plots import USER_SPANS, users_section

    def section() -> str:
        now = ctl.env.clock.now()
        spans = [(label, *ctl.window.since(now - span)) for label, span in USER_SPANS]
        return users_section(spans, now, ctl.cfg.request_timeout_s, ctl.cfg.target_rt_s)

    return section


def _plots(run_dir: Path, cfg: LiveConfig) -> PlotCache | None:
    """The page's plots, or none (said once) where matplotlib is not installed."""
    from quell.cli.console import say
    from quell.core.extras import installed, missing
    from quell.live.controller import PlotCache

    if not installed("matplotlib"):
        prereq = missing(["matplotlib"], "the plots of the controller's page", "plots")
        say(f"the page shows no plots: {prereq}", style="yellow")
        return None
    from quell.report.live_plots import write_live_plots

    return PlotCache(lambda: write_live_plots(run_dir, run_dir / "plots", cfg.target_rt_s))
