"""The validation report: one self-contained HTML file (inline CSS, plots as inline SVG).

.. code-block:: python

    from dsfed_client.analyses.suite import validate
    from dsfed_client.report import collect_study_info, write_report

    with builder.login() as session:
        session.assign_table("D", "GBSG2.validation")
        report = validate(session, "D$y", "D$score")
        study = collect_study_info(session, "D$y", table="GBSG2.validation", score="D$score")
        write_report(report, "report.html", **study)

The page holds the study set-up (sites, n per site, the rules in force at each
site as its function listing states them), the privacy loss the analysis
spent, discrimination (empirical AUC and ROC-GLM with CIs, the ROC curve and,
when given, a PR curve), calibration (Brier, Spiegelhalter, intercept, slope,
calibration-in-the-large, Hosmer-Lemeshow C and H, ECE/MCE and the plots),
decisions at thresholds (metrics with intervals, the decision curve),
per-site panels of what the sites released (per-site checking only), heterogeneity
across sites (per-site AUC, calibration slope and O/E, their random-effects meta-analysis and
forest plots, where the sites release per-site estimates), how the
sites checked what they released and what they coarsened, and the software and
method versions. Nothing is fetched when the page is opened.
:func:`collect_study_info` asks the sites only for their function listings and
the per-site count of the outcome (``lengthDS``, under the site's q-threshold).
"""

from __future__ import annotations

import html
import importlib.metadata
import math
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from dsfed_client import plots

if TYPE_CHECKING:  # pragma: no cover
    from dsfed_client.analyses.calibration import HosmerLemeshow
    from dsfed_client.analyses.comparison import ModelComparison
    from dsfed_client.analyses.suite import ValidationReport
    from dsfed_client.session import FederatedSession

METHODS = {
    "histogram": ("Empirical AUC and ROC-GLM", "placement values against global CDFs from the sites' noisy "
                  "hierarchical histograms (Xu & Cormode 2025), DeLong variance plus the noise's, CI of Schalk, Rehms "
                  "et al. (2024) eq. (3); "
                  "probit ROC-GLM on the same placement values by distributed Fisher scoring"),
    "paper": ("Empirical AUC and ROC-GLM", "Schalk, Rehms et al. (2024): noisy scores by the analytic "
              "Gaussian mechanism, placement values, DeLong variance; probit ROC-GLM, CI of eq. (3)"),
}
CALIBRATION_METHODS = (
    ("Brier, Spiegelhalter z", "Schalk, Rehms et al. (2024) eq. 5; Huang (2020) section 3.5.1 (rms::val.prob S:z)"),
    ("Calibration curve", "Schalk, Rehms et al. (2024): equal-width bins; bins below q merged by the sites' release "
     "gate"),
    ("Hosmer-Lemeshow C / H", "deciles of risk (R's type-7 quantiles, found by the sites on pooled counts, or by a "
     "count-only search per site) / fixed bins (hoslem.test)"),
    ("ECE, MCE", "Huang (2020) eq. 3.6 over the groups of H-L C"),
    ("Calibration intercept, slope, CITL", "distributed GLM of y ~ logit(p) and y ~ 1 + offset(logit(p))"),
    ("Metrics at thresholds", "pROC::coords convention (positive when score >= threshold); Wilson or exact "
     "intervals; thresholds are cuts the sites' release gate checks"),
    ("Decision curve", "net benefit TP/n - FP/n t/(1-t) (Vickers & Elkin 2006) at the thresholds the sites released"),
)

