"""``quantileMeanDS``: quantiles by R's type 7, computed in R through the rpy2 bridge."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pandas as pd

from dsfed_server import rbridge
from dsfed_server.context import CallContext, numeric
from dsfed_server.disclosure.checks import SUM_RULES
from dsfed_server.disclosure.declared import Declared
from dsfed_server.registry import P, Param, register

PROBS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)

_r_quantile = rbridge.r_function(
    "dsfed_quantile7",
    "function(x, p) stats::quantile(x, probs = p, type = 7, names = FALSE)",
)


@register(
    "quantileMeanDS",
    "aggregate",
    [Param("x", P.VECTOR, "a numeric vector, e.g. D$age")],
    checks=(*SUM_RULES, "disclosure.quantile_min_multiple", "disclosure.derived_concentration"),
    backend="R",
)
def quantile_mean(ctx: CallContext, x: pd.Series) -> Generator[Declared, Any, dict[str, Any]]:
    """The 5, 10, 25, 50, 75, 90 and 95 % quantiles (R ``quantile(type = 7)``) and the mean.

    Same shape as dsBase's ``quantileMeanDS``: names ``"5%"`` ... ``"95%"``,
    ``"Mean"``. Refused when fewer than ``quantile_min_multiple`` x q values are non-missing:
    eight statistics on about eight values give most of them exactly; and for a column computed from
    several columns, or turning with its column, whose quantiles would link or enumerate records.
    """
    ctx.guard.order_of_one_root(ctx.meaning(x), "quantiles")
    values = numeric(x)
    valid = values[~np.isnan(values)]
    ctx.guard.min_count(valid.size, "valid values")
    ctx.guard.order_statistics(valid.size)
    yield from ctx.quantiles(x)
    yield from ctx.summed(x)  # the mean
    q = _r_quantile(valid, np.asarray(PROBS))
    out: dict[str, Any] = {f"{round(p * 100):d}%": float(v) for p, v in zip(PROBS, q)}
    out["Mean"] = float(valid.mean())
    return out
