"""Schalk et al.'s (2024) workflow in the demo: models fitted on the GBSG2 training split, approved by the
validation sites' boards, applied there, validated side by side.

The training split is served by a site of its own (``opal_fixtures/training``, under site1's
rules); the five validation sites never see it. Two models come through the path that carries no
code (:mod:`dsfed_core.models`):

* a logistic regression fitted across the training site by the distributed GLM (``ds_glm``),
  written as a GLM model file (:func:`fit_logistic`; ``opal_fixtures/scripts/fit_glm.py`` wrote
  the shipped file ``opal_fixtures/models/gbsg2-logit.json`` the sites' rules approve);
* an sklearn gradient-boosting model exported to ONNX (``opal_fixtures/scripts/fit_gbm_onnx.py``,
  ``opal_fixtures/models/gbsg2-gbm.onnx``, approved by its SHA-256 too).

The fixture's own score column (Schalk et al.'s (2024) ranger forest) stays the third model.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from dsfed_client.analyses.glm import GLMResults, ds_glm
from dsfed_client.session import FederatedSession, LoginBuilder
from dsfed_demo.report import Report
from dsfed_server.launch import LocalSites
from dsfed_server.provision import ProvisionedSite, provision

TRAINING_TABLE = "GBSG2.train"
FORMULA = "y ~ horTh + age + menostat + tsize + tgrade + pnodes + progrec + estrec"
LOGIT_NAME, GBM_NAME = "gbsg2-logit", "gbsg2-gbm"
RANGER, LOGIT, GBM = "ranger forest (fixture score)", "logistic (ds_glm)", "gradient boosting (ONNX)"


def model_files(fixtures: Path) -> dict[str, Path]:
    """The shipped model files the demo sites approve, by approved name."""
    return {LOGIT_NAME: fixtures / "models" / "gbsg2-logit.json", GBM_NAME: fixtures / "models" / "gbsg2-gbm.onnx"}


def training_site(fixtures: Path, rules: Path, run_dir: Path) -> ProvisionedSite:
    """The site serving the training split (site1's rules), provisioned under ``run_dir``."""
    return provision(run_dir, {"training": (fixtures / "training", rules / "site1.toml")})["training"]


@contextmanager
def training_session(fixtures: Path, rules: Path, run_dir: Path,
                     site: ProvisionedSite | None = None) -> Iterator[FederatedSession]:
    """A session on the site serving the training split (its own process; ``site``, else
    :func:`training_site` provisioned under ``run_dir``), with the training table assigned as ``T``."""
    site = site or training_site(fixtures, rules, run_dir)
    analyst = site.credentials["analyst"]
    with LocalSites([site], run_dir) as local:
        builder = LoginBuilder()
        builder.append("training", local.urls["training"], user=analyst.user, password=analyst.password)
        with builder.login() as session:
            session.assign_table("T", TRAINING_TABLE)
            yield session


def fit_logistic(session: FederatedSession) -> GLMResults:
    """The demo's logistic regression of the 2-year recurrence-free outcome on every GBSG2
    covariate, by the distributed GLM on the training site (R's ``glm`` on the training records)."""
    return ds_glm(session, FORMULA, "T", family="binomial")


def seed000_workflow(session: FederatedSession, report: Report, fixtures: Path, rules: Path, run_dir: Path
                     ) -> ProvisionedSite:
    """Fit the logistic model on the training site, check it is the file the validation sites
    approved, upload the approved models, apply them at the five validation sites, validate each
    and compare two of them (pooled releases); the results go to ``report``. Returns the training
    site (stopped by then), whose audit chain the demo verifies with the others'."""
    from dsfed_client.analyses.comparison import ds_compare_models  # noqa: PLC0415
    from dsfed_client.analyses.suite import validate  # noqa: PLC0415
    from dsfed_client.models import ds_predict, glm_model, upload_model  # noqa: PLC0415
    from dsfed_core.models import parse_glm  # noqa: PLC0415

    report.section("The paper's workflow (Schalk, Rehms et al. 2024): models fitted on the training split, applied and "
                   "validated at the sites")
    training = training_site(fixtures, rules, run_dir / "training")
    with training_session(fixtures, rules, run_dir / "training", training) as train:
        fit = fit_logistic(train)
    files = model_files(fixtures)
    approved = parse_glm(files[LOGIT_NAME].read_bytes())
    refit = glm_model(fit)
    gap = max(abs(refit.coefficients[k] - approved.coefficients[k]) for k in approved.coefficients)
    print(f"   logistic regression fitted by ds_glm on the training site (n = {fit.nobs}, {fit.iterations} rounds): "
          f"{FORMULA}")
    print(f"   the fit is the model file the five sites' boards approved ({files[LOGIT_NAME].name}, SHA-256 "
          f"{approved.sha256[:16]}...): largest coefficient difference {gap:.1e}")
    report.results["logistic_fit"] = {"formula": FORMULA, "nobs": fit.nobs, "sha256": approved.sha256,
                                      "coefficients": dict(refit.coefficients), "max_difference_to_approved": gap}
    uploaded = upload_model(session, approved)
    print(f"   uploaded; approved at every site as {sorted({n for r in uploaded.values() for n in r['approved_as']})}")
    upload_model(session, files[GBM_NAME])
    print(f"   uploaded {files[GBM_NAME].name} (sklearn gradient boosting as an ONNX graph, approved as "
          f"{GBM_NAME!r} by its SHA-256)")
    predictions = {LOGIT: ds_predict(session, "D", LOGIT_NAME, "p_logit").name,
                   GBM: ds_predict(session, "D", GBM_NAME, "p_gbm").name}
    print("   predictDS(D, 'gbsg2-logit') and predictDS(D, 'gbsg2-gbm') at every site: the predictions stay "
          "there as p_logit and p_gbm")
    reports = {RANGER: report.validation[0]} if report.validation else {}
    reports.update({label: validate(session, "D$y", score, secure=True) for label, score in predictions.items()})
    print(f"   {'model':<32}{'AUC':>8}{'95% CI':>18}{'Brier':>9}{'intercept':>11}{'slope':>8}")
    for label, v in reports.items():
        print(f"   {label:<32}{v.discrimination.auc:>8.3f}   {v.discrimination.ci.lower:.3f}-"
              f"{v.discrimination.ci.upper:.3f}{v.brier.brier:>9.4f}{v.logistic.intercept:>11.3f}"
              f"{v.logistic.slope:>8.3f}")
    (label_a, a), (label_b, b) = predictions.items()
    comparison = ds_compare_models(
        session, "D$y", a, b, labels=(label_a, label_b), secure=True,
        histograms=(reports[label_a].discrimination.result.histograms,
                    reports[label_b].discrimination.result.histograms))
    lo, hi = comparison.ci
    print(f"   paired comparison ({label_a} - {label_b}, same patients): AUC difference "
          f"{comparison.auc_difference:+.3f} (95% CI {lo:+.3f} to {hi:+.3f}, p = {comparison.pvalue:.3g}); "
          f"Brier difference {comparison.brier_difference:+.4f} (p = {comparison.brier_pvalue:.3g})")
    report.results["models"] = {label: v.to_dict() for label, v in reports.items()}
    report.results["model_comparison"] = comparison.to_dict()
    report.models, report.comparison = reports, comparison
    return training
