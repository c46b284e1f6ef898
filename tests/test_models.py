"""Models brought to the data: a GLM written as numbers, approved by each site's board by its
SHA-256, uploaded, and applied at the sites (predictDS), where its predictions stay.

References: R's ``model.matrix`` and ``plogis`` with the same coefficients on the pooled records
(the predictions, independently of the site's design code), pROC and rms' ``val.prob`` on them.
Each refusal names its rule and is in the audit log.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, GBSG2_SITES, audit_records, inprocess_builder
from dsfed_client import DisclosureRefusal, FederatedCallError
from dsfed_client.analyses.calibration import ds_brier, ds_logistic_calibration
from dsfed_client.analyses.discrimination import ds_auc
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.models import ds_predict, glm_model, upload_model
from dsfed_core.models import GLMModel
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from rref import R_PROC, R_VALPROB, r_eval, r_reference
from sitekit import ROOT, approving, dsfed, make_sites

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
FORMULA = "y ~ age + tsize + tgrade + pnodes"
TABLE = "GBSG2.validation"


def _gbsg2_sites(run, rules):
    provisioned = provision(run, {s: (FIXTURES / s, rules) for s in GBSG2_SITES})
    return provisioned, {n: SiteService.from_config_file(p.config) for n, p in provisioned.items()}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, gbsg2_pooled):
    """The logistic model fitted across the five sites (the distributed GLM: R's glm on the pooled
    records), as a model file; and the five sites again, their board having approved it."""
    run = tmp_path_factory.mktemp("models")
    with inprocess_builder(*_gbsg2_sites(run / "fit", NO_NOISE)).login() as session:
        session.assign_table("D", TABLE)
        model = glm_model(ds_glm(session, FORMULA, "D", secure=True))
    rules = approving(run / "rules.toml", {"gbsg2-logit": model.sha256})
    approved = _gbsg2_sites(run / "apply", rules)
    return model, approved, gbsg2_pooled, rules


def _r_predictions(model: GLMModel, pooled: pd.DataFrame) -> np.ndarray:
    """plogis(model.matrix(formula, pooled) %*% beta), in R, the coefficients matched by name."""
    names = list(model.coefficients)
    return r_eval(
        "d <- data.frame(age = age, tsize = tsize, pnodes = pnodes, tgrade = factor(tgrade)); "
        "X <- model.matrix(~ age + tsize + tgrade + pnodes, d); "
        "b <- setNames(beta, names); as.numeric(plogis(X[, names] %*% b))",
        age=pooled.age, tsize=pooled.tsize, pnodes=pooled.pnodes, tgrade=pooled.tgrade.astype(str),
        beta=np.array(list(model.coefficients.values())), names=np.array(names))


def test_the_model_file_is_the_fit_and_its_digest_is_canonical(fitted):
    model, _, pooled, _ = fitted
    r_coef = r_eval(f"coef(glm({FORMULA}, family = binomial, data = data.frame(y = y, age = age, tsize = tsize, "
                    "pnodes = pnodes, tgrade = factor(tgrade))))", y=pooled.y, age=pooled.age, tsize=pooled.tsize,
                    pnodes=pooled.pnodes, tgrade=pooled.tgrade.astype(str))
    np.testing.assert_allclose(list(model.coefficients.values()), r_coef, rtol=1e-8)
    reordered = json.dumps({"link": "logit", "coefficients": dict(model.coefficients), "family": "binomial",
                            "formula": FORMULA, "format": "dsfed.glm/1"}, indent=2).encode()
    from dsfed_core.models import digest
    assert digest(reordered) == model.sha256 and len(model.sha256) == 64


def test_predictions_at_the_sites_validate_as_R_on_the_pooled_predictions(fitted):
    """Noise off: the mean of the site-computed predictions, their Brier score, AUC (DeLong) and
    calibration intercept and slope equal R's on the predictions R computes from the same
    coefficients on the pooled records."""
    model, (provisioned, services), pooled, _ = fitted
    p = _r_predictions(model, pooled)
    y = pooled.y.to_numpy(dtype=float)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", TABLE)
        uploaded = upload_model(session, model)
        assert {r["sha256"] for r in uploaded.values()} == {model.sha256}
        assert all(r["approved_as"] == ["gbsg2-logit"] for r in uploaded.values())
        ds_predict(session, "D", "gbsg2-logit", "pred")
        assert session.mean("pred").mean == pytest.approx(p.mean(), rel=1e-10)
        brier = ds_brier(session, "D$y", "pred")
        auc = ds_auc(session, "D$y", "pred")
        calibration = ds_logistic_calibration(session, "D$y", "pred")
    assert brier.brier == pytest.approx(np.mean((y - p) ** 2), rel=1e-10)
    auc_r, *_ = r_reference("proc_ref", R_PROC, y=y, p=p)
    assert auc.auc == pytest.approx(auc_r, rel=1e-10)
    valprob = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    assert (calibration.intercept, calibration.slope) == pytest.approx((valprob[2], valprob[3]), rel=1e-7, abs=1e-9)
    uploads = [r for r in audit_records(provisioned["site1"]) if r["function"] == "uploadModel"]
    assert uploads and model.sha256 in uploads[-1]["call"] and uploads[-1]["outcome"] == "ok"


def _refusal(exc: FederatedCallError) -> tuple[set[str], set[str | None]]:
    return {f.kind for f in exc.failures.values()}, {f.rule for f in exc.failures.values()}


def test_an_unapproved_or_tampered_model_is_refused_and_audited(fitted):
    model, (provisioned, services), _, _ = fitted
    other = GLMModel(model.formula, model.family, model.link, {**model.coefficients, "age": 0.5})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", TABLE)
        with pytest.raises(FederatedCallError) as exc:
            upload_model(session, other)
        assert _refusal(exc.value) == ({"disclosure_refused"}, {"models.approved"})
        assert isinstance(exc.value.failures["site1"], DisclosureRefusal)
        assert other.sha256 in str(exc.value)
        upload_model(session, model)
        stored = services["site2"].models.path(model.sha256)
        stored.write_bytes(other.canonical())  # the file under the approved digest, changed on disk
        with pytest.raises(FederatedCallError) as exc:
            ds_predict(session, "D", "gbsg2-logit", "pred")
        assert set(exc.value.failures) == {"site2"} and "does not match its digest" in str(exc.value)
        assert exc.value.failures["site2"].rule == "models.approved"
        stored.write_bytes(model.canonical())
        with pytest.raises(FederatedCallError) as exc:
            ds_predict(session, "D", "not-approved", "pred")
        assert _refusal(exc.value) == ({"disclosure_refused"}, {"models.approved"})
    refused = [r for r in audit_records(provisioned["site2"]) if r["outcome"] == "refused"
               and r["function"] in ("uploadModel", "predictDS")]
    assert [r["rule"] for r in refused][-3:] == ["models.approved"] * 3


def test_oversized_malformed_and_ill_fitting_models_are_refused(tmp_path):
    frame = pd.DataFrame({"y": np.tile([0, 1], 30), "x": np.arange(60, dtype=float),
                          "g": ["a"] * 29 + ["b"] * 30 + ["c"]})
    reads_bmi = GLMModel("y ~ bmi", "binomial", "logit", {"(Intercept)": 0.0, "bmi": 0.1})
    by_group = GLMModel("y ~ g", "binomial", "logit", {"(Intercept)": 0.0, "gb": 1.0, "gc": 2.0})
    big = GLMModel("y ~ x", "binomial", "logit", {"(Intercept)": 0.0, "x": 0.1, **{f"x{i}": 0.0 for i in range(40)}})
    rules = approving(tmp_path / "rules.toml", {"bmi": reads_bmi.sha256, "groups": by_group.sha256,
                                                "big": big.sha256}, max_bytes="400")
    provisioned, services = make_sites(tmp_path, {"s": frame}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            upload_model(session, big)
        assert _refusal(exc.value)[1] == {"models.max_bytes"} and "at most 400" in str(exc.value)
        with pytest.raises(FederatedCallError) as exc:
            session.at_every_site("uploadModel", "POST", "/models", {"format": "dsfed.glm/1", "formula": "y ~ x",
                                                                    "family": "binomial", "link": "logit",
                                                                    "coefficients": {"x": 1}, "code": "evil()"})
        assert _refusal(exc.value)[0] == {"bad_call"} and "exactly" in str(exc.value)
        upload_model(session, reads_bmi)
        with pytest.raises(FederatedCallError) as exc:
            ds_predict(session, "D", "bmi", "pred")
        assert "model 'bmi' reads what the table lacks" in str(exc.value) and "'bmi'" in str(exc.value)
        upload_model(session, by_group)  # level c holds one record: the model singles it out
        with pytest.raises(FederatedCallError) as exc:
            ds_predict(session, "D", "groups", "pred")
        assert _refusal(exc.value) == ({"disclosure_refused"}, {"disclosure.q_threshold"})
        assert "3 distinct predictions" in str(exc.value)


def test_an_analysts_own_glm_only_where_the_rules_allow_it(tmp_path):
    frame = pd.DataFrame({"y": np.tile([0, 1], 30), "x": np.linspace(0, 1, 60)})
    mine = GLMModel("y ~ x", "binomial", "logit", {"(Intercept)": -0.5, "x": 1.5})
    for allowed in (False, True):
        rules = approving(tmp_path / f"rules-{allowed}.toml", {}, analyst_glm=str(allowed).lower())
        provisioned, services = make_sites(tmp_path / str(allowed), {"s": frame}, rules=rules)
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "P.t")
            if not allowed:
                with pytest.raises(FederatedCallError) as exc:
                    upload_model(session, mine)
                assert _refusal(exc.value)[1] == {"models.approved"}
                continue
            upload_model(session, mine)
            ds_predict(session, "D", mine.sha256, "pred", type="link")
            expected = np.mean(-0.5 + 1.5 * frame.x)
            assert session.mean("pred").mean == pytest.approx(expected, rel=1e-12)


def test_the_board_inspects_and_approves_a_model_file(tmp_path):
    """``dsfed models inspect`` names the digest and what the model reads; ``approve`` adds it to a
    rules file (comments kept, checked as a site checks it) so that a site started on that file
    accepts the model; approving it twice is refused."""
    import subprocess
    import sys

    model = GLMModel("y ~ age + tgrade", "binomial", "logit", {"(Intercept)": -1.0, "age": 0.02, "tgradeII": 0.3,
                                                                 "tgradeIII": 0.6})
    path = tmp_path / "risk.json"
    path.write_bytes(model.canonical())
    rules = tmp_path / "rules.toml"
    rules.write_text(NO_NOISE.read_text())

    def dsfed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dsfed_client.cli", *args], capture_output=True, text=True,
                              timeout=60)

    shown = dsfed("models", "inspect", str(path))
    assert shown.returncode == 0 and model.sha256 in shown.stdout and "age, tgrade" in shown.stdout
    done = dsfed("models", "approve", str(path), "--rules", str(rules), "--name", "risk",
                 "--note", 'a "published" score')
    assert done.returncode == 0, done.stdout + done.stderr
    from dsfed_server.disclosure.rules import load_rules
    (entry,) = load_rules(rules).models.approved
    assert (entry.name, entry.sha256, entry.note) == ("risk", model.sha256, 'a "published" score')
    assert "# Whether an analyst may apply a GLM of their own" in rules.read_text()
    again = dsfed("models", "approve", str(path), "--rules", str(rules), "--name", "risk2", "--note", "x")
    assert again.returncode == 2 and "already approved as 'risk'" in again.stdout
    frame = pd.DataFrame({"y": np.tile([0, 1], 30), "age": np.arange(30, 90, dtype=float),
                          "tgrade": ["I", "II", "III"] * 20})
    provisioned, services = make_sites(tmp_path / "site", {"s": frame}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        assert upload_model(session, model)["s"]["approved_as"] == ["risk"]


def test_a_datashield_client_applies_an_approved_model_by_call_text(fitted, tmp_path):
    """The unmodified PyPI DataSHIELD client, over /ws on real site processes: ``predictDS(D,
    "gbsg2-logit")`` assigned by call text (the model uploaded over /v1 beforehand), then ``meanDS``
    of the predictions: R's mean of the same model's predictions on the pooled records."""
    from dsfed_server.launch import LocalSites
    from conftest import http_builder
    from opalkit import ds_session

    model, _, pooled, rules = fitted
    provisioned = provision(tmp_path, {s: (FIXTURES / s, rules) for s in GBSG2_SITES})
    with LocalSites(provisioned.values(), tmp_path / "run") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            upload_model(session, model)
        with ds_session(sites, provisioned) as ds:
            ds.assign_expr("pred", 'predictDS(D, "gbsg2-logit")', asynchronous=False)
            means = ds.aggregate("meanDS(pred)")
    n = sum(r["Nvalid"] for r in means.values())
    assert n == len(pooled)
    mean = sum(r["EstimatedMean"] * r["Nvalid"] for r in means.values()) / n
    assert mean == pytest.approx(_r_predictions(model, pooled).mean(), rel=1e-10)


def test_a_glm_declaring_units_is_checked_against_the_data_dictionary(tmp_path, gbsg2_pooled):
    """A GLM file may declare the units of the variables it reads (``units``, written only when
    declared, so a GLM without units keeps its digest): applied where the data dictionary agrees
    (the mean prediction is the pooled formula's), refused where it gives another unit."""
    coefficients = {"(Intercept)": -1.0, "age": 0.02, "tsize": -0.01}
    plain = GLMModel("y ~ age + tsize", "binomial", "logit", coefficients)
    years = GLMModel("y ~ age + tsize", "binomial", "logit", coefficients, {"age": "years", "tsize": "mm"})
    months = GLMModel("y ~ age + tsize", "binomial", "logit", coefficients, {"age": "months"})
    assert b"units" not in plain.canonical() and json.loads(years.canonical())["units"] == {"age": "years",
                                                                                            "tsize": "mm"}
    rules = approving(tmp_path / "rules.toml", {}, analyst_glm="true")
    provisioned, services = _gbsg2_sites(tmp_path / "sites", rules)
    pooled = gbsg2_pooled
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", TABLE)
        upload_model(session, years)
        upload_model(session, months)
        ds_predict(session, "D", years.sha256, "pred")
        expected = np.mean(1 / (1 + np.exp(-(-1.0 + 0.02 * pooled.age - 0.01 * pooled.tsize))))
        assert session.mean("pred").mean == pytest.approx(expected, rel=1e-12)
        with pytest.raises(FederatedCallError) as exc:
            ds_predict(session, "D", months.sha256, "pred_months")
    assert "reads column 'age' in 'months'; this table's data dictionary gives it unit 'years'" in str(exc.value)
    assert _refusal(exc.value)[0] == {"bad_call"}


def test_the_shipped_demo_models_are_the_ones_the_demo_sites_approve():
    """``dsfed models inspect`` on the shipped GLM file names its digest (SHA-256 of the canonical
    JSON, sorted keys, no spaces) and what it reads; each demo site's rules approve both shipped
    files by their digests (the ONNX one: SHA-256 of the file's bytes)."""
    import hashlib

    from dsfed_server.disclosure.rules import load_rules

    models = ROOT / "opal_fixtures" / "models"
    logit, gbm = models / "gbsg2-logit.json", models / "gbsg2-gbm.onnx"
    canonical = json.dumps(json.loads(logit.read_text()), sort_keys=True, separators=(",", ":")).encode()
    digests = {"gbsg2-logit": hashlib.sha256(canonical).hexdigest(),
               "gbsg2-gbm": hashlib.sha256(gbm.read_bytes()).hexdigest()}
    shown = dsfed("models", "inspect", logit)
    assert shown.returncode == 0 and digests["gbsg2-logit"] in shown.stdout
    assert "horTh, age, menostat, tsize, tgrade, pnodes, progrec, estrec" in shown.stdout
    for site in GBSG2_SITES:
        approved = {e.name: e.sha256 for e in load_rules(ROOT / "disclosure_rules" / f"{site}.toml").models.approved}
        assert approved == digests, site


def test_two_models_whose_few_outputs_differ_by_one_record_are_not_both_applied(tmp_path):
    """The attack: two approved models with few outputs (one per group) whose groups differ in one
    patient only; the pooled means of a column over each model's groups would difference that
    patient out. Each model's output sets are row sets the gate audits with the table's earlier
    ones: the second model is refused (disclosure.subset_min_difference) and its predictions are
    never stored."""
    g1 = np.array(["a"] * 30 + ["b"] * 30)
    g2 = g1.copy()
    g2[29] = "b"  # the patient in row 30 changes group
    frame = pd.DataFrame({"y": np.tile([0, 1], 30), "g1": g1, "g2": g2})
    first = GLMModel("y ~ g1", "binomial", "logit", {"(Intercept)": 0.0, "g1b": 1.0})
    second = GLMModel("y ~ g2", "binomial", "logit", {"(Intercept)": 0.0, "g2b": 1.0})
    rules = approving(tmp_path / "rules.toml", {"first": first.sha256, "second": second.sha256}, cut_history="true")
    provisioned, services = make_sites(tmp_path, {"s": frame}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        upload_model(session, first)
        upload_model(session, second)
        ds_predict(session, "D", "first", "p1")
        with pytest.raises(FederatedCallError) as exc:
            ds_predict(session, "D", "second", "p2")
        assert _refusal(exc.value) == ({"disclosure_refused"}, {"disclosure.subset_min_difference"})
        names = {entry["name"] for entry in session.symbols()["s"]}
        assert "p1" in names and "p2" not in names
