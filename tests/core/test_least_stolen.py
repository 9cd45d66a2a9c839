"""Runs spoiled by the machine's own CPU steal are run again, and none is thrown away."""

from __future__ import annotations

from collections.abc import Iterator

from quell.experiment.run import least_stolen


def _runs(steals: list[float | None]) -> tuple[Iterator[int], list[int]]:
    """Runs numbered 0, 1, ... whose steal is ``steals[k]``; the list records each started."""
    started: list[int] = []

    def gen() -> Iterator[int]:
        for k in range(len(steals)):
            started.append(k)
            yield k

    return gen(), started


def test_the_first_run_within_the_bound_is_kept_and_no_more_run() -> None:
    steals = [2.0, 0.3, 0.1]
    runs, started = _runs(steals)
    refused: list[int] = []
    kept, over = least_stolen(
        lambda: next(runs), lambda k: steals[k], 0.5, 3, on_refused=refused.append
    )
    assert (kept, over, started, refused) == (1, [0], [0, 1], [0])


def test_every_run_over_the_bound_keeps_the_least_stolen() -> None:
    steals = [2.0, 0.9, 1.5]
    runs, started = _runs(steals)
    kept, over = least_stolen(lambda: next(runs), lambda k: steals[k], 0.5, 3)
    assert (kept, over, started) == (1, [0, 1, 2], [0, 1, 2])


def test_a_run_without_a_steal_reading_is_kept_and_the_bound_itself_passes() -> None:
    steals: list[float | None] = [None, 0.5]
    runs, _ = _runs(steals)
    assert least_stolen(lambda: next(runs), lambda k: steals[k], 0.5, 3) == (0, [])
    runs, _ = _runs([0.5])
    assert least_stolen(lambda: next(runs), lambda k: 0.5, 0.5, 3) == (0, [])


def test_one_attempt_runs_once_whatever_its_steal() -> None:
    runs, started = _runs([4.0, 0.0])
    assert least_stolen(lambda: next(runs), lambda k: 4.0, 0.5, 1) == (0, [0])
    assert started == [0]
