"""dsBase's histogram at its default 20 breaks, pooled: each site alone refuses
it (20 bins are more than ``factor_levels_density`` allows for ~50 records), but under secure
aggregation the sites check the pooled count against the density rule and the pooled bins against
q, and the pooled histogram equals R's ``hist`` on the pooled records. On GBSG2's ages the pooled
tails hold 1 to 3 records: sites that refuse small bins refuse it, naming the rule; sites that merge
them release coarser breaks, whose counts again equal R's ``hist`` over those breaks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, GBSG2_SITES, inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from rref import r_eval
from sitekit import make_sites, rules_variant

BREAKS = 20  # ds.histogram's default num.breaks


def r_hist(values: np.ndarray, breaks: list[float]) -> dict[str, list[float]]:
    """R's ``hist(x, breaks, plot = FALSE)`` on ``values``."""
    n = len(breaks) - 1
    out = r_eval("h <- hist(x, breaks = b, plot = FALSE); c(h$counts, h$density, h$mids)", x=values,
                 b=np.asarray(breaks, dtype=float))
    return {"counts": out[:n].tolist(), "density": out[n:2 * n].tolist(), "mids": out[2 * n:].tolist()}


def _range(session, column: str) -> tuple[float, float]:
    """ds.histogram's range: the lowest and highest of the sites' histogramDS1 ranges."""
    ranges = session.aggregate_expr(f"histogramDS1(D${column}, 1, 3, 0.25)").values()
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


def test_pooled_20_breaks_equal_R_hist_where_each_site_refuses(tmp_path):
    """Five sites of 50 values spread evenly over [0, 100]: 12 or 13 per pooled bin."""
    frames = {f"s{k}": pd.DataFrame({"x": (np.arange(50) * 5 + k + 0.5) * 0.4}) for k in range(5)}
    pooled = pd.concat(frames.values())["x"].to_numpy()
    with inprocess_builder(*make_sites(tmp_path, frames)).login() as session:
        session.assign_table("D", "P.t")
        lo, hi = _range(session, "x")
        call = f"histogramDS2(D$x, {BREAKS}, {lo!r}, {hi!r}, 1, 3, 0.25)"
        with pytest.raises(FederatedCallError) as exc:
            session.aggregate_expr(call)
        assert {e.rule for e in exc.value.failures.values()} == {"disclosure.factor_levels_density"}
        assert len(exc.value.failures) == 5
        released = session.pooled("histogramDS2", Ref("D$x"), BREAKS, lo, hi, 1, 3, 0.25)
    h = released["histobject"]
    breaks = r_eval(f"seq({lo!r}, {hi!r}, by = ({hi!r} - {lo!r}) / {BREAKS})").tolist()
    want = r_hist(pooled, breaks)
    assert h["breaks"] == breaks and h["counts"] == want["counts"] and released["invalidcells"] == 0
    np.testing.assert_allclose(h["density"], want["density"], rtol=1e-14)
    np.testing.assert_allclose(h["mids"], want["mids"], rtol=1e-14)


@pytest.fixture(scope="module")
def gbsg2_policies(tmp_path_factory):
    """The five GBSG2 sites with the default rules, small bins refused or merged."""
    out = {}
    for policy in ("refuse", "merge"):
        run = tmp_path_factory.mktemp(f"hist-{policy}")
        rules = rules_variant(run / "rules.toml", small_bin_policy=f'"{policy}"')
        provisioned = provision(run, {s: (FIXTURES / s, rules) for s in GBSG2_SITES})
        out[policy] = provisioned, {n: SiteService.from_config_file(p.config) for n, p in provisioned.items()}
    return out


def test_gbsg2_ages_pooled_tails_are_refused_or_merged(gbsg2_policies, gbsg2_pooled):
    ages = gbsg2_pooled["age"].to_numpy(dtype=float)
    with inprocess_builder(*gbsg2_policies["refuse"]).login() as session:
        session.assign_table("D", "GBSG2.validation")
        lo, hi = _range(session, "age")
        with pytest.raises(FederatedCallError) as exc:
            session.pooled("histogramDS2", Ref("D$age"), BREAKS, lo, hi, 1, 3, 0.25)
    assert {e.rule for e in exc.value.failures.values()} == {"bins.small_bin_policy"}
    assert all("pooled over the sites" in e.message for e in exc.value.failures.values())
    with inprocess_builder(*gbsg2_policies["merge"]).login() as session:
        session.assign_table("D", "GBSG2.validation")
        h = session.pooled("histogramDS2", Ref("D$age"), BREAKS, lo, hi, 1, 3, 0.25)["histobject"]
    requested = r_eval(f"seq({lo!r}, {hi!r}, by = ({hi!r} - {lo!r}) / {BREAKS})").tolist()
    assert set(h["breaks"]) < set(requested) and h["breaks"][0] == lo and h["breaks"][-1] == hi
    want = r_hist(ages, h["breaks"])
    assert h["counts"] == want["counts"] and sum(h["counts"]) == ages.size
    assert all(n == 0 or n >= 5 for n in h["counts"])
    np.testing.assert_allclose(h["density"], want["density"], rtol=1e-14)
