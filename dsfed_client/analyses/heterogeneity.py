"""Heterogeneity across sites: each site's own AUC, calibration slope and O/E ratio, pooled by
random-effects meta-analysis (:mod:`dsfed_client.analyses.meta`), as a multi-centre validation
paper reports them (metamisc's ``valmeta``; DataSHIELD's ``ds.glmSLMA`` does the like for models).

Every per-site estimate is a per-site release that the site checks by its own rules, through a
view of the session at that site alone (:meth:`FederatedSession.site_view`), with the estimators
the pooled analysis uses: the AUC with its DeLong variance (:func:`ds_hist_auc`, the variance the
histograms' noise adds included, or Schalk et al.'s (2024) :func:`ds_auc`), the calibration slope of
``glm(y ~ logit(p))`` with its standard error (:func:`ds_logistic_calibration`), and O and E from
``brierDS``. Where the rules refuse per-site releases (``secure_aggregation.require``, a function
not enabled) the result carries the sites' refusal as its ``note`` instead of estimates; a site that
refuses one measure is left out of that measure's meta-analysis, named in ``excluded``.

Scales (Debray et al. 2017, Table 2; Snell et al. 2018): the AUC on the logit scale,
:math:`SE(\\mathrm{logit}\\,\\hat c) = \\sqrt{\\widehat{var}(\\hat c)} / (\\hat c(1-\\hat c))` (delta method);
O/E on the log scale, :math:`SE(\\ln O/E) = \\sqrt{(1 - O/N)/O}` (metamisc's ``oecalc`` from O, E, N);
the slope as it is, with the GLM's standard error.

References
----------
Debray TPA, Damen JAAG, Snell KIE et al. (2017), A guide to systematic review and meta-analysis of
prediction model performance, BMJ 356:i6460 (Table 2: scales and standard errors; metamisc ``valmeta``).
Snell KIE, Ensor J, Debray TPA, Moons KGM, Riley RD (2018), Meta-analysis of prediction model
performance across multiple studies: which scale helps ensure between-study normality for the
C-statistic and calibration measures? Stat Methods Med Res 27:3505-3522.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from dsfed_client.analyses.calibration import ds_logistic_calibration
from dsfed_client.analyses.curves import auc_levels, ds_hist_auc
from dsfed_client.analyses.discrimination import ds_auc, logit_se, pooled_noisy_scores
from dsfed_client.analyses.glm import ConvergenceError
from dsfed_client.analyses.meta import SCALES, MetaAnalysis, random_effects
from dsfed_client.calls import Ref
from dsfed_client.errors import FederatedCallError
from dsfed_client.params import ALPHA, LEVELS, PRIVACY, Options, validate_params
from dsfed_client.results import Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession

MIN_SITES = 3  # tau^2 from fewer sites is hardly estimable, and Riley's prediction interval needs k - 2 > 0
MEASURES = {  # measure -> (per-site column, its standard error on the pooling scale, the scale, no effect)
    "AUC": ("auc", "auc_logit_se", "logit", 0.5),
    "calibration slope": ("slope", "slope_se", "identity", 1.0),
    "O/E": ("oe", "log_oe_se", "log", 1.0),
}
COLUMNS = ("site", "n", "events", "expected", "oe", "log_oe_se", "auc", "auc_variance", "auc_ci_lower",
           "auc_ci_upper", "auc_logit_se", "intercept", "slope", "slope_se")  # the per-site table


@result
class Heterogeneity(Results):
    """Per-site AUC, calibration slope and O/E with their random-effects meta-analyses (``auc``,
    ``slope``, ``oe``: :class:`~dsfed_client.analyses.meta.MetaAnalysis`, None where not available),
    ``to_frame``: one row per site. ``note`` says why estimates are missing (the sites' refusal,
    too few sites); ``excluded``: per measure, the sites left out and why.

    References
    ----------
    Debray et al. (2017), BMJ 356:i6460; see :mod:`dsfed_client.analyses.heterogeneity`.
    """

    _title: ClassVar[str] = "Heterogeneity across sites (random-effects meta-analysis)"

    auc: MetaAnalysis | None = stat()
    slope: MetaAnalysis | None = stat()
    oe: MetaAnalysis | None = stat()
    note: str = stat(default="")  # why there are no estimates
    excluded: dict[str, dict[str, str]] = stat(factory=dict)
    method: str = stat("AUC method", default="histogram")
    alpha: float = stat(default=0.05)
    per_site: pd.DataFrame | None = hidden(default=None)

    @derived("Per-site estimates released", brief="")
    def available(self) -> bool:
        return self.per_site is not None

    @property
    def analyses(self) -> dict[str, MetaAnalysis]:
        """The meta-analyses there are, by measure."""
        return {m.measure: m for m in (self.auc, self.slope, self.oe) if m is not None}

    def _table(self) -> pd.DataFrame | None:
        return None if self.per_site is None else self.per_site.copy()

    def _rows(self) -> list[tuple[str, str]]:
        rows = super()._rows()
        for name, m in self.analyses.items():
            rows.append((f"{name}: pooled, {m.level} CI, PI", f"{m.estimate_back:.4g} ({m.ci_back[0]:.4g} - "
                         f"{m.ci_back[1]:.4g}), PI {m.pi_back[0]:.4g} - {m.pi_back[1]:.4g}"))
            rows.append((f"{name}: tau^2, I^2, Q (p)", f"{m.tau2:.4g}, {m.i2:.3g}%, {m.q:.4g} ({m.q_pvalue:.3g})"))
        return rows

    def left_out(self) -> tuple[str, ...]:
        """One line per site left out of a measure's meta-analysis, with the reason."""
        return tuple(f"{measure}: {site} left out ({why})" for measure, sites in self.excluded.items()
                     for site, why in sites.items())

    def _notes(self) -> tuple[str, ...]:
        return ((f"no per-site estimates: {self.note}",) if self.note else ()) + self.left_out()

    def plot(self, ax: Any = None) -> Any:
        """A forest plot per pooled measure side by side; ``ax``: as many Axes, or None. Returns them."""
        from dsfed_client.plots import _pyplot, plot_forest  # noqa: PLC0415

        analyses = list(self.analyses.values())
        if not analyses:
            raise ValueError(f"no per-site estimates to plot: {self.note}")
        if ax is None:
            k = max(m.k for m in analyses)
            _, ax = _pyplot().subplots(1, len(analyses), figsize=(5.0 * len(analyses), 1.6 + 0.42 * k), squeeze=False)
            ax = ax[0]
        for a, m in zip(ax, analyses):
            plot_forest(m, reference=MEASURES[m.measure][3], ax=a)
        return ax


