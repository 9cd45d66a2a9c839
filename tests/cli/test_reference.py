"""docs/reference's generated pages are what the code gives (``make reference`` rewrites them),
and the generator writes each kind of key, command and metric as it is declared: exact rows
for small models, commands and metric tables made here."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path
from typing import Annotated, Literal

import pytest
import typer
import typer.main
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from quell.cli import app
from quell.cli.reference import commands, pages
from quell.cli.reference.markdown import anchor, code
from quell.cli.reference.schema import Row, Walker, render
from quell.core.metrics import MetricSet, MetricSpec
from quell.live.config import AgentConfig, LiveConfig
from quell.policy import POLICIES
from tests.cli.inprocess import run_quell

ROOT = Path(__file__).resolve().parents[2]
QUELL = typer.main.get_command(app)
REFERENCE = ROOT / "docs" / "reference"


def test_the_checked_in_pages_are_what_the_code_gives(tmp_path: Path) -> None:
    done = run_quell("reference", "--out", tmp_path)
    assert done.code == 0, done.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(pages.pages(QUELL))
    stale = [
        f"docs/reference/{name} differs from the code: run make reference"
        for name in written
        if not (REFERENCE / name).is_file()
        or (REFERENCE / name).read_text() != (tmp_path / name).read_text()
    ]
    assert not stale, "\n".join(stale)


def test_check_names_each_page_that_differs_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "reference"
    assert run_quell("reference", "--out", out).code == 0
    assert run_quell("reference", "--check", "--out", out).code == 0
    (out / "cli.md").write_text((out / "cli.md").read_text() + "edited\n")
    (out / "metrics.md").unlink()
    done = run_quell("reference", "--check", "--out", out)
    assert done.code == 1
    assert f"{out / 'cli.md'} differs from the code: run make reference" in done.stderr
    assert f"{out / 'metrics.md'} differs from the code: run make reference" in done.stderr
    assert "scenario.md" not in done.stderr
    assert not (out / "metrics.md").exists()


def test_the_command_is_not_listed_by_help() -> None:
    assert "reference" not in run_quell("--help").stdout


def test_every_link_between_the_pages_leads_to_a_section() -> None:
    texts = pages.pages(QUELL)
    anchors = {
        name: {anchor(x.lstrip("#").strip()) for x in text.splitlines() if x.startswith("## ")}
        for name, text in texts.items()
    }
    for name, text in texts.items():
        for page, target in re.findall(r"\]\(([\w-]+\.md)#([^)]+)\)", text):
            assert target in anchors[page], (name, page, target)


def test_every_module_that_serves_metrics_has_its_table_in_the_reference() -> None:
    serving = set()
    for path in (ROOT / "src" / "quell").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(n.split(".")[0] == "prometheus_client" for n in names):
                module = path.relative_to(ROOT / "src").with_suffix("").as_posix()
                serving.add(module.replace("/", "."))
    assert serving == set(pages.METRIC_MODULES)


def test_every_schema_key_has_a_meaning() -> None:
    _, walker = pages.scenario_page()
    live = Walker()
    live.add(AgentConfig, "")
    live.add(LiveConfig, "")
    missing = [
        f"{model.__module__}.{model.__name__}: {row.key}"
        for sections in (walker.sections, live.sections)
        for model, s in sections.items()
        for row in s.rows
        if not row.meaning
    ]
    assert missing == []


def test_each_policy_gets_the_model_its_build_validates_with() -> None:
    from quell.policy.prima import PrimaParams
    from quell.policy.target import TargetParams

    assert pages.params_model("prima") is PrimaParams
    assert pages.params_model("target") is TargetParams
    assert len({pages.params_model(n) for n in POLICIES}) >= 5


# -- the schema walker, on models made here ----------------------------------------------------
def _positive(value: float) -> float:
    """not negative zero"""
    return value


class Leaf(BaseModel):
    """A leaf."""

    model_config = ConfigDict(extra="forbid")

    size_bytes: Annotated[int, Field(gt=0, le=10)] = 5
    """How big."""


class Red(BaseModel):
    kind: Literal["red"]
    depth: float = 1.5
    """How deep."""


class Blue(BaseModel):
    kind: Literal["blue"]


class Root(BaseModel):
    """The root."""

    name: Annotated[str, Field(min_length=1, max_length=8), AfterValidator(_positive)]
    """Its name, with ``None`` as YAML writes it."""
    leaves: Annotated[list[Leaf], Field(min_length=1)]
    """Some leaves."""
    maybe: Leaf | None = None
    """One more."""
    forms: list[Annotated[Red | Blue, Field(discriminator="kind")]] = []
    """Coloured."""
    tags: dict[Annotated[str, Field(pattern=r"^[a-z]+$")], int | str] = {}
    """Tagged."""
    mode: Literal["a", "b"] = "a"
    """A mode."""
    nested: Leaf = Leaf()
    """Left out: its defaults."""

    @model_validator(mode="after")
    def _consistent(self) -> Root:
        """the leaves fit"""
        return self


def test_the_walker_writes_every_kind_of_key() -> None:
    w = Walker()
    w.add(Root, "")
    assert list(w.sections) == [Root, Leaf, Red, Blue]
    root, leaf, red, blue = w.sections.values()
    assert root.rows == [
        Row(
            "`name`",
            "str",
            "required",
            "not negative zero; 1 to 8 characters",
            "Its name, with `null` as YAML writes it.",
        ),
        Row("`leaves`", "list of [Leaf](#leaf)", "required", "at least 1 item", "Some leaves."),
        Row("`maybe`", "[Leaf](#leaf) or `null`", "`null`", "", "One more."),
        Row(
            "`forms`",
            "list of one of [Red](#red) (`kind: red`), [Blue](#blue) (`kind: blue`)",
            "`[]`",
            "",
            "Coloured.",
        ),
        Row("`tags`", "map of str to int or str", "`{}`", "keys: matches `^[a-z]+$`", "Tagged."),
        Row("`mode`", '`"a"` or `"b"`', '`"a"`', "", "A mode."),
        Row("`nested`", "[Leaf](#leaf)", "`{}`", "", "Left out: its defaults."),
    ]
    assert root.checks == ["the leaves fit"]
    assert leaf.where == ["`leaves[]`", "`maybe`", "`nested`"]
    assert leaf.rows == [Row("`leaves[].size_bytes`", "int", "`5`", "> 0; ≤ 10", "How big.")]
    assert red.where == ["`forms[]` with `kind: red`"]
    assert red.rows == [
        Row("`forms[].kind`", '`"red"`', "required", "", "Selects this form of `forms[]`."),
        Row("`forms[].depth`", "float", "`1.5`", "", "How deep."),
    ]
    assert blue.rows == [
        Row("`forms[].kind`", '`"blue"`', "required", "", "Selects this form of `forms[]`.")
    ]
    text = "\n".join(render([leaf]))
    assert text == (
        "## Leaf\n\nAt `leaves[]`, `maybe`, `nested`. A leaf.\n\n"
        "| key | type | default | bounds | meaning |\n|---|---|---|---|---|\n"
        "| `leaves[].size_bytes` | int | `5` | > 0; ≤ 10 | How big. |\n"
    )


def test_a_model_documented_on_another_page_is_linked_not_repeated() -> None:
    w = Walker({Leaf: "other.md#leaf"})
    w.add(Root, "")
    assert Leaf not in w.sections
    assert w.sections[Root].rows[1].type == "list of [Leaf](other.md#leaf)"


# -- the command line, on an app made here -----------------------------------------------------
def test_the_commands_are_written_in_helps_order() -> None:
    app = typer.Typer(help="The tool.", add_completion=False)
    sub = typer.Typer(help="A group.")

    @app.command("go")
    def go(
        path: Annotated[Path, typer.Argument(help="Where.")],
        times: Annotated[int, typer.Option("--times", min=1, max=3, help="How often.")] = 2,
        loud: Annotated[bool, typer.Option("--loud", help="Shout.")] = False,
    ) -> None:
        """Go somewhere.

        Second paragraph."""

    @sub.command("one")
    def one() -> None:
        """The first."""

    @app.command("secret", hidden=True)
    def secret() -> None:
        """Not shown."""

    app.add_typer(sub, name="grp")
    text = "\n".join(commands.render(typer.main.get_command(app), "tool"))
    assert "secret" not in text
    assert [x for x in text.splitlines() if x.startswith("## ")] == [
        "## `tool`",
        "## `tool go`",
        "## `tool grp`",
        "## `tool grp one`",
    ]
    assert (
        "| [`tool go`](#tool-go) | Go somewhere. |\n| [`tool grp`](#tool-grp) | A group. |" in text
    )
    assert "Go somewhere.\n\nSecond paragraph.\n" in text
    assert "| `path` | `<path>` | required |  | Where. |" in text
    assert "| `--times` | `<int range>` | `2` | ≥ 1; ≤ 3 | How often. |" in text
    assert "| `--loud` | `<bool>` |  |  | Shout. |" in text
    assert "--help" not in text


# -- metrics -----------------------------------------------------------------------------------
def test_a_metric_table_is_written_with_its_exposed_names(monkeypatch: pytest.MonkeyPatch) -> None:
    table = MetricSet(
        "thing",
        "its ``/metrics``",
        True,
        (
            MetricSpec("t_requests", "counter", "Requests.", ("instance",)),
            MetricSpec("t_wait_seconds", "histogram", "Waits.", (), "seconds", (0.1, 1.0)),
        ),
    )
    monkeypatch.setattr(pages, "metric_tables", lambda: [table])
    text = pages.metrics_page()
    assert "## `thing`\n\nServed on its `/metrics`.\n" in text
    assert (
        "| `t_requests_total`, `t_requests_created` | counter |  | `instance` | Requests. |" in text
    )
    row = ", ".join(code(f"t_wait_seconds_{s}") for s in ("bucket", "count", "sum", "created"))
    assert f"| {row} | histogram | seconds |  | Waits. |" in text
    assert "`t_wait_seconds` buckets (upper bounds, seconds): 0.1, 1.0." in text


def test_a_shipped_example_that_does_not_load_stops_the_page(tmp_path: Path) -> None:
    from quell.errors import InputError
    from quell.scenario import load_scenario

    bad = tmp_path / "bad.yaml"
    shutil.copy(ROOT / "scenarios" / "interference-smoke.yaml", bad)
    bad.write_text(bad.read_text() + "unknown_key: 1\n")
    with pytest.raises(InputError, match="unknown key"):
        pages.example(str(bad), load_scenario)
