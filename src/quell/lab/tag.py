"""Run tags: every process, namespace, cgroup and file a lab run creates carries its tag, so that
teardown and ``quell lab clean`` find exactly what belongs to a run."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

PREFIX = "quell-"
ENV_VAR = "QUELL_RUN_TAG"
RUNTIME_ROOT = Path("/var/tmp/quell")


@dataclass(frozen=True)
class RunTag:
    value: str

    @classmethod
    def new(cls) -> RunTag:
        return cls(secrets.token_hex(3))

    def name(self, part: str) -> str:
        """A tagged name for a namespace or cgroup: ``quell-<tag>-<part>``."""
        return f"{PREFIX}{self.value}-{part}"

    def owns(self, name: str) -> bool:
        return name.startswith(f"{PREFIX}{self.value}-")

    def runtime_dir(self, root: Path = RUNTIME_ROOT) -> Path:
        return root / self.value


def tag_of(name: str) -> str | None:
    """The tag in a tagged name, or None if the name is not quell's."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :]
    tag, sep, _ = rest.partition("-")
    return tag if sep and len(tag) == 6 else None
