"""Run directories: everything a run measures, written as it goes (SQLite, one commit per interval)."""

from quell.store.run import RequestRecord, RunStore

__all__ = ["RequestRecord", "RunStore"]
