"""The agent runs on ``pip install quell`` alone, the controller on ``pip install
'quell[controller]'``: in a fresh interpreter whose imports of every other extra's modules
(``quell.core.extras.EXTRAS``: matplotlib, numba, pandas, scikit-learn, GPy) are refused as if
they were not installed, the agent and the controller import, every policy is built from a
recorded bundle and decides three intervals in a dry-run controller over recorded Prometheus
answers, and ``quell agent --help``, ``quell live --help`` and ``quell live run --help``
answer; with the controller's modules (numpy, scipy, httpx) refused as well, an agent serves
its metrics on a recorded cgroup tree and ``quell agent --help`` answers. The test fails on any
attempt to import a refused module, caught or not, and names where it came from."""

from __future__ import annotations

import importlib.abc
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

import quell
from quell.core.extras import EXTRAS
from tests.cli.inprocess import run_quell

ROOT = Path(__file__).resolve().parents[1]
PRIMA_MODEL = ROOT / "scenarios/prima/models/file-100k-lab.json"
IC2_DETECTOR = ROOT / "scenarios/ic2/models/lab/detector.json"
PARAMS: dict[str, dict[str, Any]] = {
    "prima": {"model": str(PRIMA_MODEL), "workload": "file-100k"},
    "lsf": {"model": str(PRIMA_MODEL)},
    "ic2": {
        "detector": str(IC2_DETECTOR),
        "workload": "ic2-lab-php16m-40users",
        "max_request_workers": 32,
        "keepalive_timeout_s": 5,
        "php_max_children": 8,
        "threads_per_child": 8,
    },
}
"""Each policy's parameters on the recorded bundles ``scenarios/`` ships."""
PARAMS["defence"] = {"prima": PARAMS["prima"], "ic2": PARAMS["ic2"]}
HELP = (["agent", "--help"], ["live", "--help"], ["live", "run", "--help"])


class Refuse(importlib.abc.MetaPathFinder):
    """Refuses every module under ``tops``, as an interpreter without them would, and keeps
    where each attempt came from."""

    def __init__(self, tops: set[str]) -> None:
        self.tops = tops
        self.attempts: list[dict[str, str]] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in self.tops:
            frames = [f for f in traceback.extract_stack()[:-1] if not f.filename.startswith("<")]
            stack = "".join(traceback.format_list(frames[-12:]))
            self.attempts.append({"module": name, "stack": stack})
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def product_path(root: Path) -> dict[str, Any]:
    """The agent's and the controller's imports, every policy built and deciding in a dry-run
    controller, and the commands' help; what was done."""
    import contextlib
    import io
    from dataclasses import replace

    import quell.cli
    import quell.live.agent
    from quell.core.clock import VirtualClock
    from quell.live.controller import Controller, policy_context
    from quell.live.environment import LiveEnvironment
    from quell.live.prometheus import PrometheusClient
    from quell.policy import BALANCER_OF, POLICIES, build_policy
    from quell.signals.haproxy_log import LoggedRequest
    from quell.store.run import RunStore
    from tests.live.fakes import FakeLog, FakeRuntime, fake_prometheus, live_config

    decided: dict[str, list[str]] = {}
    with fake_prometheus() as prom:
        cfg = live_config(prom.url, target_rt_s=0.014, probe_size_bytes=500000)
        for k, name in enumerate(POLICIES):
            ctx = replace(
                policy_context(cfg, root), lb_algorithm=BALANCER_OF.get(name, "roundrobin")
            )
            policy = build_policy(name, PARAMS.get(name, {}), ctx)
            clock, log = VirtualClock(), FakeLog()
            runtime = FakeRuntime({"a": "ready", "b": "ready", "h2s1": "maint"})
            env = LiveEnvironment(
                cfg,
                PrometheusClient(prom.url, 2.0),
                runtime,
                clock=clock,
                open_log=lambda log=log: log,
            )
            store = RunStore.create(root / "runs" / f"roles-{k}")
            ctl = Controller(cfg, env, policy, store, apply=False)
            env.start()
            reasons = []
            for _ in range(3):
                log.pending = [
                    LoggedRequest(i, 200, 0.004 * (1 + j)) for i in "ab" for j in range(5)
                ]
                clock.sleep_until(clock.now() + 1.0)
                reasons.append(ctl.step().reason)
                ctl.save(clock.now())
                store.commit()
            env.close()
            store.close()
            decided[name] = reasons
    helped = []
    for args in HELP:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            quell.cli.main(args)
        helped.append(out.getvalue())
    return {"decided": decided, "help": helped}


def agent_path(root: Path) -> dict[str, Any]:
    """The agent's imports, its metrics on a recorded cgroup tree, and its command's help."""
    import contextlib
    import io

    import quell.cli
    from tests.live.agents import agent_at

    (root / "cg").mkdir()
    metrics = agent_at(root, ["cpu_cap"]).metrics().decode()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        quell.cli.main(["agent", "--help"])
    return {"metrics": metrics, "help": [out.getvalue()]}


def child(root: str, tops: list[str], agent_only: bool = False) -> None:
    """In the subprocess: refuse ``tops``, walk the product path (the agent's alone with
    ``agent_only``), print what happened."""
    refuse = Refuse(set(tops))
    sys.meta_path.insert(0, refuse)
    try:
        walk = agent_path if agent_only else product_path
        done: dict[str, Any] = walk(Path(root))
    except BaseException as exc:
        done = {"error": "".join(traceback.format_exception(exc))}
    print(json.dumps({"attempts": refuse.attempts, **done}))


