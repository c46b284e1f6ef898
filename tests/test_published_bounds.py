"""A function's parameter bounds are published with it (``/v1/functions``) and the client reads them
before an analysis spends anything: ``ds_roc_glm(n_thresholds=5000)`` against sites whose
``rocGlmDataDS`` takes at most 1000 thresholds is refused, naming every site and the bound, before the
noisy scores are drawn -- the privacy budget unchanged -- where it used to spend the noisy scores first
and be refused after; ``ds_hist_auc`` likewise before its noisy histograms. The client's own
constraints on the parameters the sites bound are the registry's bounds (read from both here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import http_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses.curves import ds_hist_auc
from dsfed_client.analyses.discrimination import ds_roc_glm
from dsfed_client.params import BRANCHING, DECAY, LEVELS, N_BINS, N_GROUPS, N_THRESHOLDS, Constraint, Options
from dsfed_server import functions  # noqa: F401  (registers the function set)
from dsfed_server.registry import REGISTRY
from sitekit import make_sites, serve


def frame(seed: int, n: int = 120) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    score = np.round(rng.uniform(0.02, 0.98, n), 4)
    return pd.DataFrame({"y": (rng.uniform(size=n) < score).astype(np.int64), "score": score})


def spent(session) -> dict[str, float]:
    return {site: sum(t["spent"]["epsilon"] for t in part["tables"]) for site, part in session.budget().items()}


def test_a_grid_a_site_does_not_take_is_refused_before_any_budget_is_spent(tmp_path: Path):
    provisioned, services = make_sites(tmp_path, {"s1": frame(1), "s2": frame(2)})  # default.toml: noise on
    with serve(services["s1"]) as u1, serve(services["s2"]) as u2:
        with http_builder(provisioned, {"s1": u1, "s2": u2}).login() as session:
            session.assign_table("D", "P.t")
            before = spent(session)
            with pytest.raises(FederatedCallError) as refused:
                ds_roc_glm(session, "D$y", "D$score", n_thresholds=5000)
            with pytest.raises(FederatedCallError) as histograms_refused:
                ds_hist_auc(session, "D$y", "D$score", n_thresholds=5000)
            after = spent(session)
            listed = {p["name"]: p for f in session.functions()["s1"]["functions"] if f["name"] == "rocGlmDataDS"
                      for p in f["params"]}
            # the bound published is the bound the site enforces: one above it is refused by the site itself
            with pytest.raises(FederatedCallError) as above:
                session.assign_expr("R", "rocGlmDataDS(D$y, D$score, D, 1001)")
    assert set(refused.value.failures) == {"s1", "s2"}
    failure = refused.value.failures["s1"]
    assert failure.function == "rocGlmDataDS" and "1000" in str(failure) and "5000" in str(failure)
    assert histograms_refused.value.failures["s2"].function == "histRocGlmDataDS"
    assert after == before
    assert (listed["thresholds"]["minimum"], listed["thresholds"]["maximum"]) == (2, 1000)
    assert "above its maximum 1000" in str(above.value.failures["s1"])


# each client constraint on a parameter a site bounds, and the function and parameter it feeds
FEEDS = [(N_GROUPS, "decileGroupsDS", "g"), (N_BINS, "calibrationBinsDS", "bins"), (N_BINS, "decileGroupsDS", "g"),
         (N_THRESHOLDS, "rocGlmDataDS", "thresholds"), (N_THRESHOLDS, "histRocGlmDataDS", "thresholds"),
         (LEVELS, "scoreHistogramDS", "levels"), (BRANCHING, "scoreHistogramDS", "branching"),
         (DECAY, "scoreHistogramDS", "decay")]


@pytest.mark.parametrize("constraints,function,name", FEEDS, ids=[f"{f}.{n}" for _, f, n in FEEDS])
def test_client_constraints_are_the_registry_bounds(constraints: list[Constraint], function: str, name: str):
    """The client refuses nothing a site takes, and takes nothing a site refuses but what the sites'
    published maximum decides (the number of thresholds); N_GROUPS starts at 3, where
    Hosmer-Lemeshow's degrees of freedom do."""
    param = next(p for p in REGISTRY.get(function).params if p.name == name)
    (constraint,) = constraints
    if isinstance(constraint, Options):
        assert constraint.values == set(param.choices)
        return
    assert constraint.left == (3 if constraints is N_GROUPS else param.minimum)
    assert constraint.right == (None if constraints is N_THRESHOLDS else param.maximum)
