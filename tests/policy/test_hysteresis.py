"""The hysteresis machines, transition by transition: the streak and the vote against a brute-force count, the
scale-in trial's pass, failure and backoff, and IC2's five-state chain on the paper's
sequences (Section 4, Fig. 8)."""

from __future__ import annotations

import itertools
from typing import cast

import numpy as np
import pytest

from quell.policy.hysteresis import (
    MAX_TRIAL_BACKOFF,
    ChainState,
    ContextChain,
    Streak,
    Trial,
    TrialStep,
    TwoStateChain,
    Verdict,
    Vote,
)

# -- Streak --------------------------------------------------------------------------------------


@pytest.mark.parametrize("wait", [0, 1, 3])
def test_the_streak_is_due_after_w_plus_1_in_a_row_against_every_sequence(wait: int) -> None:
    for history in itertools.product([False, True], repeat=7):
        streak = Streak(wait)
        for k, holds in enumerate(history):
            due = streak.update(holds)
            run = next((j for j in range(k, -1, -1) if not history[j]), -1)
            assert streak.count_ == k - run
            assert due == (k - run > wait)


def test_a_cleared_streak_counts_again_from_nothing() -> None:
    streak = Streak(1)
    assert [streak.update(True) for _ in range(3)] == [False, True, True]
    streak.clear()
    assert streak.count_ == 0
    assert [streak.update(True) for _ in range(2)] == [False, True]


# -- Vote ----------------------------------------------------------------------------------------


def _brute(history: list[bool], wait: int) -> tuple[int, bool]:
    """The count and verdict by definition: if the last interval held, how many of the last
    2W + 1 did; fires when more than W."""
    if not history[-1]:
        return 0, False
    count = sum(history[-(2 * wait + 1) :])
    return count, count > wait


@pytest.mark.parametrize("wait", [0, 1, 2, 5])
def test_the_vote_counts_w_plus_1_of_the_last_2w_plus_1(wait: int) -> None:
    rng = np.random.default_rng(wait)
    vote = Vote(wait)
    history: list[bool] = []
    for p in rng.uniform(0.2, 0.8, 400).tolist():
        holds = bool(rng.random() < p)
        history.append(holds)
        fired = vote.update(holds)
        assert (vote.count_, fired) == _brute(history, wait)
        if fired and rng.random() < 0.5:  # the action taken: the vote starts afresh
            vote.clear()
            history = []


def test_the_vote_counts_every_sequence_of_five_as_defined() -> None:
    for seq in itertools.product([False, True], repeat=5):
        vote = Vote(1)
        got = [(vote.update(h), vote.count_) for h in seq]
        want = [_brute(list(seq[: n + 1]), 1)[::-1] for n in range(5)]
        assert got == want, seq


def test_a_steady_condition_fires_after_w_further_intervals_and_noise_does_not_reset_it() -> None:
    vote = Vote(2)
    assert [vote.update(True) for _ in range(3)] == [False, False, True]
    vote.clear()
    assert len(vote.held_) == 0 and vote.count_ == 0
    # held, missed, held, held: 3 of the last 5 (W = 2), though never 3 in a row
    assert [vote.update(h) for h in (True, False, True, True)] == [False, False, False, True]
    assert vote.count_ == 3


def test_the_vote_counts_with_the_w_of_each_update_within_its_memory() -> None:
    vote = Vote(0, longest_wait=3)
    assert vote.held_.maxlen == 7
    history = [True, False, True, True, False, True, True, True, False, True]
    for n, holds in enumerate(history):
        w = n % 4
        fired = vote.update(holds, wait=w)
        assert (vote.count_, fired) == _brute(history[: n + 1], w), n
    assert vote.wait == 0 and vote.longest_wait == 3


def test_a_vote_that_does_not_hold_now_counts_nothing() -> None:
    vote = Vote(1)
    vote.update(True)
    vote.update(True)
    assert vote.update(False) is False and vote.count_ == 0
    assert vote.update(True) is True and vote.count_ == 2  # 2 of the last 3


# -- Trial ---------------------------------------------------------------------------------------


