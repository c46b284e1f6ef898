"""``dsfed demo``: five GBSG2 hospital sites on loopback and an analyst session over HTTP.

Starts one ``dsfed-server`` process per site from ``opal_fixtures/`` and
``disclosure_rules/`` with freshly generated credentials, logs in over HTTP,
assigns the validation table, runs allowlisted aggregates (counts, means, a
table, a histogram, quantiles by R if this machine has it, a subset), shows a
disclosive request refused with the rule that refused it, validates the fixture's
score, runs Schalk et al.'s (2024) workflow (:mod:`dsfed_demo.models`: models fitted on a
training site, approved, applied and validated at the five sites, compared paired),
closes the session, stops the sites (also on Ctrl-C) and verifies every site's
audit chain (the training site's too).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from dsfed_client.calls import Call, Ref
from dsfed_client.session import LoginBuilder
from dsfed_demo.models import seed000_workflow
from dsfed_demo.report import Report
from dsfed_server import audit
from dsfed_server.launch import LocalSites
from dsfed_server.provision import provision

SITES = ("site1", "site2", "site3", "site4", "site5")
TABLE = "GBSG2.validation"


def find_repo_dir(name: str) -> Path:
    """``opal_fixtures`` / ``disclosure_rules`` next to the working directory or the package."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (base / name).is_dir():
            return base / name
    raise FileNotFoundError(f"cannot find {name}/ (run from the dsfed repository, or pass its path)")


def _site_table(per_site: dict[str, Any], fmt: str = "{:.3f}") -> str:
    return ", ".join(f"{s} {fmt.format(v)}" for s, v in per_site.items())


def run_demo(fixtures: Path, rules: Path, json_path: Path | None = None, keep: bool = False,
             report_path: Path | None = None) -> int:
    """Run the demo; the validation report (HTML) goes to ``report_path``, else next to ``json_path``,
    else next to the run directory (which is removed unless ``keep``)."""
    run_dir = Path(tempfile.mkdtemp(prefix="dsfed-demo-"))
    report = Report()
    try:
        sites = provision(run_dir, {s: (fixtures / s, rules / f"{s}.toml") for s in SITES})
        analyst = sites[SITES[0]].credentials["analyst"]
        print(f"Starting {len(SITES)} site servers (separate processes, loopback, free ports) in {run_dir}")
        with LocalSites(sites.values(), run_dir) as local:
            for name, url in local.urls.items():
                print(f"   {name}: {url}  (rules: {rules / (name + '.toml')})")
            report.results["sites"] = local.urls
            builder = LoginBuilder()
            for name, url in local.urls.items():
                builder.append(name, url, user=analyst.user, password=analyst.password)
            with builder.login() as session:
                _analysis(session, report)
                _validation(session, report, fixtures)
                training = seed000_workflow(session, report, fixtures, rules, run_dir)
        report.section("Audit logs (one per site, hash-chained)")
        chains = {}
        for name, site in {**sites, training.name: training}.items():
            check = audit.verify_file(site.audit_log, site.secret)
            chains[name] = {"ok": check.ok, "records": check.records}
            print(f"   {name}: {check}")
        report.results["audit"] = chains
        print("\nAll sites stopped.")
        if json_path:
            json_path.write_text(json.dumps(report.results, indent=2, default=float) + "\n")
            print(f"Results written to {json_path}")
        if report.validation is not None:
            from dsfed_client.report import write_models_report  # noqa: PLC0415

            html_path = report_path or (json_path.with_suffix(".html") if json_path
                                        else run_dir.parent / f"{run_dir.name}-report.html")
            ok = sum(c["ok"] for c in chains.values())
            write_models_report(report.models, html_path, report.comparison, **report.validation[1],
                                title="dsfed demo: GBSG2 models validated across five sites",
                                notes=["The paper's workflow (Schalk, Rehms et al. 2024): models fitted on the "
                                       "training split (a logistic regression by the distributed GLM on a training "
                                       "site, and sklearn gradient boosting exported to ONNX), approved by each "
                                       "validation site's board by SHA-256, applied at the sites (predictDS) and "
                                       "validated there beside the fixture's ranger score, the two new models "
                                       "compared on the same patients.",
                                       f"Five site servers on loopback, analyst session over HTTP; audit hash chains "
                                       f"verified at {ok} of {len(chains)} sites (the training site's included)."])
            print(f"Validation report written to {html_path}")
        return 0 if all(c["ok"] for c in chains.values()) else 1
    finally:
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)


def _pooled_fixture(fixtures: Path) -> "pd.DataFrame":
    import pandas as pd  # noqa: PLC0415

    return pd.concat([pd.read_csv(fixtures / s / "GBSG2" / "validation.csv") for s in SITES], ignore_index=True)