_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px 32px 48px}
h1{font-size:1.6em;margin:0 0 4px} h2{border-bottom:2px solid #d8dce3;padding-bottom:4px;margin-top:36px}
h3{margin-bottom:6px} .sub{color:#5a6270;margin:0 0 12px}
table{border-collapse:collapse;margin:8px 0 16px;background:#fff;font-size:.9em}
th,td{border:1px solid #d8dce3;padding:4px 9px;text-align:right} th{background:#eef1f5}
td.l,th.l{text-align:left}
.figs{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
figure{margin:0;background:#fff;border:1px solid #d8dce3;padding:8px}
figure svg{display:block;max-width:100%;height:auto} figcaption{font-size:.85em;color:#5a6270;max-width:560px}
.warn{background:#fff4e0;border-left:4px solid #e39b22;padding:8px 12px;margin:8px 0}
.ok{background:#e9f6ec;border-left:4px solid #2e9a4b;padding:8px 12px;margin:8px 0}
code{background:#eef1f5;padding:0 3px}
"""


# --- collecting what the page shows ------------------------------------------------------

def collect_study_info(session: "FederatedSession", truth: str, *, table: str | None = None,
                       score: str | None = None) -> dict[str, Any]:
    """Site set-up for :func:`write_report`: per-site n of ``truth``, the rules in force, and the
    analyst's privacy budget at each site (spent and remaining, the ledger's figures).

    Returns ``{"sites_info": ..., "rules_info": ..., "data_info": ..., "budget_info": ...}`` to pass
    on as keyword arguments. Uses the sites' function listings (``GET /functions``), ``lengthDS``
    and ``session.budget()`` (``GET /budget/mine``) only: no new disclosure-relevant query.
    """
    listing = session.functions()
    counts = session.length(truth)
    sites_info = {s: {"n": int(counts.per_site[s]), "profile": listing[s].get("profile"),
                      "noise_off": bool(listing[s].get("noise_off")),
                      "functions": len(listing[s].get("functions", []))} for s in session.sites}
    rules_info = {s: listing[s].get("rules", {}) for s in session.sites}
    budget = session.budget()
    return {"sites_info": sites_info, "rules_info": rules_info,
            "data_info": {"table": table, "truth": truth, "score": score},
            "budget_info": {s: budget[s] for s in session.sites}}


def software_versions() -> dict[str, str]:
    """Versions of dsfed and the libraries the numbers and plots depend on."""
    out = {}
    for dist in ("dsfed", "numpy", "scipy", "pandas", "matplotlib"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    out["python"] = platform.python_version()
    try:  # the source tree's commit, when run from a checkout (read-only)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                                capture_output=True, text=True, timeout=5)
        if commit.returncode == 0 and commit.stdout.strip():
            out["dsfed commit"] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


# --- formatting ------------------------------------------------------------------------------

def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "-"
        if float(value).is_integer() and abs(value) < 1e6:
            return f"{int(value):,}"
        return f"{value:.{digits}g}" if abs(value) < 1e-3 or abs(value) >= 1e5 else f"{value:.{digits}f}"
    return _e(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, cls: str = "", left: int = 1) -> str:
    """An HTML table; text cells and the first ``left`` columns are left-aligned, numbers right-aligned."""
    text = [i < left or (bool(rows) and isinstance(rows[0][i], str)) for i in range(len(header))]
    head = "".join(f'<th class="{"l" if text[i] else ""}">{_e(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left or isinstance(v, str) else ""}">'
                         f'{_e(v) if isinstance(v, str) else _num(v)}</td>' for i, v in enumerate(row)) + "</tr>"
        for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _rendered(fig: Any, draw: Any, caption: str, name: str) -> str:
    """Run ``draw()`` on the matplotlib figure ``fig`` (closed after) and return it as an inline SVG
    inside ``<figure>``."""
    try:
        draw()
        svg = plots.figure_svg(fig)
    finally:
        plots._pyplot().close(fig)
    return f'<figure class="plot" data-plot="{_e(name)}">{svg}<figcaption>{_e(caption)}</figcaption></figure>'


def _figure(draw: Any, caption: str, *, figsize: tuple[float, float] = (5.2, 4.6), name: str) -> str:
    """Run ``draw(ax)`` on a new figure and return it as an inline SVG inside ``<figure>``."""
    fig, ax = plots._pyplot().subplots(figsize=figsize)
    return _rendered(fig, lambda: draw(ax), caption, name)


def _calibration_figure(report: "ValidationReport") -> str:
    fig, (ax, hist) = plots._pyplot().subplots(2, 1, figsize=(5.6, 6.4), sharex=True,
                                               gridspec_kw={"height_ratios": [3, 1], "hspace": 0.08})
    c = report.curve
    caption = (f"Pooled points (black, sized by n) over the bins the sites released ({report.curve.bins.note()}); "
               f"thin lines: each site's released bins (per-site release only). Below: predictions per bin.")
    return _rendered(fig, lambda: plots.plot_calibration(c.edges, c.n, c.mean_prediction, c.mean_outcome,
                                                         per_site=c.per_site, ax=ax, hist_ax=hist),
                     caption, "calibration")


def _per_site_figure(report: "ValidationReport") -> str:
    if report.curve is None:
        return ""
    per_site = report.curve.per_site
    if not per_site:
        return ""
    k = len(per_site)
    cols = min(k, 5)
    rows = math.ceil(k / cols)
    fig, axes = plots._pyplot().subplots(rows, cols, figsize=(2.6 * cols, 2.8 * rows), squeeze=False, sharex=True,
                                         sharey=True, layout="constrained")
    c = report.curve
    pooled = c.n > 0

    def draw() -> None:
        for ax, (site, frame) in zip(axes.ravel(), per_site.items()):
            ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1)
            ax.plot(c.mean_prediction[pooled], c.mean_outcome[pooled], color="lightgrey", linewidth=1)
            shown = frame[frame["n"] > 0]
            ax.scatter(shown["mean_prediction"], shown["mean_outcome"], s=10 + shown["n"], color="tab:blue",
                       gid=f"site-points-{site}")
            ax.set_title(f"{site}: {int(frame['n'].sum())} records in {int((frame['n'] > 0).sum())} bins",
                         fontsize=7)
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xticks([0, 0.5, 1])
            ax.set_yticks([0, 0.5, 1])
        for ax in axes.ravel()[k:]:
            ax.set_visible(False)
        fig.supxlabel("predicted probability", fontsize=9)
        fig.supylabel("observed event rate", fontsize=9)

    caption = "Each site's calibration points as the site released them (bins under its q-threshold merged)."
    return _rendered(fig, draw, caption, "per-site")


# --- sections -------------------------------------------------------------------------------


def _heterogeneity_section(report: "ValidationReport") -> str:
    """Per-site AUC, calibration slope and O/E, their random-effects meta-analyses and forest plots;
    or the note saying why the sites released no per-site estimates."""
    h = report.heterogeneity
    if h is None or not h.available:
        return f'<p class="warn">No per-site estimates: {_e(h.note if h is not None else "not asked")}</p>'
    t = h.to_frame()
    sites = [[s, r["n"], r["auc"], r["auc_ci_lower"], r["auc_ci_upper"], r["slope"], r["slope_se"], r["oe"]]
             for s, r in t.iterrows()]
    pooled = [[m.measure, m.k, m.estimate_back, *m.ci_back, *m.pi_back, m.tau2, m.i2, m.q, m.q_pvalue]
              for m in h.analyses.values()]
    left_out = "".join(f'<p class="warn">{_e(n)}</p>' for n in h.left_out())
    figure = ""
    if h.analyses:
        k = len(h.analyses)
        fig, axes = plots._pyplot().subplots(1, k, figsize=(4.6 * k, 1.8 + 0.42 * len(t)), squeeze=False,
                                             layout="constrained")
        figure = _rendered(fig, lambda: h.plot(ax=axes[0]), "Forest plots: each site's estimate and interval "
                           "(square sized by its random-effects weight), the pooled estimate (diamond) and the "
                           "prediction interval for a new site (bar).", "forest")
    level = f"{1 - h.alpha:.0%}"
    first = next(iter(h.analyses.values()), None)
    how = (f"tau^2 by {first.method}; prediction interval with the {first.prediction} quantile" if first else "")
    return ("<p>Each number below is a per-site release that the site checked by its own rules. Pooled by "
            f"random-effects meta-analysis (AUC on the logit scale, O/E on the log scale; {_e(how)}).</p>"
            + _table(["site", "n", "AUC", f"{level} lower", f"{level} upper", "calibration slope", "slope SE", "O/E"],
                     sites)
            + _table(["measure", "sites", "pooled", f"{level} lower", f"{level} upper", "PI lower", "PI upper",
                      "tau^2", "I^2 (%)", "Q", "Q p-value"], pooled)
            + left_out + f'<div class="figs">{figure}</div>')

def _setup_section(report: "ValidationReport", sites_info: dict[str, dict[str, Any]],
                   rules_info: dict[str, dict[str, Any]], data_info: dict[str, Any]) -> str:
    d = report.discrimination
    mechanism = d.mechanism if d is not None else {}
    sigma = d.result.reference.sigma if d is not None and d.method == "paper" else {}  # type: ignore[union-attr]
    sites = list(dict.fromkeys([*sites_info, *(s for s in mechanism if s != "pooled")]))
    rows = []
    for s in sites:
        info, rules = sites_info.get(s, {}), rules_info.get(s, {})
        disc, priv, bins = rules.get("disclosure", {}), rules.get("privacy", {}), rules.get("bins", {})
        mech = mechanism.get(s, {})
        rows.append([s, info.get("n"), info.get("profile") or "-", disc.get("q_threshold"), disc.get("subset_min"),
                     disc.get("glm_saturation"), bins.get("small_bin_policy", "-"),
                     mech.get("mechanism") or priv.get("mechanism", "-"),
                     mech.get("epsilon") if mech.get("epsilon") is not None else priv.get("epsilon"),
                     mech.get("delta") if mech.get("delta") is not None else priv.get("delta"),
                     sigma.get(s)])
    n_total = sum(int(i["n"]) for i in sites_info.values() if i.get("n") is not None) or report.brier.n
    data = ", ".join(f"{k} <code>{_e(v)}</code>" for k, v in data_info.items() if v)
    mode = ("Every binned release (bins, groups, tables, placement sums) was checked by the sites on the cells "
            "pooled over the sites (secure aggregation with pooled thresholds): the analyst saw only pooled sums."
            if report.mode == "pooled" else
            f"Every binned release was checked by each site on its own cells: {report.mode_note}.")
    out = [f"<p>{len(sites)} sites, n = {_num(n_total)} records with a known outcome"
           + (f"; {data}" if data else "") + ".</p>",
           f'<p class="{"ok" if report.mode == "pooled" else "warn"}">{_e(mode)}</p>',
           _table(["site", "n", "profile", "q", "subset min", "GLM saturation", "small bins", "noise",
                   "epsilon", "delta", "sigma (noisy scores)"], rows)]
    if d is not None and d.noise_off:
        out.append('<p class="warn">Noise is OFF at every site (a test profile): the scores were released '
                   'unperturbed and every number equals the pooled computation. Never for real data.</p>')
    return "".join(out)


def _privacy_section(report: "ValidationReport", rules_info: dict[str, dict[str, Any]],
                     budget_info: dict[str, dict[str, Any]] | None, curves: Any = None) -> str:
    """What this analysis released with noise, then each site's ledger figures for the analyst:
    spent and remaining per table, as ``session.budget()`` (``GET /v1/budget/mine``) states them, the
    same figures as ``GET /v1/budget`` and ``dsfed audit show`` (one statement,
    :func:`dsfed_server.disclosure.accountant.statement`)."""
    return _releases(report, rules_info, curves) + _budget_table(budget_info)


def _releases(report: "ValidationReport", rules_info: dict[str, dict[str, Any]], curves: Any = None) -> str:
    """What this analysis released with noise: each release's mechanism and its (epsilon, delta)."""
    d = report.discrimination
    if d is None:
        return "<p>The discrimination section was not computed: its noisy release is not listed here.</p>"
    what = "noisy scores (AUC, ROC-GLM)" if d.method == "paper" else "score histograms (AUC, ROC-GLM)"
    releases = [(what, d.mechanism)]
    if curves is not None:
        releases.append(("score histograms (ROC/PR curves)", curves.histograms.mechanism))
    rows = []
    for s in rules_info or {k: None for k in d.mechanism if k != "pooled"}:
        priv = rules_info.get(s, {}).get("privacy", {})
        for label, mechanisms in releases:
            mech = mechanisms.get(s) or mechanisms.get("pooled", {})
            off = mech.get("mechanism") == "none"
            rows.append([s, label, mech.get("mechanism", "-"), 0.0 if off else mech.get("epsilon", priv.get("epsilon")),
                         0.0 if off else mech.get("delta", priv.get("delta"))])
    first = ("Each site released its prediction scores once, with noise (the two classes are disjoint sets of "
             "records, so together they cost one (epsilon, delta))" if d.method == "paper" else
             "Each site released hierarchical histograms of its scores once, with noise, at its own (epsilon, "
             "delta)" + (" (summed over the sites, each adding its share of the noise)"
                         if "pooled" in d.mechanism else ""))
    note = (f"<p>{first}"
            + ("; the histogram-based curves are a second noisy release" if curves is not None else "")
            + ". Every other statistic is a count or a sum over at least q records and spends no privacy budget.</p>")
    return note + _table(["site", "release", "mechanism", "epsilon of the release", "delta of the release"], rows)


def _budget_table(budget_info: dict[str, dict[str, Any]] | None) -> str:
    """Each site's ledger figures for the analyst, per table (``session.budget()``)."""
    if not budget_info:
        return "<p>The sites' budget figures were not collected (collect_study_info gathers them).</p>"
    rows = [[site, t["table"], t["spent"]["epsilon"], t["spent"]["delta"], t["spent"]["accountant"],
             t["remaining"]["epsilon"], info["budget"]["epsilon"], t["queries"]]
            for site, info in budget_info.items() for t in info["tables"]]
    note = ("<p>Your privacy budget at each site, as its ledger states it (session.budget(); the figures the site's "
            "governance reads at GET /v1/budget and in dsfed audit show): every noisy release you made on the table, "
            "this analysis's and earlier ones, composed by the tighter of basic composition and Renyi DP at the "
            "budget's delta; remaining = your share of the table's budget - spent.</p>")
    if not rows:
        return note + "<p>No privacy budget spent at any site.</p>"
    return note + _table(["site", "table", "epsilon spent", "delta spent", "accountant", "epsilon remaining",
                          "epsilon budget (analyst)", "noisy queries"], rows, cls="budget", left=2)


def _discrimination_section(report: "ValidationReport", roc_overlay: tuple[Sequence[float], Sequence[float]] | None,
                            pr_curve: dict[str, Any] | None) -> str:
    d = report.discrimination
    level = d.level
    auc_note = ("logit CI, eq. (3), DeLong + noise variance" if d.method == "histogram" else "DeLong CI")
    rows = [["empirical AUC", d.auc, d.ci.lower, d.ci.upper, auc_note],
            ["ROC-GLM AUC", d.roc_glm_auc, d.roc_glm_ci[0], d.roc_glm_ci[1],
             f"not computed: {report.failed['ROC-GLM']}" if "ROC-GLM" in report.failed
             else f"logit CI, eq. (3); a = {d.a:.4f}, b = {d.b:.4f}"]]
    if d.noise_variance:
        rows.append(["noise standard error of the AUC", d.noise_variance ** 0.5, None, None,
                     f"DeLong standard error {d.variance ** 0.5:.4f}"])
    overlay = {} if roc_overlay is None else {"fpr": roc_overlay[0], "tpr": roc_overlay[1]}
    caption = (("The ROC of the " if "ROC-GLM" in report.failed
                else "ROC-GLM fit Phi(a + b Phi^-1(t)) over the ROC of the ")
               + ("pooled noisy scores at the fit's threshold grid" if d.method == "paper"
                  else "global CDFs the sites' histograms give")
               + ("; orange: the histogram-based curve" if overlay else "") + ".")
    figs = [_figure(lambda ax: d.plot(ax=ax, **overlay), caption, name="roc")]
    if pr_curve is not None:
        figs.append(_figure(lambda ax: plots.plot_pr_curve(pr_curve["precision"], pr_curve["recall"],
                                                          prevalence=pr_curve.get("prevalence"), ax=ax),
                            "Precision-recall curve.", name="pr"))
    return (_table(["statistic", "estimate", f"{level} lower", f"{level} upper", "note"], rows)
            + f'<p class="sub">Method: {_e(d.method)}; noise: {_e(d.noise)}. {d.n_thresholds} thresholds, '
              f'{d.iterations} Fisher-scoring iterations, {d.n_positive} positives and {d.n_negative} negatives.</p>'
            + '<div class="figs">' + "".join(figs) + "</div>")


def _calibration_section(report: "ValidationReport") -> str:
    b, lg, c, h, e = report.brier, report.logistic, report.hl_c, report.hl_h, report.errors
    rows = [["Brier score", b.brier, None, None, None, f"n = {b.n}"],
            ["Spiegelhalter z", b.spiegelhalter_z, None, None, b.spiegelhalter_p, ""],
            ["observed - expected event rate", b.citl_difference, None, None, None,
             f"observed {b.mean_outcome:.4f}, mean prediction {b.mean_prediction:.4f}"]]
    if lg is not None:
        rows += [["calibration intercept", lg.intercept, *lg.intercept_ci, None, "y ~ logit(p)"],
                 ["calibration slope", lg.slope, *lg.slope_ci, None, "y ~ logit(p)"],
                 ["calibration-in-the-large", lg.citl, *lg.citl_ci, None, "y ~ 1 + offset(logit(p))"]]
    rows += [[f"Hosmer-Lemeshow {hl.kind}", hl.statistic, None, None, hl.pvalue,
              f"df {hl.df}" + ("" if hl.complete else "; groups merged or inexact (see disclosure control)")]
             for hl in (c, h) if hl is not None]
    if e is not None:
        rows += [["ECE", e.ece, None, None, None, "groups of H-L C"],
                 ["MCE", e.mce, None, None, None, "groups of H-L C"]]
    hl_rows = ([[f"({r.lower:.4g}, {r.upper:.4g}]", int(r.n), r.observed_1, r.expected_1, r.observed_0, r.expected_0]
                for r in c.table.itertuples()] if c is not None else [])
    figs = [_calibration_figure(report)] if report.curve is not None else []
    if hl_rows:
        figs.append(_figure(lambda ax: c.plot(ax=ax), "Observed and expected events per decile-of-risk group "
                            "(H-L C).", figsize=(6.0, 4.2), name="hosmer-lemeshow"))
    if lg is not None:
        figs.append(_figure(lambda ax: lg.plot(ax=ax), "Logistic recalibration curve against the diagonal.",
                            figsize=(4.4, 4.4), name="logistic"))
    if c is None:
        groups = ""
    elif hl_rows:
        groups = _table(["group", "n", "observed events", "expected events", "observed non-events",
                         "expected non-events"], hl_rows, left=1)
    else:
        groups = f'<p class="warn" id="hosmer-lemeshow-absent">{_e(_hl_groups_absent(c))}</p>'
    return (_not_computed(report, "calibration curve", "Hosmer-Lemeshow C", "Hosmer-Lemeshow H",
                          "logistic calibration")
            + _table(["statistic", "estimate", f"{report.level} lower", f"{report.level} upper", "p-value", "note"],
                     rows)
            + '<div class="figs">' + "".join(figs) + "</div>"
            + ("<h3>Hosmer-Lemeshow C groups</h3>" + groups if groups else ""))


def _not_computed(report: "ValidationReport", *sections: str) -> str:
    """A warning naming each of ``sections`` that :func:`~dsfed_client.analyses.suite.validate`
    could not compute, with its reason (empty if all were)."""
    return "".join(f'<p class="warn not-computed">Not computed: {_e(s)}: {_e(report.failed[s])}</p>'
                   for s in sections if s in report.failed)


def _hl_groups_absent(c: "HosmerLemeshow") -> str:
    """Why the report shows no Hosmer-Lemeshow C group table or plot."""
    why = c.table_withheld or "no group was released"
    return (f"No group table or plot: the sites released the statistic (C = {c.statistic:.4g}, df {c.df}, "
            f"computed by the sites on {len(c.group_sizes)} groups) but not the groups' counts: {why}.")


def _smooth_section(report: "ValidationReport") -> str:
    s = report.smooth
    if s is None:
        return f"<p>{_e(report.smooth_note)}</p>"
    rows = [[name, value, note] for name, value, note in (
        ("ICI", s.ici, "mean |c(p) - p| over the records"), ("E50", s.e50, "median |c(p) - p|"),
        ("E90", s.e90, "90th percentile"), ("Emax", s.emax, "max on the 1-99 % range of p"),
        ("Nagelkerke R2", s.r2, "val.prob's R2"), ("log loss", s.log_loss, f"n = {s.n}"))]
    caption = (f"y ~ rcs(logit(p)), knots at p = {', '.join(f'{k:.3f}' for k in 1 / (1 + np.exp(-s.knots)))} "
               f"(derived by the sites); band: pointwise {1 - s.alpha:.0%} CI.")
    return (_table(["statistic", "estimate", "note"], rows)
            + '<div class="figs">' + _figure(lambda ax: s.plot(ax=ax), caption, figsize=(4.4, 4.4), name="smooth")
            + "</div>")


def _thresholds_section(report: "ValidationReport") -> str:
    m, dc = report.threshold_metrics, report.decision_curve
    if m is None or dc is None:
        return _not_computed(report, "metrics at thresholds", "decision curve")
    frame = m.to_frame()
    rows = [[f"{t:g}", int(r.tp), int(r.fp), int(r.tn), int(r.fn),
             *(f"{getattr(r, k):.3f} ({getattr(r, k + '_lower'):.3f}, {getattr(r, k + '_upper'):.3f})"
               if not math.isnan(getattr(r, k)) else "-" for k in ("sensitivity", "specificity", "ppv", "npv")),
             r.accuracy, r.f1] for t, r in zip(frame.index, frame.itertuples())]
    released = (f"Released: {m.n_thresholds} of {m.requested.size} thresholds asked ({m.withheld_note()}); "
                f"decision curve: {dc.n_thresholds} of {dc.counts.requested.size} ({dc.counts.bins.note()}).")
    figs = [_figure(lambda ax: m.plot(ax=ax), f"Sensitivity and specificity at the released thresholds, "
                    f"{m.level} {m.ci_method} intervals.", figsize=(5.6, 4.2), name="threshold-metrics"),
            _figure(lambda ax: dc.plot(ax=ax), f"Net benefit of the model (at the thresholds the sites released), "
                    f"treating all and treating none; prevalence {dc.prevalence:.3f}.", figsize=(5.6, 4.2),
                    name="decision-curve")]
    return (_table(["threshold", "TP", "FP", "TN", "FN", f"sensitivity ({m.level} CI)", f"specificity ({m.level} CI)",
                    f"PPV ({m.level} CI)", f"NPV ({m.level} CI)", "accuracy", "F1"], rows)
            + f'<p class="sub">A record is called positive when its score is at least the threshold. {_e(released)}</p>'
            + '<div class="figs">' + "".join(figs) + "</div>")


def _disclosure_section(report: "ValidationReport", rules_info: dict[str, dict[str, Any]]) -> str:
    qs = sorted({r.get("disclosure", {}).get("q_threshold") for r in rules_info.values()} - {None})
    q = f"q = {', '.join(map(str, qs))} at these sites" if qs else "the sites' q"
    why = (f"Every released bin or group holds 0 or at least q records ({q}): the sites' release gate merges a "
           f"smaller one with the next, so every record is counted and nothing is filled in. Under secure "
           f"aggregation with pooled thresholds the sites check the bins pooled over the sites (what the analyst "
           f"sees); otherwise each site checks its own.")
    parts = [f"<p>{_e(why)}</p>"]
    if report.curve is not None:
        parts.append(f'<p class="{"warn" if report.curve.bins.was_coarsened else "ok"}">'
                     f"Calibration curve: {_e(report.curve.bins.note())}.</p>")
    for hl in (report.hl_c, report.hl_h):
        if hl is not None:
            parts.append(f'<p class="{"ok" if hl.complete else "warn"}">'
                         f'Hosmer-Lemeshow {hl.kind}: {_e(hl.note())}.</p>')
    dc = report.decision_curve
    for what, counts in (("Metrics at thresholds", report.threshold_metrics),
                         ("Decision curve", dc.counts if dc is not None else None)):
        if counts is not None:
            parts.append(f'<p class="{"warn" if counts.withheld else "ok"}">{what}: {_e(counts.withheld_note())}.</p>')
    if report.logistic is not None:
        parts.append(f"<p>Calibration intercept and slope: {report.logistic.n_excluded} records with p = 0 or 1 "
                     f"left out (as rms::val.prob does).</p>")
    return "".join(parts)


def _software_section(report: "ValidationReport", versions: dict[str, str]) -> str:
    d = report.discrimination
    settings = [["alpha", report.alpha], ["discrimination method", d.method if d is not None else "not computed"],
                ["disclosure checks", report.mode],
                ["ROC-GLM thresholds", d.n_thresholds if d is not None else "-"],
                ["calibration bins", len(report.curve.n) if report.curve is not None else "-"],
                ["H-L C groups formed (non-empty)", len(report.hl_c.table) if report.hl_c is not None else "-"]]
    methods = ([list(METHODS[d.method])] if d is not None else []) + [list(m) for m in CALIBRATION_METHODS]
    return ("<h3>Software</h3>" + _table(["component", "version"], [[k, v] for k, v in versions.items()], left=2)
            + "<h3>Methods</h3>" + _table(["statistic", "method"], methods, left=2)
            + "<h3>Settings</h3>" + _table(["setting", "value"], settings))


# --- the page ----------------------------------------------------------------------------------

def _page(title: str, notes: Sequence[str], sections: Sequence[tuple[str, str, str]]) -> str:
    """The HTML page: a title, notes under it, and ``(id, heading, content)`` sections."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(f'<section id="{sid}"><h2>{_e(head)}</h2>{content}</section>' for sid, head, content in sections)
    extra = "".join(f"<p>{_e(n)}</p>" for n in notes)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body><main>"
            f"<h1>{_e(title)}</h1><p class=\"sub\">Generated {stamp} by dsfed. No record left any site: every "
            f"number below is an aggregate that passed the sites' disclosure rules.</p>"
            f"{extra}{body}</main></body></html>\n")


def render_report(report: "ValidationReport", *, sites_info: dict[str, dict[str, Any]] | None = None,
                  rules_info: dict[str, dict[str, Any]] | None = None, data_info: dict[str, Any] | None = None,
                  budget_info: dict[str, dict[str, Any]] | None = None,
                  title: str = "Federated validation report",
                  roc_overlay: tuple[Sequence[float], Sequence[float]] | None = None,
                  pr_curve: dict[str, Any] | None = None, curves: Any = None, notes: Sequence[str] = ()) -> str:
    """The report as one HTML string (see :func:`write_report`)."""
    sites_info, rules_info, data_info = sites_info or {}, rules_info or {}, data_info or {}
    if curves is not None:  # histogram-based ROC/PR curves (dsfed_client.analyses.curves.ROCPRCurves)
        roc_overlay = roc_overlay or (curves.fpr, curves.tpr)
        pr_curve = pr_curve or {"precision": curves.precision, "recall": curves.tpr,
                                "prevalence": curves.n_positive / (curves.n_positive + curves.n_negative)}
    notes = [*notes, *(f"Not computed: {section}: {why}" for section, why in report.failed.items())]
    return _page(title, notes, [
        ("setup", "Study set-up", _setup_section(report, sites_info, rules_info, data_info)),
        ("privacy", "Privacy spent", _privacy_section(report, rules_info, budget_info, curves)),
        ("discrimination", "Discrimination", _discrimination_section(report, roc_overlay, pr_curve)
         if report.discrimination is not None else _not_computed(report, "discrimination")),
        ("calibration", "Calibration", _calibration_section(report)),
        ("smooth", "Smooth calibration", _smooth_section(report)),
        ("thresholds", "Decisions at thresholds", _thresholds_section(report)),
        ("per-site", "Per-site panels", _per_site_figure(report) or "<p>No per-site results released.</p>"),
        ("heterogeneity", "Heterogeneity across sites", _heterogeneity_section(report)),
        ("disclosure", "Disclosure control: what the sites checked and coarsened",
         _disclosure_section(report, rules_info)),
        ("software", "Software and methods", _software_section(report, software_versions())),
    ])


def _comparison_section(comparison: "ModelComparison") -> str:
    c, level = comparison, f"{1 - comparison.alpha:.0%}"
    rows = [[f"AUC {c.labels[0]} - AUC {c.labels[1]}", c.auc_difference, *c.ci, c.pvalue,
             "DeLong's paired test" + (" with both histograms' noise variance" if c.noise_variance else "")],
            [f"Brier {c.labels[0]} - Brier {c.labels[1]}", c.brier_difference, *c.brier_ci, c.brier_pvalue,
             "paired t on the squared errors"]]
    table = c.to_frame()
    models = [[label, *row] for label, row in zip(table.index, table.to_numpy().tolist())]
    return (f"<p>{_e(c.labels[0])} and {_e(c.labels[1])} on the same {c.n} records ({c.n_positive} positives): "
            "each site returned both models' placement sums and their cross products, and both models' squared "
            "errors.</p>"
            + _table(["difference", "estimate", f"{level} lower", f"{level} upper", "p-value", "method"], rows)
            + _table(["model", "AUC", "Brier", "calibration intercept", "calibration slope", "CITL"], models)
            + '<div class="figs">' + _comparison_figure(c) + "</div>")


def _comparison_figure(c: "ModelComparison") -> str:
    fig, axes = plots._pyplot().subplots(1, 2, figsize=(10.4, 4.6))
    caption = "Left: both models' ROC curves from the sites' histograms. Right: their logistic calibration lines."
    return _rendered(fig, lambda: c.plot(ax=axes), caption, "comparison")


def render_models_report(reports: dict[str, "ValidationReport"], comparison: "ModelComparison | None" = None, *,
                         budget_info: dict[str, dict[str, Any]] | None = None,
                         sites_info: dict[str, dict[str, Any]] | None = None,
                         rules_info: dict[str, dict[str, Any]] | None = None, data_info: dict[str, Any] | None = None,
                         title: str = "Federated validation of several models", notes: Sequence[str] = ()) -> str:
    """Several models validated on the same sites, side by side, in one HTML page: the set-up, a
    table of every model's main statistics, the paired comparison of two of them (if given), then
    each model's discrimination, calibration, noisy releases and disclosure control, then the sites'
    budget figures once (they are the session's, not a model's)."""
    sites_info, rules_info, data_info = sites_info or {}, rules_info or {}, data_info or {}
    first = next(iter(reports.values()))
    overview = [[label, r.n, *((r.discrimination.auc, *r.discrimination.ci) if r.discrimination else (None,) * 3),
                 r.brier.brier, *((r.logistic.intercept, r.logistic.slope) if r.logistic else (None, None)), r.mode]
                for label, r in reports.items()]
    level = first.level
    sections = [
        ("setup", "Study set-up", _setup_section(first, sites_info, rules_info, data_info)),
        ("models", "The models", _table(["model", "n", "AUC", f"{level} lower", f"{level} upper", "Brier",
                                         "calibration intercept", "calibration slope", "disclosure checks"],
                                        overview)),
    ]
    if comparison is not None:
        sections.append(("comparison", f"Model comparison: {comparison.labels[0]} vs {comparison.labels[1]}",
                         _comparison_section(comparison)))
    for i, (label, r) in enumerate(reports.items(), 1):
        sections += [
            (f"model{i}-discrimination", f"{label}: discrimination", _discrimination_section(r, None, None)
             if r.discrimination is not None else _not_computed(r, "discrimination")),
            (f"model{i}-calibration", f"{label}: calibration", _calibration_section(r)),
            (f"model{i}-privacy", f"{label}: privacy spent", _releases(r, rules_info)),
            (f"model{i}-disclosure", f"{label}: disclosure control", _disclosure_section(r, rules_info)),
        ]
    sections.append(("budget", "Privacy budget at the sites (all models)", _budget_table(budget_info)))
    sections.append(("software", "Software and methods", _software_section(first, software_versions())))
    return _page(title, notes, sections)


def write_report(report: "ValidationReport", path: str | Path, *, sites_info: dict[str, dict[str, Any]] | None = None,
                 rules_info: dict[str, dict[str, Any]] | None = None, data_info: dict[str, Any] | None = None,
                 budget_info: dict[str, dict[str, Any]] | None = None,
                 title: str = "Federated validation report",
                 roc_overlay: tuple[Sequence[float], Sequence[float]] | None = None,
                 pr_curve: dict[str, Any] | None = None, curves: Any = None, notes: Sequence[str] = ()) -> Path:
    """Write the validation report to ``path`` as one self-contained HTML file and return the path.

    Parameters
    ----------
    report : ValidationReport
        The result of :func:`dsfed_client.analyses.suite.validate`.
    sites_info, rules_info, data_info : dict, optional
        Per-site ``{"n": ..., "profile": ...}``, per-site rules as the sites' function listings give
        them, and ``{"table", "truth", "score"}``; :func:`collect_study_info` returns all three.
    budget_info : dict, optional
        Per-site ``session.budget()`` answers (the ledger's spent and remaining per table), shown in
        the privacy section; :func:`collect_study_info` returns it too.
    roc_overlay : (fpr, tpr), optional
        Another ROC curve drawn over the ROC-GLM (e.g. the histogram-based one).
    pr_curve : dict, optional
        ``{"precision": [...], "recall": [...], "prevalence": float}`` for a precision-recall plot.
    curves : ROCPRCurves, optional
        Histogram-based curves (:func:`dsfed_client.analyses.curves.ds_roc_pr_curves`): their ROC is
        drawn over the ROC-GLM and their PR curve plotted, unless ``roc_overlay``/``pr_curve`` are given.
    notes : sequence of str
        Extra paragraphs under the title.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(report, sites_info=sites_info, rules_info=rules_info, data_info=data_info,
                                  budget_info=budget_info,
                                  title=title, roc_overlay=roc_overlay, pr_curve=pr_curve, curves=curves,
                                  notes=notes),
                    encoding="utf-8")
    return path


def write_models_report(reports: dict[str, "ValidationReport"], path: str | Path,
                        comparison: "ModelComparison | None" = None, **page: Any) -> Path:
    """Write several models' validation reports (by label) and their paired comparison side by side
    to ``path`` as one self-contained HTML file (:func:`render_models_report`; ``page``: its
    ``sites_info``, ``rules_info``, ``data_info``, ``title``, ``notes``) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_models_report(reports, comparison, **page), encoding="utf-8")
    return path


def report_from_session(session: "FederatedSession", truth: str, score: str, path: str | Path, *,
                        table: str | None = None, curves: bool = False,
                        **validate_options: Any) -> tuple["ValidationReport", Path]:
    """Run :func:`validate` on ``session`` and write its report: what ``dsfed report`` does.
    ``curves=True`` adds the histogram-based ROC and PR curves (one more noisy release per site)."""
    from dsfed_client.analyses.suite import validate  # noqa: PLC0415

    result = validate(session, truth, score, **validate_options)
    extra = None
    if curves:
        from dsfed_client.analyses.curves import ds_roc_pr_curves  # noqa: PLC0415

        extra = ds_roc_pr_curves(session, truth, score)
    study = collect_study_info(session, truth, table=table, score=score)
    return result, write_report(result, path, **study, curves=extra)


def report_from_sites_file(sites_file: str | Path, out: str | Path, *, table: str | None = None,
                           truth: str | None = None, score: str | None = None,
                           curves: bool = False) -> tuple["ValidationReport", Path]:
    """``dsfed report``: log in to the sites a JSON file lists, validate, write the HTML report.

    The file (keep it private: it holds credentials)::

        {"sites": {"site1": {"url": "https://...", "user": "analyst", "password": "..."},
                   "site2": {"url": "https://...", "token": "..."}},
         "table": "GBSG2.validation", "truth": "y", "score": "score"}

    ``table``, ``truth`` and ``score`` given here win over the file's.
    """
    from dsfed_client.session import LoginBuilder  # noqa: PLC0415

    spec = read_sites_file(Path(sites_file))
    table = table or spec.get("table")
    if not table:
        raise ValueError(f"{sites_file}: no table given (--table or \"table\")")
    truth, score = truth or spec.get("truth") or "y", score or spec.get("score") or "score"
    builder = LoginBuilder()
    for name, site in spec["sites"].items():
        builder.append(name, site["url"], user=site.get("user"), password=site.get("password"),
                       token=site.get("token"))
    with builder.login() as session:
        session.assign_table("D", table)
        return report_from_session(session, f"D${truth}", f"D${score}", out, table=table, curves=curves)


SITES_FILE_KEYS = ("sites", "table", "truth", "score")
SITE_KEYS = ("url", "user", "password", "token")


def _unknown_keys(where: str, found: dict[str, Any], allowed: tuple[str, ...]) -> None:
    import difflib  # noqa: PLC0415

    for key in found:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{where}: unknown key {key!r}{guess}; allowed: {', '.join(allowed)}")


def read_sites_file(path: Path) -> dict[str, Any]:
    """The sites file of ``dsfed report``, checked: only known keys (a typo such as ``pasword`` is an
    error, not a silently missing password), a ``url`` and either ``user`` with ``password`` or a
    ``token`` per site."""
    import json  # noqa: PLC0415

    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("sites"), dict) or not spec["sites"]:
        raise ValueError(f"{path}: expected an object with a non-empty \"sites\" object")
    _unknown_keys(str(path), spec, SITES_FILE_KEYS)
    for name, site in spec["sites"].items():
        where = f"{path}: site {name!r}"
        if not isinstance(site, dict) or "url" not in site:
            raise ValueError(f"{where} needs an object with \"url\"")
        _unknown_keys(where, site, SITE_KEYS)
        if "token" not in site and not ("user" in site and "password" in site):
            raise ValueError(f"{where} needs \"user\" and \"password\", or \"token\"")
    return spec