def _run(trial: Trial, steps: list[tuple[bool, bool]]) -> list[TrialStep]:
    return [trial.step(short, spare) for short, spare in steps]


CARRY_SPARE = (False, True)
CARRY_TIGHT = (False, False)
SHORT = (True, False)


def test_a_trial_passes_after_its_length_with_spare_and_resets_the_backoff() -> None:
    trial = Trial(length=3, patience=1)
    trial.failures_ = 2
    trial.start()
    assert trial.on_ and trial.runs_ == 0
    assert _run(trial, [CARRY_SPARE, SHORT, CARRY_SPARE]) == ["on", "on", "passed"]
    assert not trial.on_ and trial.failures_ == 0 and trial.runs_ == 0


def test_a_trial_fails_after_more_than_patience_short_intervals_in_a_row() -> None:
    trial = Trial(length=10, patience=1)
    trial.start()
    assert _run(trial, [SHORT, CARRY_SPARE, SHORT, SHORT]) == ["on", "on", "on", "failed"]
    assert not trial.on_ and trial.failures_ == 1 and trial.short_runs_ == 0
    trial.start()
    assert _run(trial, [SHORT]) == ["on"]  # the count of short intervals starts afresh


def test_a_trial_that_ends_without_spare_fails() -> None:
    trial = Trial(length=2, patience=0)
    trial.start()
    assert _run(trial, [CARRY_SPARE, CARRY_TIGHT]) == ["on", "failed"]
    assert trial.failures_ == 1


def test_a_trial_that_ends_short_goes_on_until_it_carries_or_runs_out_of_patience() -> None:
    trial = Trial(length=2, patience=2)
    trial.start()
    assert _run(trial, [CARRY_SPARE, SHORT, SHORT, CARRY_SPARE]) == ["on", "on", "on", "passed"]
    assert trial.runs_ == 0
    trial.start()
    assert _run(trial, [CARRY_SPARE, SHORT, CARRY_TIGHT]) == ["on", "on", "failed"]
    trial.start()
    assert _run(trial, [SHORT, SHORT, SHORT]) == ["on", "on", "failed"]
    assert trial.failures_ == 2


def test_each_failure_doubles_the_wait_up_to_the_cap_and_a_pass_resets_it() -> None:
    trial = Trial(length=1, patience=0)
    waits = [trial.wait(1)]
    for _ in range(MAX_TRIAL_BACKOFF + 2):
        trial.start()
        assert trial.step(*CARRY_TIGHT) == "failed"
        waits.append(trial.wait(1))
    # W = 1: W + 1 = 2 intervals, doubled per failure, up to 2**4 x
    assert waits == [1, 3, 7, 15, 31, 31, 31]
    assert trial.failures_ == MAX_TRIAL_BACKOFF
    assert trial.wait(1, failures=MAX_TRIAL_BACKOFF) == 31 and trial.wait(0, failures=0) == 0
    trial.start()
    assert trial.step(*CARRY_SPARE) == "passed" and trial.wait(1) == 1


def test_a_trial_failed_or_cancelled_from_outside() -> None:
    trial = Trial(length=4, patience=1, max_backoff=1)
    trial.start()
    trial.step(*CARRY_SPARE)
    trial.fail()
    assert (trial.on_, trial.runs_, trial.failures_) == (False, 0, 1)
    trial.start()
    trial.fail()
    assert trial.failures_ == 1  # capped at max_backoff
    trial.start()
    trial.step(*SHORT)
    trial.cancel()
    assert (trial.on_, trial.runs_, trial.short_runs_, trial.failures_) == (False, 0, 0, 1)
    trial.reset()
    assert trial.failures_ == 0
    assert (trial.length, trial.patience, trial.max_backoff) == (4, 1, 1)


# -- ContextChain (IC2, Fig. 8) ------------------------------------------------------------------


def _walk(chain: ContextChain, verdicts: str) -> list[tuple[ChainState, ChainState | None]]:
    """The state after each verdict of ``verdicts`` (space-separated) and what it fired."""
    out = []
    for v in cast("list[Verdict]", verdicts.split()):
        fired = chain.step(v)
        out.append((chain.state_, fired))
    return out