def _validation(session, report: Report, fixtures: Path) -> None:  # type: ignore[no-untyped-def]
    """Schalk et al.'s (2024) analysis of the GBSG2 sites by the default method, each estimate beside the pooled one."""
    from dsfed_server import pooled  # noqa: PLC0415
    from dsfed_client.analyses.suite import validate  # noqa: PLC0415

    report.section("Validation of the prediction model (over HTTP; pooled releases checked by the sites)")
    before = session.transfer_stats()
    v = validate(session, "D$y", "D$score", heterogeneity=True)
    after = session.transfer_stats()
    data = _pooled_fixture(fixtures)
    ref = pooled.suite(data["y"].to_numpy(), data["score"].to_numpy())
    d = v.discrimination
    print(f"   disclosure checks: {v.mode}{'' if v.mode == 'pooled' else ' (' + v.mode_note + ')'}")
    print(f"   discrimination ({d.method} method): {d.noise}")
    if d.method == "histogram":
        fit = d.result.roc_glm
        print(f"   estimator: {d.result.estimator}" + (f"; the ROC-GLM fitted on {fit.fitted_on}" if fit else ""))
    rows = [
        ("empirical AUC", d.auc, ref["auc"], "95% CI {:.3f}-{:.3f} (DeLong + noise variance; noise sd {:.4f})".format(
            *d.ci, d.noise_variance ** 0.5)),
        ("ROC-GLM AUC", d.roc_glm_auc, ref["roc_glm_auc"], "95% CI {:.3f}-{:.3f}; a = {:.3f}, b = {:.3f}".format(
            *d.roc_glm_ci, d.a, d.b)),
        ("Brier score", v.brier.brier, ref["brier"], ""),
        ("Spiegelhalter z", v.brier.spiegelhalter_z, ref["spiegelhalter_z"], f"p = {v.brier.spiegelhalter_p:.3g}"),
        ("calibration intercept", v.logistic.intercept, ref["calibration_intercept"],
         f"{v.logistic.n_excluded} records with p = 0 or 1 left out (as val.prob)"),
        ("calibration slope", v.logistic.slope, ref["calibration_slope"], ""),
        ("H-L C statistic", v.hl_c.statistic, ref["hl_c"], _hl_note(v.hl_c)),
        ("H-L H statistic", v.hl_h.statistic, ref["hl_h"], _hl_note(v.hl_h)),
        ("ECE", v.errors.ece, ref["ece"], "groups of H-L C"),
        ("MCE", v.errors.mce, ref["mce"], "groups of H-L C"),
    ]
    print(f"   {'estimator':<24}{'distributed':>14}{'pooled':>14}{'difference':>12}   note")
    for label, dist, pool, note in rows:
        print(f"   {label:<24}{dist:>14.6f}{pool:>14.6f}{abs(dist - pool):>12.1e}   {note}")
    curve = v.curve.to_frame()
    exact = np.asarray(ref["calibration_curve"], dtype=float)
    print(f"   calibration curve (10 bins, q = 5): {v.curve.bins.note()}")
    for row, pooled_mean in zip(curve.itertuples(), exact):
        if row.n:
            print(f"     [{row.lower:.1f}, {row.upper:.1f}): n {row.n:>3}  predicted {row.mean_prediction:.3f}"
                  f"  observed {row.mean_outcome:.6f}  (pooled {pooled_mean:.6f})")
    print(f"   H-L C groups (R's deciles): {v.hl_c.table['n'].tolist()}")
    _smooth_and_sites(v)
    trips = {s: after[s]["requests"] - before[s]["requests"] for s in after}
    sent = {s: after[s]["bytes_sent"] - before[s]["bytes_sent"] for s in after}
    print(f"   round trips per site: {max(trips.values())}; bytes sent per site: "
          + ", ".join(f"{s} {b:,}" for s, b in sent.items()))
    report.results["validation"] = v.to_dict()
    report.results["validation_pooled"] = ref
    report.results["validation_transfer"] = {"round_trips": trips, "bytes_sent": sent}
    from dsfed_client.report import collect_study_info  # noqa: PLC0415

    report.validation = (v, collect_study_info(session, "D$y", table=TABLE, score="D$score"))


def _smooth_and_sites(v) -> None:  # type: ignore[no-untyped-def]
    """The smooth calibration's summaries and the per-site meta-analysis, or why they are absent."""
    if v.smooth is None:
        print(f"   smooth calibration: {v.smooth_note}")
    else:
        s = v.smooth
        print(f"   smooth calibration (rcs of logit(p), {len(s.knots)} site-derived knots): ICI {s.ici:.4f}, "
              f"E50 {s.e50:.4f}, E90 {s.e90:.4f}, Emax {s.emax:.4f}; Nagelkerke R2 {s.r2:.4f}, "
              f"log loss {s.log_loss:.4f}")
        for note in (s.knots_note, s.range_note):
            if note:
                print(f"     {note}")
    h = v.heterogeneity
    if h is None or not h.available:
        print(f"   heterogeneity across sites: {h.note if h is not None else 'not asked'}")
        return
    print(f"   heterogeneity across sites (random effects, {h.auc.method if h.auc else ''}):")
    for label, meta in (("AUC", h.auc), ("calibration slope", h.slope), ("O/E", h.oe)):
        if meta is not None:
            print(f"     {label:<18} pooled {meta.estimate_back:.3f} ({meta.ci_back[0]:.3f}-"
                  f"{meta.ci_back[1]:.3f}); tau^2 {meta.tau2:.4f}, I^2 {meta.i2:.1f}%, prediction interval "
                  f"{meta.pi_back[0]:.3f}-{meta.pi_back[1]:.3f}")


