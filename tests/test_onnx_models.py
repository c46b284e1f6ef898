"""ONNX models brought to the data: an sklearn pipeline exported by skl2onnx, approved by each site's
board by the SHA-256 of its bytes, uploaded, and run by onnxruntime at the sites (predictDS).

References: sklearn's ``predict_proba`` of the same fitted pipeline (refitted here by the shipped
script, opal_fixtures/scripts/fit_gbm_onnx.py) and onnxruntime's own output on the pooled validation
frame (the predictions); pROC, rms' ``val.prob`` and the Brier formula on those predictions (the
validation). Every refusal is an attempt on real site servers over loopback, and its audit record
names the rule that refused it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType
from sklearn.tree import DecisionTreeClassifier

from conftest import FIXTURES, GBSG2_SITES, audit_records, http_builder, inprocess_builder, read_site_csv
from dsfed_client import Call, DisclosureRefusal, FederatedCallError
from dsfed_client.analyses.calibration import ds_brier, ds_logistic_calibration
from dsfed_client.analyses.discrimination import ds_auc
from dsfed_client.models import ds_predict, upload_model
from dsfed_core.models import ModelError
from dsfed_core.wire import decode_f64
from dsfed_server.dictionary import Variable, write_dictionary
from dsfed_server.launch import LocalSites
from dsfed_server.onnx_model import parse_onnx, probabilities
from dsfed_server.provision import ProvisionedSite, provision
from dsfed_server.rowbatches import BATCH_ROWS
from dsfed_server.service import SiteService
from rref import R_PROC, R_VALPROB, r_reference
from sitekit import NO_NOISE, approving, cut_next_to_one_record, dsfed, held_by, site1_count_below

GBM = FIXTURES / "models" / "gbsg2-gbm.onnx"
SCRIPT = FIXTURES / "scripts" / "fit_gbm_onnx.py"
TABLE = "GBSG2.validation"


def _script():
    spec = importlib.util.spec_from_file_location("fit_gbm_onnx", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def approving_onnx(path: Path, models: dict[str, bytes], **changes: str) -> Path:
    """The no-noise rules approving ``models`` (name -> ONNX bytes, approved by their SHA-256)."""
    return approving(path, {n: hashlib.sha256(b).hexdigest() for n, b in models.items()}, **changes)


def variant(data: bytes, *, unit: tuple[str, str] | None = None, categories: tuple[str, list[str]] | None = None,
            note: str | None = None) -> bytes:
    """The ONNX model ``data`` with one declared unit changed, one factor's categories renamed (in its
    metadata and its one-hot encoder), or one more metadata entry: a different file."""
    model = onnx.load_model_from_string(data)
    for entry in model.metadata_props:
        if unit and entry.key == f"dsfed.unit.{unit[0]}":
            entry.value = unit[1]
        if categories and entry.key == f"dsfed.categories.{categories[0]}":
            entry.value = json.dumps(categories[1])
    if categories:
        for node in model.graph.node:
            if node.op_type == "OneHotEncoder" and categories[0] in node.input:
                (attribute,) = [a for a in node.attribute if a.name == "cats_strings"]
                attribute.strings[:] = [c.encode() for c in categories[1]]
    if note:
        model.metadata_props.add(key="note", value=note)
    return model.SerializeToString(deterministic=True)


def _refusal(exc: FederatedCallError) -> tuple[set[str], set[str | None]]:
    return {f.kind for f in exc.failures.values()}, {f.rule for f in exc.failures.values()}


def _refused(provisioned, function: str) -> list[dict]:
    return [r for r in audit_records(provisioned) if r["function"] == function and r["outcome"] != "ok"]


@pytest.fixture(scope="module")
def gbm():
    """The shipped model's bytes, the pipeline the script fits (sklearn), and the pooled validation
    frame with the site of each record."""
    script = _script()
    pipeline = script.fit(pd.read_csv(script.TRAIN))
    frames = [read_site_csv(s).assign(site=s) for s in GBSG2_SITES]
    return GBM.read_bytes(), pipeline, pd.concat(frames, ignore_index=True), script.PREDICTORS


@pytest.fixture(scope="module")
def gbsg2(gbm, tmp_path_factory):
    """The five GBSG2 sites, noise off, their board having approved the GBM and two variants of it
    (a unit and the categories changed), as real site server processes on loopback."""
    data = gbm[0]
    run = tmp_path_factory.mktemp("onnx")
    variants = {"gbm-months": variant(data, unit=("age", "months")),
                "gbm-numbered": variant(data, categories=("tgrade", ["1", "2", "3"]))}
    rules = approving_onnx(run / "rules.toml", {"gbsg2-gbm": data, **variants})
    provisioned = provision(run, {s: (FIXTURES / s, rules) for s in GBSG2_SITES})
    with LocalSites(provisioned.values(), run / "run") as sites:
        yield provisioned, http_builder(provisioned, sites.urls), variants, run


def _onnxruntime(data: bytes, frame: pd.DataFrame, predictors: list[str], one_thread: bool = False) -> np.ndarray:
    """onnxruntime's P(y = 1) of model ``data`` on ``frame`` (factors as text, numbers as float32), in
    one run over all records, on one thread or on onnxruntime's default threads."""
    feed = {c: (frame[[c]].astype(str).to_numpy(dtype=object) if pd.api.types.is_string_dtype(frame[c])
                else frame[[c]].to_numpy(dtype=np.float32)) for c in predictors}
    options = onnxruntime.SessionOptions()
    if one_thread:
        options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return session.run(["probabilities"], feed)[0][:, 1].astype(float)