def unavailable(note: str, *, method: str = "histogram", alpha: float = 0.05) -> Heterogeneity:
    """A heterogeneity section without estimates, saying why."""
    return Heterogeneity(None, None, None, note, {}, method, alpha)


def _site_auc(view: FederatedSession, truth: str, score: str, method: str, alpha: float, levels: int,
              privacy: dict[str, float | None]) -> dict[str, float]:
    """One site's AUC, its variance (DeLong plus the noise's) and the logit-scale standard error."""
    if method == "paper":
        reference = pooled_noisy_scores(view, truth, score, **privacy)
        a = ds_auc(view, truth, score, alpha=alpha, reference=reference)
    else:
        a = ds_hist_auc(view, truth, score, alpha=alpha, roc_glm=False, levels=levels,
                        epsilon=privacy["epsilon"], delta=privacy["delta"])
    ci = a.ci_logit
    return {"auc": a.auc, "auc_variance": a.total_variance, "auc_ci_lower": ci.lower, "auc_ci_upper": ci.upper,
            "auc_logit_se": logit_se(a.auc, a.total_variance) if 0 < a.auc < 1 else np.nan}


def _site_slope(view: FederatedSession, truth: str, score: str, n: int, alpha: float) -> dict[str, float]:
    """One site's calibration intercept and slope (``glm(y ~ logit(p))``) and the slope's standard error."""
    cal = ds_logistic_calibration(view, truth, score, n_complete=n, alpha=alpha)
    return {"intercept": cal.intercept, "slope": cal.slope, "slope_se": float(cal.fit.bse.iloc[1])}


def _pool(frame: pd.DataFrame, measure: str, tau2: str, prediction: str, alpha: float
          ) -> tuple[MetaAnalysis | None, dict[str, str]]:
    """The measure's meta-analysis over the sites with a usable estimate, and the sites left out."""
    column, se, scale, _ = MEASURES[measure]
    usable = frame[column].notna() & np.isfinite(frame[se]) & (frame[se] > 0)
    left_out = {s: f"{column} {frame.at[s, column]:.4g} has no finite standard error on the {scale} scale"
                for s in frame.index[~usable & frame[column].notna()]}
    if usable.sum() < MIN_SITES:
        return None, {**left_out, "(pooling)": f"{int(usable.sum())} site(s) with an estimate; pooling needs "
                                               f"{MIN_SITES}"}
    kept = frame[usable]
    return random_effects(SCALES[scale][0](kept[column].to_numpy(float)), kept[se].to_numpy(float),
                          labels=list(kept.index), method=tau2, prediction=prediction, scale=scale,
                          measure=measure, alpha=alpha), left_out


