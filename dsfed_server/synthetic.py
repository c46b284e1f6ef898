"""Synthetic sites in the ``opal_fixtures`` layout, for tests, simulations and benchmarks.

Designs:

``seed000``
    The simulation design of Schalk, Rehms et al. (2024), "Data generation":
    scores :math:`F_i \\sim U[0, 1]`, labels :math:`y_i = 1(F_i \\ge 0.5)`, then a
    fraction :math:`\\gamma \\sim U[0.5, 1]` of the labels replaced by
    :math:`\\mathrm{Ber}(0.5)` draws, which spreads the AUC over (0.5, 1).
``binormal``
    Latent :math:`x \\sim N(0, 1)` for negatives and :math:`N(\\mu, 1)` for
    positives with :math:`\\mu = \\sqrt 2\\, \\Phi^{-1}(\\mathrm{AUC})`, so the
    true AUC is the one asked for; ``score`` is the probability
    :math:`\\mathrm{expit}(x - \\mu/2 + \\mathrm{logit}(\\pi))` and covariates
    ``x1`` (continuous) and ``x2`` (binary) carry signal for model fitting.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special, stats

from dsfed_server.dictionary import Variable, write_dictionary

PROJECT = "SYNTH"
TABLE = "validation"


def seed000_scores(n: int, rng: np.random.Generator) -> pd.DataFrame:
    score = rng.uniform(0.0, 1.0, n)
    y = (score >= 0.5).astype(np.int64)
    gamma = rng.uniform(0.5, 1.0)
    flip = rng.choice(n, size=int(gamma * n), replace=False)
    y[flip] = rng.binomial(1, 0.5, flip.size)
    return pd.DataFrame({"y": y, "score": score})


def binormal(n: int, rng: np.random.Generator, auc: float, prevalence: float) -> pd.DataFrame:
    y = rng.binomial(1, prevalence, n).astype(np.int64)
    mu = np.sqrt(2.0) * stats.norm.ppf(auc)
    latent = rng.normal(0.0, 1.0, n) + mu * y
    score = special.expit(latent - mu / 2 + special.logit(prevalence))
    x1 = latent + rng.normal(0.0, 1.0, n)
    x2 = (rng.uniform(size=n) < special.expit(latent)).astype(np.int64)
    return pd.DataFrame({"y": y, "score": score, "x1": x1, "x2": x2})


_VARIABLES = {
    "y": Variable("y", "integer", "", "outcome (1 = event of interest)", ("0", "1")),
    "score": Variable("score", "decimal", "", "predicted probability of y = 1", (), (0.0, 1.0)),
    "x1": Variable("x1", "decimal", "", "continuous covariate", (), (-25.0, 25.0)),
    "x2": Variable("x2", "integer", "", "binary covariate", ("0", "1")),
}


def write_sites(
    out: Path,
    *,
    n_sites: int,
    n_per_site: int | list[int],
    design: str = "seed000",
    seed: int = 1,
    auc: float = 0.8,
    prevalence: float = 0.3,
    fmt: str = "csv",
) -> list[Path]:
    """Write ``out/site<k>/SYNTH/validation.{csv,parquet}`` with dictionaries; returns the site dirs.

    For ``seed000`` the sites are a random split of one simulated data set,
    as in the paper (one label-flipping fraction for all sites).
    """
    sizes = [n_per_site] * n_sites if isinstance(n_per_site, int) else list(n_per_site)
    rng = np.random.default_rng(seed)
    total = int(sum(sizes))
    if design == "seed000":
        pooled = seed000_scores(total, rng)
    elif design == "binormal":
        pooled = binormal(total, rng, auc, prevalence)
    else:
        raise ValueError(f"unknown design {design!r}")
    pooled = pooled.iloc[rng.permutation(total)].reset_index(drop=True)
    bounds = np.cumsum([0] + sizes)
    dirs = []
    for k in range(len(sizes)):
        site_dir = out / f"site{k + 1}"
        project = site_dir / PROJECT
        project.mkdir(parents=True, exist_ok=True)
        part = pooled.iloc[bounds[k] : bounds[k + 1]].reset_index(drop=True)
        if fmt == "parquet":
            part.to_parquet(project / f"{TABLE}.parquet", index=False)
        else:
            part.to_csv(project / f"{TABLE}.csv", index=False, float_format="%.17g")
        write_dictionary(project / f"{TABLE}.dictionary.json", PROJECT, TABLE, [_VARIABLES[c] for c in part.columns])
        dirs.append(site_dir)
    return dirs