def test_predictions_at_the_sites_are_sklearns_and_onnxruntimes(gbm, gbsg2):
    """Noise off, each site's released scores of its own records (noisyScoresDS, per class, sorted)
    are sklearn's predict_proba of the same pipeline on those records and onnxruntime's own output on
    the pooled frame, to 1e-6 (onnxruntime sums the trees in float32, and on several threads in
    another order than the sites' one); nearly every prediction is distinct, so the GBM passes
    check_outputs."""
    data, pipeline, pooled, predictors = gbm
    provisioned, builder, _, _ = gbsg2
    sklearn_p = pipeline.predict_proba(pooled[predictors])[:, 1]
    ort_p = _onnxruntime(data, pooled, predictors)
    np.testing.assert_allclose(ort_p, sklearn_p, rtol=0, atol=1e-6)
    with builder.login() as session:
        session.assign_table("D", TABLE)
        uploaded = upload_model(session, GBM)
        assert {r["sha256"] for r in uploaded.values()} == {hashlib.sha256(data).hexdigest()}
        assert all(r["approved_as"] == ["gbsg2-gbm"] and r["format"] == "onnx" for r in uploaded.values())
        ds_predict(session, "D", "gbsg2-gbm", "pred")
        released = session.aggregate("noisyScoresDS", "D$y", "pred")
    for site in GBSG2_SITES:
        mine = (pooled.site == site).to_numpy()
        for cls, key in ((0, "negatives"), (1, "positives")):
            records = mine & (pooled.y == cls).to_numpy()
            scores = decode_f64(released[site][key])
            np.testing.assert_allclose(scores, np.sort(sklearn_p[records]), rtol=0, atol=1e-6)
            np.testing.assert_allclose(scores, np.sort(ort_p[records]), rtol=0, atol=1e-6)
        site_p = np.concatenate([decode_f64(released[site][k]) for k in ("negatives", "positives")])
        assert np.unique(site_p).size >= mine.sum() - 2  # far more than n/q: check_outputs does not apply