def test_three_interference_verdicts_from_ni2_fire_on_entering_i2() -> None:
    """The paper's example: No-interference → Transient → Interference → Interference."""
    chain = ContextChain()
    assert (chain.state_, chain.config_) == ("NI2", "NI2")
    assert _walk(chain, "I I I") == [("T", None), ("I1", None), ("I2", "I2")]
    assert chain.config_ == "I2"
    assert _walk(chain, "I") == [("I2", None)]  # staying fires nothing
    assert _walk(chain, "NI NI NI") == [("T", None), ("NI1", None), ("NI2", "NI2")]


def test_two_successive_periods_of_one_class_fire_from_the_transient_state() -> None:
    chain = ContextChain()
    assert _walk(chain, "T I I") == [("T", None), ("I1", None), ("I2", "I2")]
    assert _walk(chain, "T NI NI") == [("T", None), ("NI1", None), ("NI2", "NI2")]


def test_a_single_misclassification_does_not_fire() -> None:
    chain = ContextChain()
    assert _walk(chain, "NI I NI NI NI") == [
        ("NI2", None),
        ("T", None),
        ("NI1", None),
        ("NI2", None),  # back in the configuration in force: nothing to do
        ("NI2", None),
    ]
    assert _walk(chain, "I I NI I") == [("T", None), ("I1", None), ("NI1", None), ("I1", None)]
    assert chain.config_ == "NI2"


def test_the_transient_class_restarts_the_count_from_every_state() -> None:
    starts: list[ChainState] = ["NI2", "NI1", "T", "I1", "I2"]
    for start in starts:
        chain = ContextChain(start)
        assert chain.step("T") is None and chain.state_ == "T", start
    chain = ContextChain()
    assert _walk(chain, "I I T I T I I") == [
        ("T", None),
        ("I1", None),
        ("T", None),
        ("I1", None),
        ("T", None),
        ("I1", None),
        ("I2", "I2"),
    ]


def test_every_edge_of_the_chain() -> None:
    edges: dict[tuple[ChainState, Verdict], ChainState] = {
        ("NI2", "NI"): "NI2",
        ("NI2", "T"): "T",
        ("NI2", "I"): "T",
        ("NI1", "NI"): "NI2",
        ("NI1", "T"): "T",
        ("NI1", "I"): "I1",
        ("T", "NI"): "NI1",
        ("T", "T"): "T",
        ("T", "I"): "I1",
        ("I1", "NI"): "NI1",
        ("I1", "T"): "T",
        ("I1", "I"): "I2",
        ("I2", "NI"): "T",
        ("I2", "T"): "T",
        ("I2", "I"): "I2",
    }
    for (start, verdict), end in edges.items():
        chain = ContextChain(start)
        fired = chain.step(verdict)
        assert chain.state_ == end, (start, verdict)
        # only a move into the other steady state fires (a start in NI1, T or I1 has none in
        # force, so entering either fires)
        entered = end in ("I2", "NI2") and end != start
        assert fired == (end if entered else None), (start, verdict)
        assert chain.initial == start


def test_a_chain_started_between_the_steady_states_fires_on_its_first_entry() -> None:
    chain = ContextChain("T")
    assert chain.config_ is None
    assert _walk(chain, "NI NI") == [("NI1", None), ("NI2", "NI2")]


# -- TwoStateChain (IC2 on the paper's testbed) -------------------------------------------------


def test_the_two_state_chain_fires_on_the_first_verdict_of_the_other_class() -> None:
    chain = TwoStateChain()
    got = [(chain.step(v), chain.state_) for v in ["NI", "I", "T", "I", "NI", "T", "NI", "I"]]
    assert got == [
        (None, "NI2"),
        ("I2", "I2"),
        (None, "I2"),  # T stays
        (None, "I2"),  # already in force
        ("NI2", "NI2"),
        (None, "NI2"),
        (None, "NI2"),
        ("I2", "I2"),
    ]
    assert TwoStateChain("I2").step("I") is None
