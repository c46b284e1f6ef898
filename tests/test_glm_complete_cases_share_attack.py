"""A fit over the complete cases of a table's own columns: weighed as the table is, and still not taken apart.

A pooled fit over a subset of a site's records counts its end there in full (the other sites' own parts over
theirs take it out of the sum: ``tests/test_glm_pooled_share_attack.py``). The complete cases of a model's stored
columns are a subset too, and were counted so: on the messy corpus's three hospitals, whose exports miss a few
ages, BMIs and sexes, the pooled ``y ~ age + bmi + sex + stage`` was refused at two of the three sites
(``disclosure.sums_per_record``: its stage IV records, 14 of them, would answer the end's 36 functions) while the
same fit on the same records loaded without the incomplete ones was released.

Now the records missing a model column as the table stores it leave the fit the table's: it is weighed beside the
other sites by the records it fits, as a fit over a whole table. What must still hold is the attack of
``test_glm_pooled_share_attack`` with the subset made by missing values instead of a condition: the attacked
site's table of 60 records keeps its score and age at the ten records of the age band 43-53 and misses both at
the other 50, and so do the two other sites' tables of 1,000 (163 and 169 records in the band); the analyst fits
``y ~ score``, ``y ~ age``, ``y ~ score + age`` over the three whole tables, relayed, and subtracts the two large
sites' own parts. The ten records' fit is outnumbered by the other
sites' counts, so its end counts there as a share (``disclosure.glm_peer_ratio``) and the first fit is refused:
nothing is read. The control counts the end nowhere: all ten read. Shipped default rules.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses.glm import ds_glm
from dsfed_server.disclosure.checks import Guard
from dsfed_server.messy import write_corpus
from rref import r_reference
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_pooled_share_attack import read, site_end
from test_glm_study_fit_attack import FITS, HI, LO


def _band_only(frame: pd.DataFrame) -> pd.DataFrame:
    """Score and age kept at the records of the age band only, missing (as exported) at the others."""
    out = frame.copy()
    outside = (out.age < LO) | (out.age >= HI)
    out.loc[outside, ["score", "age"]] = np.nan
    return out


def releases(session) -> tuple[dict, list[str]]:
    """The band's moments through the whole table (its complete cases are the band), and each fit's end at the
    attacked site: the sums over the three tables less the other sites' own parts."""
    session.assign_table("D", "P.t")
    own = session.site_view("s1")
    own.assign_expr("g", 'glmSLMADS.assign(y ~ score + age, "gaussian", NULL, NULL, "D")')
    g = own.aggregate_expr('glmSLMADS2(y ~ score + age, "gaussian", NULL, NULL, "g", "D")')["s1"]
    xtx = np.linalg.inv(np.asarray(g["cov.unscaled"], float))
    xty = xtx @ np.asarray(g["coefficients"], float)[:, 0]
    out: dict = {"n": round(xtx[0, 0]), "xtx": xtx, "xty": xty, "y": (xty[0], xty[0])}
    refusals: list[str] = []
    try:
        for formula, columns in FITS:
            beta, info, score, _ = site_end(session, session, ("s2", "s3"), formula, "D")
            out[formula] = (beta, info, score, columns)
    except FederatedCallError as exc:
        refusals += [f"{site}: {e.rule or e.kind}" for site, e in exc.failures.items()]
    return out, refusals


def attack(tmp: Path, peers: dict[str, pd.DataFrame] | None = None, secrets: str = "complete cases share"
           ) -> tuple[int, list[str]]:
    """The records of the attacked site's ten complete cases read beside ``peers`` (default: two of 1,000 with
    the same missing values), and the refusals (site: rule)."""
    truth = synthetic_frame(7, 60)
    peers = peers or {"s2": _band_only(synthetic_frame(8, 1000)), "s3": _band_only(synthetic_frame(9, 1000))}
    with fixed_secrets(secrets):
        provisioned, services = make_sites(tmp, {"s1": _band_only(truth), **peers})
    with inprocess_builder(provisioned, services).login() as session:
        found, refusals = releases(session)
    return (read(found, truth) if all(f in found for f, _ in FITS) else 0), refusals


@pytest.mark.slow
def test_a_fit_over_complete_cases_taken_apart_reads_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    read_now, refusals = attack(tmp_path / "now")
    print(f"ATTACK three relayed fits over three tables, ten complete cases at the attacked site, the others' own "
          f"parts subtracted: read {read_now} of 10; refusals {refusals}")
    assert read_now == 0 and refusals == ["s1: disclosure.sums_per_record"]  # at the attacked site only
    monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)  # the control: the end counted nowhere
    read_before, refusals_before = attack(tmp_path / "control")
    print(f"CONTROL the end counted nowhere: read {read_before} of 10")
    assert refusals_before == [] and read_before == 10


R_GLM = """glm_messy_ref <- function(y, age, bmi, sex, stage) {
  na <- function(v) { v[is.na(v)] <- NA_real_; v }
  d <- data.frame(y = y, age = na(age), bmi = na(bmi), sex = factor(na(sex)), stage = factor(na(stage)))
  coef(glm(y ~ age + bmi + sex + stage, family = binomial, data = d))
}"""


def _codes(column: pd.Series) -> np.ndarray:
    """A factor's records as codes in the order of its sorted levels (R's), NaN where missing."""
    levels = sorted(column.dropna().unique())
    return column.map({v: float(k) for k, v in enumerate(levels)}).to_numpy(dtype=float)


def test_a_pooled_fit_on_a_messy_export_equals_R_on_its_complete_cases(tmp_path: Path):
    """The messy corpus's three hospitals (a few ages, BMIs and sexes missing): the pooled fit is released and
    equals R's ``glm`` over the pooled records, which drops the incomplete ones itself."""
    frames = {s.name: s.truth[["y", "age", "bmi", "sex", "stage"]].reset_index(drop=True)
              for s in write_corpus(tmp_path / "corpus", dataset="three_hospitals", seed=37)}
    assert all(f.isna().any(axis=None) for f in frames.values())
    with inprocess_builder(*make_sites(tmp_path, frames)).login() as session:
        session.assign_table("D", "P.t")
        fit = ds_glm(session, "y ~ age + bmi + sex + stage", "D", secure=True)
    pooled = pd.concat(frames.values(), ignore_index=True)
    expected = r_reference("glm_messy_ref", R_GLM, y=pooled.y.to_numpy(dtype=float),
                           age=pooled.age.to_numpy(dtype=float), bmi=pooled.bmi.to_numpy(dtype=float),
                           sex=_codes(pooled.sex), stage=_codes(pooled.stage))
    np.testing.assert_allclose(fit.params.to_numpy(), np.asarray(expected), rtol=1e-6, atol=1e-9)