def test_validation_of_site_predictions_is_R_on_the_same_predictions(gbm, gbsg2):
    """Noise off: AUC (pROC), Brier score (formula, rms val.prob) and calibration intercept and slope
    (val.prob) of the site-computed predictions equal R's on those very predictions (released per
    class by noisyScoresDS, noise off), which are onnxruntime's on the pooled frame to 1e-6; the
    "link" predictions are their logits."""
    data, _, pooled, predictors = gbm
    provisioned, builder, _, _ = gbsg2
    with builder.login() as session:
        session.assign_table("D", TABLE)
        upload_model(session, data)
        ds_predict(session, "D", "gbsg2-gbm", "gbm")
        auc = ds_auc(session, "D$y", "gbm")
        brier = ds_brier(session, "D$y", "gbm")
        calibration = ds_logistic_calibration(session, "D$y", "gbm")
        released = session.aggregate("noisyScoresDS", "D$y", "gbm")
        ds_predict(session, "D", "gbsg2-gbm", "gbm_lp", type="link")
        mean_lp = session.mean("gbm_lp").mean
    negatives = np.concatenate([decode_f64(r["negatives"]) for r in released.values()])
    positives = np.concatenate([decode_f64(r["positives"]) for r in released.values()])
    p = np.concatenate([negatives, positives])
    y = np.concatenate([np.zeros(negatives.size), np.ones(positives.size)])
    order = np.lexsort((_onnxruntime(data, pooled, predictors), pooled.y))
    np.testing.assert_allclose(np.sort(negatives), _onnxruntime(data, pooled, predictors)[order][:negatives.size],
                               rtol=0, atol=1e-6)
    auc_r, *_ = r_reference("proc_ref", R_PROC, y=y, p=p)
    assert auc.auc == pytest.approx(auc_r, rel=1e-12)
    assert brier.brier == pytest.approx(np.mean((y - p) ** 2), rel=1e-12)
    valprob = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    assert brier.brier == pytest.approx(valprob[0], rel=1e-10)
    assert (calibration.intercept, calibration.slope) == pytest.approx((valprob[2], valprob[3]), rel=1e-7, abs=1e-9)
    assert mean_lp == pytest.approx(np.mean(np.log(p / (1 - p))), rel=1e-9)


def _custom_op_graphs() -> dict[str, bytes]:
    """Three graphs a site must not run: an operator of a custom domain (imported, and not), and a
    standard operator outside the allowlist (a random generator)."""
    x = helper.make_tensor_value_info("age", TensorProto.FLOAT, [None, 1])
    out = helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2])
    evil = helper.make_node("Evil", ["age"], ["probabilities"], domain="com.evil", name="evil")
    random = helper.make_node("RandomUniformLike", ["age"], ["probabilities"], name="dice")
    graphs = {
        "imported domain": helper.make_model(helper.make_graph([evil], "g", [x], [out]), opset_imports=[
            helper.make_opsetid("", 17), helper.make_opsetid("com.evil", 1)]),
        "node domain": helper.make_model(helper.make_graph([evil], "g", [x], [out]),
                                         opset_imports=[helper.make_opsetid("", 17)]),
        "random": helper.make_model(helper.make_graph([random], "g", [x], [out]),
                                    opset_imports=[helper.make_opsetid("", 17)]),
    }
    return {name: model.SerializeToString() for name, model in graphs.items()}


def test_unapproved_tampered_custom_and_mismatched_models_are_refused_and_audited(gbm, gbsg2):
    data = gbm[0]
    provisioned, builder, variants, run = gbsg2
    other = variant(data, note="retrained")  # the same graph, another file: another digest
    with builder.login() as session:
        session.assign_table("D", TABLE)
        with pytest.raises(FederatedCallError) as exc:
            upload_model(session, other)
        assert _refusal(exc.value) == ({"disclosure_refused"}, {"models.approved"})
        assert hashlib.sha256(other).hexdigest() in str(exc.value)

        for name, graph in _custom_op_graphs().items():
            with pytest.raises(FederatedCallError) as exc:
                upload_model(session, graph)
            assert _refusal(exc.value) == ({"disclosure_refused"}, {"models.onnx"}), name
            assert ("com.evil" in str(exc.value)) == (name != "random"), name
        assert "'RandomUniformLike'" in str(exc.value) and "does not run" in str(exc.value)

        upload_model(session, data)
        sha256 = hashlib.sha256(data).hexdigest()
        (stored,) = run.glob(f"site2-*/{sha256}.onnx")  # the site's models_dir (beside its ledger)
        stored.write_bytes(variants["gbm-months"])  # the file under the approved digest, changed on disk
        with pytest.raises(FederatedCallError) as exc:
            ds_predict(session, "D", "gbsg2-gbm", "pred")
        assert set(exc.value.failures) == {"site2"} and "does not match its digest" in str(exc.value)
        assert isinstance(exc.value.failures["site2"], DisclosureRefusal)
        assert exc.value.failures["site2"].rule == "models.approved"
        stored.write_bytes(data)
        ds_predict(session, "D", "gbsg2-gbm", "pred")  # restored: applied again

        for name, column, says in (("gbm-months", "age", "declares unit 'months', the data dictionary 'years'"),
                                   ("gbm-numbered", "tgrade", "expects categories ['1', '2', '3'], the data "
                                                              "dictionary declares ['I', 'II', 'III']")):
            upload_model(session, variants[name])
            with pytest.raises(FederatedCallError) as exc:
                ds_predict(session, "D", name, "pred")
            assert _refusal(exc.value) == ({"bad_call"}, {"models.onnx"}), name
            text = str(exc.value)
            assert f"model {name!r} reads column {column!r}" in text and says in text and "site 'site1'" in text
    uploads = [r["rule"] for r in _refused(provisioned["site1"], "uploadModel")]
    assert uploads == ["models.approved", "models.onnx", "models.onnx", "models.onnx"]
    refused = _refused(provisioned["site1"], "uploadModel")
    assert [hashlib.sha256(g).hexdigest() in r["message"] for g, r in zip([other, *_custom_op_graphs().values()],
                                                                       refused)] == [True] * 4
    assert [r["rule"] for r in _refused(provisioned["site1"], "predictDS")] == ["models.onnx", "models.onnx"]
    assert [r["rule"] for r in _refused(provisioned["site2"], "predictDS")][0] == "models.approved"


