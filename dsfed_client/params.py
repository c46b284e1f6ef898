"""Declared parameter constraints, checked before an analysis contacts any site (the pattern of
scikit-learn's ``utils/_param_validation.py``: a table of constraints per function, one shared
check, a message naming the function, the parameter, what was expected and what was given).

Examples
--------
>>> @validate_params({"alpha": [Interval(float, 0, 1, closed="neither")], "kind": [Options({"C", "H"})]})
... def f(x, *, alpha=0.05, kind="C"):
...     return x
>>> f(1, alpha=0.1)
1
>>> try:
...     f(1, alpha=1.0)
... except InvalidParameterError as exc:
...     print(exc)
The 'alpha' parameter of f must be a float in the range (0, 1). Got 1.0 instead.
>>> f(1, kind="D")
Traceback (most recent call last):
...
dsfed_client.params.InvalidParameterError: The 'kind' parameter of f must be one of 'C', 'H'. Got 'D' instead.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class InvalidParameterError(ValueError, TypeError):
    """A parameter outside its declared constraints (a ``ValueError`` and a ``TypeError``, as
    scikit-learn's)."""


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``int`` or ``float``) between ``left`` and ``right`` (``None``:
    unbounded); ``closed`` is ``"both"``, ``"left"``, ``"right"`` or ``"neither"``. A bool is
    never a number here."""

    kind: type
    left: float | None
    right: float | None
    closed: str = "both"

    def is_satisfied_by(self, value: Any) -> bool:
        number = Integral if self.kind is int else Real
        if isinstance(value, bool) or not isinstance(value, number):
            return False
        lo_ok = self.left is None or (value >= self.left if self.closed in ("both", "left") else value > self.left)
        hi_ok = self.right is None or (value <= self.right if self.closed in ("both", "right") else value < self.right)
        return bool(lo_ok and hi_ok)

    def __str__(self) -> str:
        name = "an int" if self.kind is int else "a float"
        lo = "-inf" if self.left is None else f"{self.left:g}"
        hi = "inf" if self.right is None else f"{self.right:g}"
        lb = "[" if self.closed in ("both", "left") and self.left is not None else "("
        rb = "]" if self.closed in ("both", "right") and self.right is not None else ")"
        return f"{name} in the range {lb}{lo}, {hi}{rb}"


@dataclass(frozen=True)
class Options:
    """One of a set of values."""

    values: frozenset[Any] | set[Any]

    def is_satisfied_by(self, value: Any) -> bool:
        return not isinstance(value, (list, dict, set)) and value in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in sorted(self.values, key=str))


@dataclass(frozen=True)
class InstanceOf:
    """An instance of ``kind``."""

    kind: type

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, self.kind)

    def __str__(self) -> str:
        return f"an instance of {self.kind.__name__}"


Constraint = Interval | Options | InstanceOf | None


def _satisfied(constraint: Constraint, value: Any) -> bool:
    return value is None if constraint is None else constraint.is_satisfied_by(value)


def check_params(where: str, values: dict[str, Any], constraints: dict[str, list[Constraint]]) -> None:
    """Raise :class:`InvalidParameterError` for the first value that satisfies none of its constraints."""
    for name, allowed in constraints.items():
        if name in values and not any(_satisfied(c, values[name]) for c in allowed):
            expected = " or ".join("None" if c is None else str(c) for c in allowed)
            raise InvalidParameterError(f"The {name!r} parameter of {where} must be {expected}. "
                                        f"Got {values[name]!r} instead.")


def validate_params(constraints: dict[str, list[Constraint]]) -> Callable[[F], F]:
    """Check the arguments of the decorated function against ``constraints`` before it runs."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        unknown = set(constraints) - set(signature.parameters)
        if unknown:
            raise TypeError(f"constraints for parameters {func.__qualname__} does not take: {sorted(unknown)}")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            check_params(func.__qualname__, bound.arguments, constraints)
            return func(*args, **kwargs)

        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


# the constraints the estimators share
ALPHA = [Interval(float, 0, 1, closed="neither")]
PRIVACY = [Interval(float, 0, None, closed="neither"), None]  # epsilon, delta, sensitivity: None = the site's

# The bounds the sites' registry declares, and publishes (/v1/functions), for the parameter each of
# these feeds (named beside it): the client refuses what a site would refuse, before any call, and
# tests/test_published_bounds.py reads both. The number of thresholds has no bound above here: it
# is each site's published maximum, which the analyses check before the noisy steps that precede
# the thresholds (FederatedSession.require_enabled).
N_GROUPS = [Interval(int, 3, 100)]  # decileGroupsDS g; from 3, as Hosmer-Lemeshow's df = groups - 2 must be positive
N_BINS = [Interval(int, 2, 100)]  # calibrationBinsDS bins; decileGroupsDS g (quantile bins)
N_THRESHOLDS = [Interval(int, 2, None)]  # rocGlmDataDS and histRocGlmDataDS thresholds
LEVELS = [Interval(int, 0, 12)]  # scoreHistogramDS levels
BRANCHING = [Options({2, 4, 8, 16})]  # scoreHistogramDS branching
DECAY = [Interval(float, 0.125, 8)]  # scoreHistogramDS decay
