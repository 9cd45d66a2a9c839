"""The checks every estimator keeps (the models, the detector, the attribution models, the
probe's table), run over each of them the way scikit-learn's ``check_estimator`` runs over
every estimator and ``quell.core.contract`` runs over every Environment.

An ``EstimatorCase`` tells the checks how to make the estimator (its class and the parameters
given), two data sets to fit it on, what a fitted one predicts, and inputs its ``fit`` must
refuse. A check returns ``None`` when the estimator kept the rule, or a sentence saying why
the rule does not apply to it; anything found wrong raises ``EstimatorCheckError`` listing
every problem.

What the checks hold an estimator to:

* **Parameters as given.** The constructor stores each parameter under its own name, the very
  object given (a default as it stands in the signature), and nothing else that is public: no
  validation that changes a value, no learned state. ``fit`` leaves the parameters as they were.
* **Learned state.** Everything ``fit`` learns that is public ends in ``_``; none of it exists
  before ``fit``. ``fit`` returns the estimator itself.
* **Same seed, same result.** Two estimators made alike and fitted on the same data learn the
  same state and predict the same, to the bit.
* **Refitting forgets.** Fitted on one data set and then another, an estimator holds exactly
  what one fitted only on the second holds: the same attributes, the same values, the same
  predictions.
* **Bad input.** Each input the case names as bad is refused by ``fit`` with ``InputError``
  (every problem at once is the error's business), and a fitted estimator refused a bad refit
  keeps its last fit: it predicts as before. Bad parameters are refused by ``fit`` too (the
  constructor only stores them).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quell.errors import EstimatorCheckError, InputError, Problem

FitArgs = tuple[tuple[Any, ...], Mapping[str, Any]]
"""Positional and keyword arguments of one call of ``fit``."""


@dataclass(frozen=True)
class EstimatorCase:
    """One estimator as the checks make it.

    ``make(**params)`` builds it (usually the class itself); ``data(k)`` gives the arguments of
    ``fit`` for data set ``k`` (0 or 1; the two must differ); ``predict(fitted)`` what it
    predicts from them, as numbers (arrays, tuples of arrays); ``bad`` the inputs ``fit`` must
    refuse, each with a name."""

    name: str
    make: Callable[..., Any]
    data: Callable[[int], FitArgs]
    predict: Callable[[Any], Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    bad: Sequence[tuple[str, FitArgs]] = ()
    bad_params: Sequence[tuple[str, Mapping[str, Any]]] = ()
    """Parameters with which ``fit`` (on data set 0) must refuse, each with a name: a
    constructor stores what it is given, so ``fit`` is where parameters are checked."""
    data_sets: int = 2
    """1 for an estimator whose ``fit`` takes no data (what it learns from are its
    parameters): refitting it must then give what one fit gives."""

    def build(self) -> Any:
        return self.make(**self.params)

    def fit(self, est: Any, k: int) -> Any:
        args, kwargs = self.data(k)
        return est.fit(*args, **kwargs)


def _fail(case: EstimatorCase, check: str, problems: list[Problem]) -> None:
    if problems:
        raise EstimatorCheckError(case.name, check, problems)


def _parameters(case: EstimatorCase) -> dict[str, Any]:
    """The constructor's parameters: the given ones, else the signature's defaults."""
    out: dict[str, Any] = {}
    for p in inspect.signature(case.make).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in case.params:
            out[p.name] = case.params[p.name]
        elif p.default is not p.empty:
            out[p.name] = p.default
    return out


def _public(est: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(est).items() if not k.startswith("_")}


def _learned(est: Any) -> dict[str, Any]:
    """What ``fit`` left on the estimator, private attributes included."""
    names = set(_parameters_of(est))
    return {k: v for k, v in vars(est).items() if k not in names}


def _parameters_of(est: Any) -> list[str]:
    return [
        p.name
        for p in inspect.signature(type(est)).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def same(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two values differ, as paths; empty when they are the same to the bit. Arrays by
    dtype, shape and value (NaN equal to NaN); containers and dataclasses item by item; plain
    objects of quell by their attributes; an object of another library is compared by what the
    estimator predicts, not here."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return [
                f"{path or 'value'}: array against {type(b if isinstance(a, np.ndarray) else a).__name__}"
            ]
        if a.dtype != b.dtype or a.shape != b.shape:
            return [f"{path or 'value'}: {a.dtype}{a.shape} against {b.dtype}{b.shape}"]
        eq_nan = a.dtype.kind in "fc"
        return (
            [] if np.array_equal(a, b, equal_nan=eq_nan) else [f"{path or 'value'}: values differ"]
        )
    if type(a) is not type(b):
        return [f"{path or 'value'}: {type(a).__name__} against {type(b).__name__}"]
    if isinstance(a, float | np.floating):
        return [] if a == b or (a != a and b != b) else [f"{path or 'value'}: {a!r} against {b!r}"]
    if isinstance(a, Mapping):
        if set(a) != set(b):
            return [f"{path or 'value'}: keys {sorted(map(str, a))} against {sorted(map(str, b))}"]
        return [d for k in a for d in same(a[k], b[k], f"{path}[{k!r}]")]
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [f"{path or 'value'}: {len(a)} items against {len(b)}"]
        return [
            d for k, (x, y) in enumerate(zip(a, b, strict=True)) for d in same(x, y, f"{path}[{k}]")
        ]
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return [
            d
            for f in dataclasses.fields(a)
            for d in same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
        ]
    if type(a).__module__.startswith("quell.") and hasattr(a, "__dict__"):
        return same(vars(a), vars(b), path)
    if type(a).__module__ == "builtins" or isinstance(a, np.generic):
        return [] if a == b else [f"{path or 'value'}: {a!r} against {b!r}"]
    return []


def check_parameters_as_given(case: EstimatorCase) -> str | None:
    """The constructor stores every parameter as given and nothing else public; ``fit``
    leaves them as they were."""
    problems: list[Problem] = []
    given = _parameters(case)
    est = case.build()
    public = _public(est)
    for name, value in given.items():
        if name not in public:
            problems.append(Problem(name, "not stored under its own name"))
        elif public[name] is not value:
            problems.append(Problem(name, f"stored as {public[name]!r}, given {value!r}"))
    for name in sorted(set(public) - set(given)):
        problems.append(Problem(name, "set by the constructor but not one of its parameters"))
    before = copy.deepcopy(given)
    case.fit(est, 0)
    for name, value in given.items():
        if getattr(est, name, None) is not value:
            problems.append(Problem(name, "replaced by fit"))
        else:
            problems.extend(
                Problem(name, f"changed by fit: {d}") for d in same(before[name], value)
            )
    _fail(case, "check_parameters_as_given", problems)
    return None


def check_learned_state(case: EstimatorCase) -> str | None:
    """``fit`` returns the estimator; what it learns that is public ends in ``_`` and does not
    exist before it."""
    problems: list[Problem] = []
    est = case.build()
    early = sorted(k for k in vars(est) if k.endswith("_") and not k.startswith("_"))
    problems.extend(Problem(k, "exists before fit") for k in early)
    params = set(_parameters(case))
    returned = case.fit(est, 0)
    if returned is not est:
        problems.append(Problem("fit", f"returns {type(returned).__name__}, not the estimator"))
    for name in sorted(set(_public(est)) - params):
        if not name.endswith("_"):
            problems.append(Problem(name, "learned by fit but its name has no trailing '_'"))
    _fail(case, "check_learned_state", problems)
    return None


def _state(est: Any, case: EstimatorCase) -> tuple[dict[str, Any], Any]:
    return _learned(est), case.predict(est)


def _compare(
    left: tuple[dict[str, Any], Any], right: tuple[dict[str, Any], Any], what: str
) -> list[Problem]:
    (la, lp), (ra, rp) = left, right
    problems = [Problem(what, f"attribute {k} only in one") for k in sorted(set(la) ^ set(ra))]
    for k in sorted(set(la) & set(ra)):
        problems.extend(Problem(what, d) for d in same(la[k], ra[k], k))
    problems.extend(Problem(what, f"prediction {d}") for d in same(lp, rp, ""))
    return problems


def check_same_seed(case: EstimatorCase) -> str | None:
    """Two made alike, fitted alike: the same learned state and the same predictions."""
    a, b = case.build(), case.build()
    case.fit(a, 0)
    case.fit(b, 0)
    _fail(case, "check_same_seed", _compare(_state(a, case), _state(b, case), "two fits"))
    return None


def check_refit_forgets(case: EstimatorCase) -> str | None:
    """Fitted on data set 0 then 1, it holds what one fitted only on 1 holds."""
    problems: list[Problem] = []
    last = case.data_sets - 1
    once, twice = case.build(), case.build()
    case.fit(once, last)
    case.fit(twice, 0)
    first = case.predict(twice)
    case.fit(twice, last)
    if last and not same(first, case.predict(once)):
        problems.append(Problem("data", "data sets 0 and 1 give the same predictions: no test"))
    problems.extend(_compare(_state(twice, case), _state(once, case), "refit"))
    _fail(case, "check_refit_forgets", problems)
    return None if last else "fit takes no data: refitting gives what one fit gives"


def check_bad_input(case: EstimatorCase) -> str | None:
    """Each bad input: ``InputError`` from ``fit``; a fitted estimator keeps its last fit.
    Each bad parameter set: ``InputError`` from ``fit``."""
    if not case.bad and not case.bad_params:
        return "the case names no bad input"
    problems: list[Problem] = []
    for label, params in case.bad_params:
        try:
            case.fit(case.make(**params), 0)
        except InputError:
            continue
        except Exception as exc:  # the point of the check: anything else is a problem
            problems.append(Problem(label, f"{type(exc).__name__}, not InputError: {exc}"))
        else:
            problems.append(Problem(label, "accepted"))
    est = case.build()
    case.fit(est, 0)
    before = _state(est, case)
    for label, (args, kwargs) in case.bad:
        try:
            est.fit(*args, **kwargs)
        except InputError:
            pass
        except Exception as exc:  # the point of the check: anything else is a problem
            problems.append(Problem(label, f"{type(exc).__name__}, not InputError: {exc}"))
            continue
        else:
            problems.append(Problem(label, "accepted"))
            continue
        problems.extend(_compare(_state(est, case), before, f"{label}, after the refusal"))
    _fail(case, "check_bad_input", problems)
    return None


CHECKS: tuple[Callable[[EstimatorCase], str | None], ...] = (
    check_parameters_as_given,
    check_learned_state,
    check_same_seed,
    check_refit_forgets,
    check_bad_input,
)


@dataclass(frozen=True)
class CheckResult:
    check: str
    outcome: str
    """``passed``, or why the check does not apply."""


def run_checks(case: EstimatorCase) -> list[CheckResult]:
    """Every check over one case; the first that finds a problem raises."""
    return [CheckResult(c.__name__, c(case) or "passed") for c in CHECKS]