def _tree(inputs: str) -> tuple[DecisionTreeClassifier, bytes]:
    """A decision tree on x (100 training records in four bands of outcome rate 0.2 to 0.8), exported
    reading the column ``inputs``: four leaves, four distinct probabilities."""
    x = np.arange(100, dtype=float)
    y = ((x % 5) < (x // 25 + 1)).astype(int)
    tree = DecisionTreeClassifier(max_depth=2, random_state=0).fit(x[:, None], y)
    model = convert_sklearn(tree, initial_types=[(inputs, FloatTensorType([None, 1]))],
                            target_opset={"": 17, "ai.onnx.ml": 3}, options={id(tree): {"zipmap": False}})
    return tree, model.SerializeToString()


def _small_site(run: Path, tables: dict[str, pd.DataFrame], rules: Path, onnx_predictions: str = "values"):
    """One site serving ``tables`` (project P; x decimal in years, y 0/1), keeping an ONNX graph's
    predictions as ``onnx_predictions`` says."""
    for name, frame in tables.items():
        folder = run / "data" / "P"
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_csv(folder / f"{name}.csv", index=False)
        write_dictionary(folder / f"{name}.dictionary.json", "P", name, [
            Variable("x", "decimal", "years", "x", (), (0.0, 100.0)),
            Variable("y", "integer", "", "y", ("0", "1"))])
    return provision(run / "run", {"s": (run / "data", rules)}, catalog={"onnx_predictions": onnx_predictions})


@pytest.mark.parametrize("setting", ["values", "view"])
def test_a_tree_isolating_a_record_an_absent_column_and_an_oversized_model_are_refused(gbm, tmp_path, setting):
    """A real decision tree: on table t one of its four leaves holds one record (fewer than q = 5),
    so predictDS is refused (disclosure.q_threshold); on table u every leaf holds five and one
    record lacks x, which gets no prediction (the mean is sklearn's over the others). The same tree
    reading ``bmi``, a column the tables lack, and a model over models.max_bytes are refused. The
    same whether the site keeps the predictions as values or as a view."""
    tree, model = _tree("x")
    _, reads_bmi = _tree("bmi")
    leaves = tree.apply(np.arange(100, dtype=float)[:, None])
    kinds = np.unique(leaves)
    assert kinds.size == 4 and np.unique(tree.predict_proba(np.arange(100.0)[:, None])[:, 1]).size == 4
    first = {leaf: np.flatnonzero(leaves == leaf).astype(float) for leaf in kinds}
    isolating = np.concatenate([np.resize(first[k], 8) for k in kinds[:3]] + [first[kinds[3]][:1]])
    spread = np.concatenate([np.resize(first[k], 5) for k in kinds])
    t = pd.DataFrame({"x": isolating, "y": np.arange(isolating.size) % 2})
    u = pd.DataFrame({"x": [*spread, np.nan], "y": np.arange(spread.size + 1) % 2})
    rules = approving_onnx(tmp_path / "rules.toml", {"tree": model, "bmi-tree": reads_bmi}, max_bytes="5000")
    provisioned = _small_site(tmp_path, {"t": t, "u": u}, rules, setting)
    with LocalSites(provisioned.values(), tmp_path / "run-sites") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            with pytest.raises(FederatedCallError) as exc:
                upload_model(session, gbm[0])
            assert _refusal(exc.value) == ({"bad_call"}, {"models.max_bytes"}) and "at most 5000" in str(exc.value)
            upload_model(session, model)
            upload_model(session, reads_bmi)
            session.assign_table("T", "P.t")
            with pytest.raises(FederatedCallError) as exc:
                ds_predict(session, "T", "tree", "pred")
            assert _refusal(exc.value) == ({"disclosure_refused"}, {"disclosure.q_threshold"})
            assert "4 distinct predictions here, 1 of them held by fewer than 5 records" in str(exc.value)
            session.assign_table("U", "P.u")
            with pytest.raises(FederatedCallError) as exc:
                ds_predict(session, "U", "bmi-tree", "pred")
            assert _refusal(exc.value) == ({"bad_call"}, {"models.onnx"})
            assert "model 'bmi-tree' reads column 'bmi': the table lacks it" in str(exc.value)
            ds_predict(session, "U", "tree", "pred")
            mean = session.mean("pred")
    assert (mean.n_valid, mean.n_missing) == (spread.size, 1)
    assert mean.mean == pytest.approx(tree.predict_proba(spread[:, None])[:, 1].mean(), abs=1e-7)
    assert [r["rule"] for r in _refused(provisioned["s"], "uploadModel")] == ["models.max_bytes"]
    assert [r["rule"] for r in _refused(provisioned["s"], "predictDS")] == ["disclosure.q_threshold", "models.onnx"]


def test_the_board_inspects_and_approves_the_shipped_onnx_model(tmp_path):
    """``dsfed models inspect`` on the demo's GBM names its digest (sha256 of the file), every column
    it reads with its type, categories or unit, its outputs and its operators with counts;
    ``approve`` adds it to a rules file with exactly that entry (that the demo sites' files approve it
    is test_models.py's test_the_shipped_demo_models_are_the_ones_the_demo_sites_approve)."""
    digest = hashlib.sha256(GBM.read_bytes()).hexdigest()

    shown = dsfed("models", "inspect", str(GBM))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for text in (digest, f"{GBM.stat().st_size} bytes",
                 "tgrade    categorical, categories I, II, III", "age       number (float), unit years",
                 "ai.onnx.ml:TreeEnsembleClassifier       1", "ai.onnx.ml:OneHotEncoder                3",
                 "probabilities[:, 1]", "ai.onnx 21"):
        assert text in shown.stdout, text
    rules = tmp_path / "rules.toml"
    rules.write_text(NO_NOISE.read_text())
    done = dsfed("models", "approve", str(GBM), "--rules", str(rules), "--name", "gbm", "--note", "demo GBM")
    assert done.returncode == 0, done.stdout + done.stderr
    from dsfed_server.disclosure.rules import load_rules
    (entry,) = load_rules(rules).models.approved
    assert (entry.name, entry.sha256) == ("gbm", digest)


def test_predictions_for_a_subset_are_sklearns_on_its_records(gbm, gbsg2):
    """The GBM applied to a subset (``age > 50``): the mean of the sites' predictions is sklearn's
    predict_proba on the pooled subset records' (to 1e-6, float32 trees); the site also computes the
    model for every record of its table (the predictions' cut history), reading the inputs as its data
    dictionary declares them."""
    data, pipeline, pooled, predictors = gbm
    provisioned, builder, _, _ = gbsg2
    older = pooled[pooled.age > 50]
    with builder.login() as session:
        session.assign_table("D", TABLE)
        upload_model(session, GBM)
        session.assign("S", Call("subsetRowsDS", "D", "age", ">", 50))
        ds_predict(session, "S", "gbsg2-gbm", "pred_older")
        mean = session.mean("pred_older")
    assert mean.n_valid == len(older)
    assert mean.mean == pytest.approx(pipeline.predict_proba(older[predictors])[:, 1].mean(), abs=1e-6)


N_LARGE = 200_000  # records of the resampled table: a stored prediction holds 8 bytes each (1.6 MB)
SMALL = 262_144  # bytes a view may hold: the graph (its file, parsed), the history's database connection


def _one_site(tmp: Path, setting: str, gbm: tuple
              ) -> tuple[dict[str, ProvisionedSite], dict[str, SiteService], pd.DataFrame, pd.DataFrame]:
    """One in-process site whose ``[catalog] onnx_predictions`` is ``setting``, serving the pooled GBSG2
    validation records resampled to N_LARGE (``GBSG2.validation``) and as they are (``GBSG2.small``),
    its rules approving the GBM, with the cut history on."""
    data, _, pooled, _ = gbm
    folder = tmp / "data" / "GBSG2"
    folder.mkdir(parents=True)
    small = pooled.drop(columns="site")
    large = small.sample(N_LARGE, replace=True, random_state=7, ignore_index=True)
    large.to_csv(folder / "validation.csv", index=False)
    small.to_csv(folder / "small.csv", index=False)
    dictionary = (FIXTURES / "site1" / "GBSG2" / "validation.dictionary.json").read_text()
    (folder / "validation.dictionary.json").write_text(dictionary)
    assert dictionary.count('"table": "validation"') == 1
    (folder / "small.dictionary.json").write_text(dictionary.replace('"table": "validation"', '"table": "small"'))
    rules = approving_onnx(tmp / "rules.toml", {"gbsg2-gbm": data}, cut_history="true")
    provisioned = provision(tmp / "run", {"site1": (tmp / "data", rules)}, catalog={"onnx_predictions": setting})
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    return provisioned, services, large, small


@pytest.mark.parametrize("setting", ["values", "view"])
def test_onnx_predictions_kept_as_values_or_as_a_view(gbm, tmp_path, setting):
    """``onnx_predictions = "values"`` keeps 8 bytes a record (the graph run once); ``"view"`` keeps no
    record's value (the graph run at each read). Either way the mean of the predictions of the table
    and of a subset (age > 50) is onnxruntime's own output on the same records, to 1e-6 (float32
    trees), and two reads of the table's predictions (noisyScoresDS, noise off) are exactly one
    single-threaded onnxruntime run's."""
    data, _, _, predictors = gbm
    provisioned, services, large, _ = _one_site(tmp_path, setting, gbm)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", TABLE)
        upload_model(session, GBM)
        ds_predict(session, "D", "gbsg2-gbm", "warm")  # the columns the graph reads, read before measuring
        session.remove("warm")
        held, _ = held_by(lambda: ds_predict(session, "D", "gbsg2-gbm", "P"))
        session.assign("S", Call("subsetRowsDS", "D", "age", ">", 50))
        ds_predict(session, "S", "gbsg2-gbm", "PS")
        means = session.mean("P").mean, session.mean("PS").mean
        reads = [session.aggregate("noisyScoresDS", "D$y", "P")["site1"] for _ in range(2)]
    if setting == "view":
        assert held < SMALL
    else:
        assert held > 8 * N_LARGE
    older = large[large.age > 50]
    want = _onnxruntime(data, large, predictors).mean(), _onnxruntime(data, older, predictors).mean()
    assert means == pytest.approx(want, rel=0, abs=1e-6)
    # every read gives every record exactly one single-threaded onnxruntime run's prediction (noise off)
    exact = _onnxruntime(data, large, predictors, one_thread=True)
    for cls, key in ((0, "negatives"), (1, "positives")):
        for read in reads:
            np.testing.assert_array_equal(decode_f64(read[key]), np.sort(exact[(large.y == cls).to_numpy()]))


@pytest.mark.parametrize("setting", ["values", "view"])
@pytest.mark.parametrize("first", [True, False])
def test_onnx_predictions_of_a_subset_and_of_the_table_share_one_cut_history(gbm, tmp_path, setting, first):
    """The attack of tests/test_views.py on an ONNX graph's predictions, kept as values or as a view:
    a count of a subset's predictions (age > 50) at or below t1, then of the table's at or below t2,
    one record apart. Both are checked in the history of the model's predictions for every record of
    the table: the second is dropped. Control: without the first, t2 is released, as counted on
    onnxruntime's own predictions."""
    data, _, _, predictors = gbm
    provisioned, services, _, small = _one_site(tmp_path, setting, gbm)
    p = _onnxruntime(data, small, predictors)
    subset = (small.age > 50).to_numpy()
    t1, t2 = cut_next_to_one_record(p, subset, gap=1e-4)  # the sites' float32 sums: within 1e-6 of these
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "GBSG2.small")
        upload_model(session, GBM)
        ds_predict(session, "D", "gbsg2-gbm", "P")
        session.assign("S", Call("subsetRowsDS", "D", "age", ">", 50))
        ds_predict(session, "S", "gbsg2-gbm", "PS")
        released = site1_count_below(session, "PS", t1) if first else None
        second = site1_count_below(session, "P", t2)
    if first:
        assert released == [int((p[subset] <= t1).sum())]
        assert second == [None]
    else:
        assert second == [int((p <= t2).sum())]


def test_the_graph_run_in_batches_gives_each_record_onnxruntimes_whole_run_prediction(gbm):
    """The site runs a graph BATCH_ROWS records at a time (its working tensors stay a batch's size):
    each of 2 x BATCH_ROWS + 1 records gets exactly the prediction of one onnxruntime run over all of them on one
    thread, and the records of a subset the prediction they get in the whole table (a record's cuts
    are checked in the history of every record's predictions)."""
    data, _, pooled, predictors = gbm
    frame = pooled.sample(2 * BATCH_ROWS + 1, replace=True, random_state=3, ignore_index=True)  # a last batch of 1
    whole = _onnxruntime(data, frame, predictors, one_thread=True)
    model = parse_onnx(data)
    columns = {c: frame[c].to_numpy() for c in predictors}
    np.testing.assert_array_equal(probabilities(model, columns), whole)
    older = (frame.age > 50).to_numpy()
    np.testing.assert_array_equal(probabilities(model, {c: v[older] for c, v in columns.items()}), whole[older])


def _pairing_graph() -> bytes:
    """A graph the parser accepts whose run fails on an odd number of records: it reshapes its input
    to rows of two, and back."""
    shapes = [numpy_helper.from_array(np.array(v, np.int64), name)
              for name, v in (("pairs", [-1, 2]), ("rows", [-1, 1]))]
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    nodes = [helper.make_node("Reshape", ["x", "pairs"], ["a"]), helper.make_node("Reshape", ["a", "rows"], ["p"]),
             helper.make_node("Sub", ["one", "p"], ["q"]),
             helper.make_node("Concat", ["q", "p"], ["probabilities"], axis=1)]
    graph = helper.make_graph(nodes, "pairing", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
                              [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 2])],
                              initializer=[*shapes, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_graph_failing_on_a_batch_tells_the_analyst_no_count(caplog):
    """A run that fails on the last batch (65,537 records: a batch of one) is refused whole, and its
    message names no shape, which would tell the number of records (mod BATCH_ROWS); the site's log
    keeps onnxruntime's message. Control: on 12 records (halves of 6) the graph runs, p = x."""
    model = parse_onnx(_pairing_graph())
    np.testing.assert_array_equal(probabilities(model, {"x": np.full(12, 0.25)}), np.full(12, 0.25))
    with pytest.raises(ModelError) as exc:
        probabilities(model, {"x": np.full(BATCH_ROWS + 1, 0.25)})
    assert str(exc.value) == "onnxruntime could not run the model (its message is in the site's log)"
    assert "Input shape:{1,1}" in caplog.text


def _centring_graph() -> bytes:
    """A graph the parser accepts whose prediction for a record depends on the others it is run with:
    p = sigmoid(x - mean(x)), the mean over the records (ReduceMean over axis 0)."""
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["d"]), helper.make_node("Sigmoid", ["d"], ["p"]),
             helper.make_node("Sub", ["one", "p"], ["q"]),
             helper.make_node("Concat", ["q", "p"], ["probabilities"], axis=1)]
    graph = helper.make_graph(nodes, "centring", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
                              [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 2])],
                              initializer=[one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_graph_mixing_records_is_refused_when_run():
    """The centring graph folds every record's x into each prediction (here, the mean age of the
    records it runs with): its prediction for a record differs between the whole first batch and a
    half of it, so the site refuses it. By hand: x - mean(x) over 100 ages 20..119 is x - 69.5, over
    the first half x - 44.5. The GBM predicts each record alone and runs (the tests above)."""
    model = parse_onnx(_centring_graph())
    ages = np.arange(20.0, 120.0)
    whole = 1 / (1 + np.exp(-(ages - 69.5)))
    half = 1 / (1 + np.exp(-(ages[:50] - 44.5)))
    assert not np.allclose(whole[:50], half, atol=1e-3)  # what the check sees
    with pytest.raises(ModelError) as exc:
        probabilities(model, {"x": ages})
    assert "changes with the other records it is run with" in str(exc.value)