def python(code: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` on this tree's quell and tests, in a wide colourless terminal."""
    path = [str(Path(quell.__file__).parents[1]), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "COLUMNS": "200",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _walked(tmp_path: Path, tops: list[str], agent_only: bool) -> dict[str, Any]:
    code = (
        "import sys; from tests.test_install_roles import child; "
        f"child(sys.argv[1], sys.argv[2:], agent_only={agent_only})"
    )
    done = python(code, tmp_path, *tops)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    attempts = result["attempts"]
    assert not attempts, "a refused module was imported:\n" + "\n".join(
        f"{a['module']}:\n{a['stack']}" for a in attempts[:3]
    )
    assert "error" not in result, result["error"]
    return result


def test_the_agent_imports_nothing_but_its_own(tmp_path: Path) -> None:
    tops = sorted({m for mods in EXTRAS.values() for m in mods})
    assert {"numpy", "scipy", "httpx"} <= set(tops)
    result = _walked(tmp_path, tops, agent_only=True)
    assert 'quell_cgroup_cpu_usage_seconds_total{host="h1",instance="a"} 1.5' in result["metrics"]
    assert "--config" in result["help"][0]


def test_the_agent_and_the_controller_import_no_extra(tmp_path: Path) -> None:
    tops = sorted({m for mods in EXTRAS.values() for m in mods} - set(EXTRAS["controller"]))
    assert {"matplotlib", "numba", "pandas", "sklearn", "GPy"} <= set(tops)
    result = _walked(tmp_path, tops, agent_only=False)
    from quell.policy import POLICIES

    assert set(result["decided"]) == set(POLICIES)
    for name, reasons in result["decided"].items():  # decided, not held for a missing part
        assert len(reasons) == 3 and not any(r.startswith("hold:") for r in reasons), name
    assert all("ΣU_max" in r for r in result["decided"]["prima"])  # the bundle's capacities
    assert all(r.startswith("no reconfiguration (states:") for r in result["decided"]["ic2"])
    assert all(r.startswith("target: mean RT") for r in result["decided"]["target"])
    agent_help, live_help, run_help = result["help"]
    assert "--config" in agent_help
    assert "run" in live_help
    assert "--apply" in run_help


def test_the_refusal_is_seen(tmp_path: Path) -> None:
    """The hook refuses an extra's module as a missing one, and records the attempt even when
    the importer catches it."""
    refuse = Refuse({"matplotlib"})
    sys.meta_path.insert(0, refuse)
    saved = {m: sys.modules.pop(m) for m in list(sys.modules) if m.startswith("matplotlib")}
    try:
        try:
            import matplotlib.figure  # noqa: F401
        except ModuleNotFoundError as exc:
            assert exc.name == "matplotlib"
        else:
            raise AssertionError("matplotlib was imported")
    finally:
        sys.meta_path.remove(refuse)
        sys.modules.update(saved)
    assert [a["module"] for a in refuse.attempts] == ["matplotlib"]
    assert "test_the_refusal_is_seen" in refuse.attempts[0]["stack"]


WITHOUT = """
import sys
from tests.test_install_roles import Refuse
sys.meta_path.insert(0, Refuse(set(sys.argv[1].split(","))))
import quell.cli
sys.argv = ["quell", *sys.argv[2:]]
quell.cli.main()
"""
"""``quell ARGS`` in an interpreter without the modules of ``sys.argv[1]`` (comma-separated)."""


def without(refused: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return python(WITHOUT, refused, *args)


def assert_names_the_extra(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stderr.strip() == f"error: {message}"


def test_a_command_without_its_extra_names_it(tmp_path: Path) -> None:
    done = without("numba", "sim", "run", ROOT / "scenarios/sim-mm1.yaml", "--runs-dir", tmp_path)
    assert_names_the_extra(
        done, "numba is not installed (needed for quell sim run): pip install 'quell[sim]'"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_controller_without_its_extra_names_it(tmp_path: Path) -> None:
    done = without("numpy,scipy,httpx", "live", "run", "--config", ROOT / "deploy/live.yaml")
    assert_names_the_extra(
        done,
        "numpy, scipy, httpx are not installed (needed for quell live run): "
        "pip install 'quell[controller]'",
    )


def test_a_long_command_says_so_before_it_starts(tmp_path: Path) -> None:
    done = without(
        "matplotlib", "sim", "compare", ROOT / "scenarios/sim-mm1.yaml", "--runs-dir", tmp_path
    )
    assert_names_the_extra(
        done,
        "matplotlib is not installed (needed for quell sim compare: the runs, the comparison "
        "page): pip install 'quell[sim]'",
    )
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_a_report_without_plots_names_the_extra(tmp_path: Path) -> None:
    ran = run_quell("sim", "run", ROOT / "scenarios/sim-mm1.yaml", "--runs-dir", tmp_path)
    assert ran.code == 0, ran.stderr
    (run_dir,) = tmp_path.iterdir()
    done = without("matplotlib", "lab", "report", run_dir)
    assert_names_the_extra(
        done, "matplotlib is not installed (needed for quell lab report): pip install 'quell[lab]'"
    )


def test_the_live_page_without_matplotlib_has_no_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from quell.cli import live
    from quell.core import extras
    from quell.live.controller import PlotCache

    cfg = type("Cfg", (), {"target_rt_s": 0.014})()
    assert isinstance(live._plots(tmp_path, cfg), PlotCache)  # type: ignore[arg-type]
    monkeypatch.setattr(extras, "installed", lambda m: m != "matplotlib")
    assert live._plots(tmp_path, cfg) is None  # type: ignore[arg-type]
    assert (
        "the page shows no plots: matplotlib is not installed (needed for the plots of the "
        "controller's page): pip install 'quell[plots]'"
    ) in capsys.readouterr().err