def _hl_note(hl) -> str:  # type: ignore[no-untyped-def]
    return f"df {hl.df}, p = {hl.pvalue:.3g}; {hl.note()}"


def _analysis(session, report: Report) -> None:  # type: ignore[no-untyped-def]
    report.section("Analyst session over HTTP")
    print(f"   logged in to {len(session.sites)} sites: {', '.join(session.sites)}")
    session.assign_table("D", TABLE)
    report.show("assign", f"D <- {TABLE} at every site (the records stay there)", TABLE)

    report.section("Counts and means (pooled exactly from per-site sums)")
    n = session.length("D$age")
    report.show("n", f"n = {n.n}  ({_site_table(n.per_site, '{:d}')})", {"pooled": n.n, **n.per_site})
    m = session.mean("D$age")
    report.show("mean_age", f"mean age = {m.mean:.3f} years  ({_site_table(m.per_site)})",
                {"pooled": m.mean, "per_site": m.per_site})
    v = session.var("D$age")
    report.show("var_age", f"variance of age = {v.variance:.3f}", {"pooled": v.variance, "per_site": v.per_site})
    s = session.mean("D$score")
    report.show("mean_score", f"mean predicted score = {s.mean:.4f}", {"pooled": s.mean, "per_site": s.per_site})

    report.section("Tables")
    t = session.table1d("D$horTh")
    report.show("table_horTh", f"hormonal therapy: {t.as_dict()}", t.as_dict())
    t2 = session.table2d("D$y", "D$cens")
    report.show("table_y_cens", f"y (recurrence-free at 730 d) by cens: {t2.as_dict()}", t2.as_dict())
    report.attempt(
        "histogram_age", "histogram of age over (20, 50.5, 58.5, 85], summed over the sites' own histograms",
        lambda: (lambda h: (f"counts {h.counts.tolist()}", {"edges": h.edges.tolist(), "counts": h.counts.tolist()}))(
            session.histogram("D$age", [20, 50.5, 58.5, 85])
        ),
    )
    report.attempt(
        "quantiles_age", "quantiles of age (R type 7, through rpy2) at site1",
        lambda: (lambda r: (str(r["site1"]), dict(r)))(session.aggregate("quantileMeanDS", Ref("D$age"))),
    )

    report.section("A subset created on the sites, checked against the cuts released before")
    report.attempt("refused_subset_age50", "subset age >= 50 (the histogram above cut at age <= 50: the two "
                   "would single out the 50-year-olds)",
                   lambda: ("", dict(session.assign("older", Call("subsetRowsDS", Ref("D"), "age", ">=", 50)))))
    session.assign("older", Call("subsetRowsDS", Ref("D"), "age", ">", 50))
    mo = session.mean("older$score")
    report.show("mean_score_age50", f"subset age > 50 (the histogram's own cut): mean score {mo.mean:.4f} "
                f"(n = {mo.n_valid})", {"pooled": mo.mean, "n": mo.n_valid})

    report.section("Pooled releases: the sites check the cells the analyst sees, pooled over the sites")
    from dsfed_client.analyses.glm import ds_glm  # noqa: PLC0415

    print("   per site, two sites hold a cell below q = 5 (their share of a cell may be small; what the "
          "analyst sees is not):")
    report.attempt("refused_table", "table of menopausal status by outcome, checked per site",
                   lambda: ("", session.table2d("D$menostat", "D$y").as_dict()))
    pooled_table = session.pooled("table2DDS", Ref("D$menostat"), Ref("D$y"))
    table = {r: dict(zip(pooled_table["cols"], row)) for r, row in zip(pooled_table["rows"], pooled_table["counts"])}
    report.show("pooled_table_menostat_y", f"the same table pooled over the sites (every cell >= 5): {table}", table)
    formula = "y ~ age + tgrade + horTh"
    report.attempt("refused_glm", f"logistic GLM {formula}, checked per site",
                   lambda: ("", ds_glm(session, formula, "D").to_dict()))
    secure = ds_glm(session, formula, "D", secure=True)
    print(f"   the same GLM as a pooled protocol: the sites sum their Fisher-scoring parts among themselves, "
          f"check the pooled factor levels and derive every iterate themselves ({secure.iterations} rounds):")
    for name, b, se in zip(secure.names, secure.params, secure.bse):
        print(f"     {name:<14} {b:>9.4f}  (se {se:.4f})")
    report.results["secure_glm"] = {"formula": formula, "coefficients": dict(zip(secure.names, secure.params.tolist())),
                                    "sites": list(secure.sites), "pooled": secure.pooled}

    report.section("Disclosive requests are refused, with the site, the function and the rule")
    report.attempt("refused_subset", "subset age > 75",
                   lambda: ("", dict(session.assign("old", Call("subsetRowsDS", Ref("D"), "age", ">", 75)))))
    report.attempt("refused_code", 'call text system("ls")',
                   lambda: ("", dict(session.aggregate_expr('system("ls")'))))
