"""The one error hierarchy of quell. Every error carries the data that explains it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class QuellError(Exception):
    """Base of every error quell raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code: int = 1


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where it is (a dotted key path) and what is wrong."""

    location: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


class InputError(QuellError):
    """An input (scenario, config, argument, model file) is invalid. Lists every problem at once."""

    exit_code = 2

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: {len(self.problems)} problem(s)\n{lines}")


class PrerequisiteError(QuellError):
    """Something the machine must provide is missing (root, a binary, a kernel feature, an
    extra of quell's install); ``hint`` says how to provide it."""

    exit_code = 2

    def __init__(self, what: str, needed_for: str, hint: str | None = None) -> None:
        self.what = what
        self.needed_for = needed_for
        self.hint = hint
        how = f": {hint}" if hint else ""
        super().__init__(f"{what} (needed for {needed_for}){how}")


class ComponentError(QuellError):
    """A real component (HAProxy, a web server, tc, a cgroup) failed or could not be reached."""

    def __init__(self, component: str, detail: str) -> None:
        self.component = component
        self.detail = detail
        super().__init__(f"{component}: {detail}")


class ComponentDiedError(ComponentError):
    """A component the run cannot go on without has exited; ends the run (not just a cycle)."""


class ActionError(QuellError):
    """Some actions of a batch could not be carried out. ``failed`` holds each of them with the
    reason; ``applied`` the ones of the same batch that were carried out. The environment that
    raises it is left consistent: every applied action in force, no failed one part-way."""

    def __init__(
        self, environment: str, failed: Sequence[tuple[object, str]], applied: Sequence[object]
    ) -> None:
        self.environment = environment
        self.failed = list(failed)
        self.applied = list(applied)
        lines = "\n".join(f"  - {a!r}: {why}" for a, why in self.failed)
        super().__init__(
            f"{environment}: {len(self.failed)} of {len(self.failed) + len(self.applied)} "
            f"action(s) not applied\n{lines}"
        )


class EnvironmentStateError(QuellError):
    """An environment was asked for something its state does not allow: to observe or act
    before its start step (``state`` "not started") or after ``close`` (``state`` "closed")."""

    def __init__(self, environment: str, operation: str, state: str) -> None:
        self.environment = environment
        self.operation = operation
        self.state = state
        super().__init__(f"{environment}: cannot {operation}: {state}")


class ContractError(QuellError):
    """An Environment broke the contract every Environment keeps (``quell.core.contract``):
    the check that found it and each thing found wrong, where (which snapshot, instance, field
    or action) and what."""

    def __init__(self, environment: str, check: str, problems: Sequence[Problem]) -> None:
        self.environment = environment
        self.check = check
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{environment}: {check}: {len(self.problems)} problem(s)\n{lines}")


class EstimatorCheckError(QuellError):
    """An estimator broke a rule every estimator keeps (``quell.core.estimator``): the check
    that found it and each thing found wrong."""

    def __init__(self, estimator: str, check: str, problems: Sequence[Problem]) -> None:
        self.estimator = estimator
        self.check = check
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{estimator}: {check}: {len(self.problems)} problem(s)\n{lines}")