@validate_params({"alpha": ALPHA, "method": [Options({"histogram", "paper"})], "tau2": [Options({"REML", "DL"})],
                  "prediction": [Options({"normal", "t"})], "levels": [*LEVELS, None],
                  "epsilon": PRIVACY, "delta": PRIVACY, "sensitivity": PRIVACY})
def ds_heterogeneity(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05,
                     method: str = "histogram", tau2: str = "REML", prediction: str = "normal",
                     levels: int | None = None, epsilon: float | None = None, delta: float | None = None,
                     sensitivity: float | None = None) -> Heterogeneity:
    """Each site's AUC (with its logit CI), calibration slope and O/E ratio, and their random-effects
    meta-analyses (pooled estimate, CI, tau^2, I^2, H^2, Q and the prediction interval).

    Every number is a per-site release each site checks by its own rules (module docstring). With
    fewer than :data:`MIN_SITES` sites, or where the sites refuse per-site releases, the result holds
    no estimates and its ``note`` says why; nothing is raised for that.

    ``method``: the AUC from the site's own histograms (``"histogram"``, with the variance their
    noise adds; ``levels`` as :func:`ds_hist_auc`, by default the depth the per-site path of
    :func:`validate` uses, so that a site answers the same histogram release again at no cost) or
    Schalk et al.'s (2024) noisy scores (``"paper"``; ``epsilon``, ``delta``, ``sensitivity`` may only ask for
    more privacy). ``tau2``: ``"REML"`` (metafor's default) or ``"DL"``; ``prediction``:
    ``"normal"`` (metafor's ``predict.rma``) or ``"t"`` (Riley et al. 2011, :math:`t_{k-2}`, as
    metamisc reports it).

    References
    ----------
    Debray et al. (2017), BMJ 356:i6460; DerSimonian & Laird (1986); Viechtbauer (2005); Higgins &
    Thompson (2002); Riley, Higgins & Deeks (2011).
    """
    if len(session.sites) < MIN_SITES:
        return unavailable(f"{len(session.sites)} site(s): a random-effects meta-analysis across sites needs at "
                           f"least {MIN_SITES}", method=method, alpha=alpha)
    try:
        sums = session.aggregate("brierDS", Ref(truth), Ref(score))
        if method == "histogram" and levels is None:
            per_site = session.aggregation(False)
            levels = auc_levels(per_site.count(truth), per_site.noisy_parts)
    except FederatedCallError as exc:
        return unavailable(f"per-site estimates not released: {exc}", method=method, alpha=alpha)
    privacy = {"epsilon": epsilon, "delta": delta, "sensitivity": sensitivity}
    rows, failed = [], {}
    for site in session.sites:
        r = sums[site]
        n, o, e = int(r["n"]), float(r["sum_y"]), float(r["sum_p"])
        row: dict[str, Any] = {"site": site, "n": n, "events": o, "expected": e, "oe": o / e,
                               "log_oe_se": float(np.sqrt((1 - o / n) / o)) if 0 < o < n else np.nan}
        view = session.site_view(site)
        for measure, estimate in (("AUC", lambda: _site_auc(view, truth, score, method, alpha, levels, privacy)),
                                  ("calibration slope", lambda: _site_slope(view, truth, score, n, alpha))):
            try:
                row.update(estimate())
            except (FederatedCallError, ConvergenceError) as exc:
                failed.setdefault(measure, {})[site] = str(exc).replace("\n", " ")
        rows.append(row)
    frame = pd.DataFrame(rows, columns=COLUMNS).set_index("site")
    pooled, excluded = {}, {}
    for measure in MEASURES:
        pooled[measure], left_out = _pool(frame, measure, tau2, prediction, alpha)
        left_out.update(failed.get(measure, {}))
        if left_out:
            excluded[measure] = left_out
    return Heterogeneity(pooled["AUC"], pooled["calibration slope"], pooled["O/E"], "", excluded, method, alpha, frame)
