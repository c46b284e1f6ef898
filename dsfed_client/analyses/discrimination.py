"""Discrimination across sites: empirical AUC with DeLong CI, and the distributed ROC-GLM
(seed 000: Schalk, Rehms et al. 2024).

Both start from the paper's noisy scores: each site releases its negatives'
and positives' scores with Gaussian noise from the analytic Gaussian
mechanism, with epsilon, delta and sensitivity from its own rules file
(registry entry ``noisyScoresDS``). The analyst pools them into the global
survivor functions :math:`\\tilde S_0`, :math:`\\tilde S_1` and sends them back; the
sites compute placement values of their own records and return only sums.
With noise off (a test profile), every number equals the pooled computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import integrate, special, stats

from dsfed_client.analyses.glm import GLMResults, ds_glm
from dsfed_client.calls import Call, Ref, decode_f64
from dsfed_client.session import FederatedSession

REFERENCE = "dsfed.ref"
ROC_DATA = "dsfed.rocdata"


@dataclass(frozen=True)
class NoisyReference:
    """The pooled (noisy) scores of all negatives and positives, stored at every site."""

    negatives: np.ndarray
    positives: np.ndarray
    sigma: dict[str, float]
    mechanism: dict[str, dict[str, Any]]

    @property
    def noise_off(self) -> bool:
        return all(s == 0 for s in self.sigma.values())


def pooled_noisy_scores(session: FederatedSession, truth: str, score: str, *, epsilon: float | None = None,
                        delta: float | None = None, sensitivity: float | None = None) -> NoisyReference:
    """Collect every site's noisy scores, pool them, and store the pooled sets at every site."""
    results = session.aggregate("noisyScoresDS", Ref(truth), Ref(score), epsilon=epsilon, delta=delta,
                                sensitivity=sensitivity)
    negatives = np.sort(np.concatenate([decode_f64(r["negatives"]) for r in results.values()]))
    positives = np.sort(np.concatenate([decode_f64(r["positives"]) for r in results.values()]))
    session.assign(REFERENCE, Call("referenceScoresDS", negatives, positives))
    return NoisyReference(
        negatives, positives,
        sigma={s: float(r["sigma"]) for s, r in results.items()},
        mechanism={s: {k: r[k] for k in ("mechanism", "epsilon", "delta", "sensitivity")} for s, r in results.items()},
    )


def _auc_between(positives: np.ndarray, negatives: np.ndarray) -> float:
    """Mann-Whitney AUC of two samples, ties one half."""
    negatives = np.sort(negatives)
    less = np.searchsorted(negatives, positives, side="left")
    ties = np.searchsorted(negatives, positives, side="right") - less
    return float(np.sum(less + 0.5 * ties) / (positives.size * negatives.size))


def logit_ci(auc: float, variance: float, alpha: float) -> tuple[float, float]:
    """Seed 000 eq. (3): :math:`\\mathrm{logit}(AUC) \\pm \\Phi^{-1}(1-\\alpha/2)\\sqrt{var}/(AUC(1-AUC))`,
    back-transformed, so the interval stays inside (0, 1)."""
    half = stats.norm.ppf(1 - alpha / 2) * np.sqrt(variance) / (auc * (1 - auc))
    return float(special.expit(special.logit(auc) - half)), float(special.expit(special.logit(auc) + half))


@dataclass(frozen=True)
class EmpiricalAUC:
    """Empirical AUC with its DeLong variance (seed 000 eqs. 1-2; DeLong et al. 1988)."""

    auc: float
    variance: float
    alpha: float
    n_positive: int
    n_negative: int
    noise_off: bool
    approximation_error: float  # 0 when exact; else an estimate of the noise-induced error

    @property
    def ci_delong(self) -> tuple[float, float]:
        """Wald interval on the AUC scale, clipped to [0, 1] (pROC's ``ci.auc(method = "delong")``)."""
        half = stats.norm.ppf(1 - self.alpha / 2) * np.sqrt(self.variance)
        return max(0.0, float(self.auc - half)), min(1.0, float(self.auc + half))

    @property
    def ci_logit(self) -> tuple[float, float]:
        return logit_ci(self.auc, self.variance, self.alpha)

    def to_dict(self) -> dict[str, Any]:
        return {
            "auc": self.auc, "variance": self.variance, "ci_delong": list(self.ci_delong),
            "ci_logit": list(self.ci_logit), "alpha": self.alpha, "n_positive": self.n_positive,
            "n_negative": self.n_negative, "noise_off": self.noise_off,
            "approximation_error": self.approximation_error,
        }


def ds_auc(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05,
           reference: NoisyReference | None = None) -> EmpiricalAUC:
    """Empirical AUC and DeLong variance from the sites' placement-value sums.

    :math:`\\widehat{AUC} = \\bar V_{10}`; :math:`\\widehat{var} = s^2(V_{10})/n_1 + s^2(V_{01})/n_0`
    with sample variances pooled from sums and sums of squares. With noise on,
    :math:`V_{10}` compares each true positive score with the noisy pooled
    negatives; the reported ``approximation_error`` estimates the noise-induced
    error by one SIMEX step: the AUC between the noisy positives and the noisy
    negatives carries twice the noise variance, so its distance from the
    once-noised AUC estimates the bias of the latter.
    """
    ref = reference or pooled_noisy_scores(session, truth, score)
    sums = session.aggregate("placementSumsDS", Ref(truth), Ref(score), Ref(REFERENCE))
    n1 = sum(int(r["n1"]) for r in sums.values())
    n0 = sum(int(r["n0"]) for r in sums.values())
    auc = sum(r["sum_v10"] for r in sums.values()) / n1
    mean01 = sum(r["sum_v01"] for r in sums.values()) / n0
    var10 = (sum(r["sumsq_v10"] for r in sums.values()) - n1 * auc**2) / (n1 - 1)
    var01 = (sum(r["sumsq_v01"] for r in sums.values()) - n0 * mean01**2) / (n0 - 1)
    error = 0.0 if ref.noise_off else abs(_auc_between(ref.positives, ref.negatives) - auc)
    return EmpiricalAUC(float(auc), float(var10 / n1 + var01 / n0), alpha, n1, n0, ref.noise_off, error)


@dataclass(frozen=True)
class ROCGLM:
    """The distributed ROC-GLM :math:`ROC(t) = \\Phi(a + b\\,\\Phi^{-1}(t))` and its AUC (seed 000)."""

    a: float
    b: float
    auc: float  # Phi(a / sqrt(1 + b^2))
    auc_integral: float  # integral of the fitted curve over (0, 1)
    variance: float  # DeLong-type variance from placement values of both classes
    alpha: float
    n_thresholds: int
    glm: GLMResults
    empirical: EmpiricalAUC
    reference: NoisyReference

    @property
    def ci(self) -> tuple[float, float]:
        """Seed 000 eq. (3) around the ROC-GLM AUC."""
        return logit_ci(self.auc, self.variance, self.alpha)

    def curve(self, t: np.ndarray) -> np.ndarray:
        return stats.norm.cdf(self.a + self.b * stats.norm.ppf(t))

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b, "auc": self.auc, "auc_integral": self.auc_integral,
            "ci": list(self.ci), "variance": self.variance, "alpha": self.alpha,
            "n_thresholds": self.n_thresholds, "iterations": self.glm.iterations,
            "noise_off": self.reference.noise_off, "sigma": self.reference.sigma,
            "empirical": self.empirical.to_dict(),
        }


def ds_roc_glm(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05,
               n_thresholds: int = 99, epsilon: float | None = None, delta: float | None = None,
               sensitivity: float | None = None) -> ROCGLM:
    """Fit the ROC-GLM across sites (seed 000, "Distributed ROC-GLM").

    1. pooled noisy scores give :math:`\\tilde S_0`, sent to every site;
    2. each site builds its intermediate data ``(u, \\Phi^{-1}(t_j))`` with weights over the
       threshold grid :math:`t_j = j/(n_T+1)`;
    3. the distributed probit regression ``u ~ x`` (Fisher scoring, R's rule) gives (a, b);
    4. :math:`AUC = \\Phi(a/\\sqrt{1+b^2})`, also by numerical integration;
    5. the CI of eq. (3) with the variance of the placement values of both classes.

    ``epsilon``, ``delta`` and ``sensitivity`` may only ask for more privacy than
    the sites' rules give; a site refuses a request for less.
    """
    ref = pooled_noisy_scores(session, truth, score, epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    session.assign(ROC_DATA, Call("rocGlmDataDS", Ref(truth), Ref(score), Ref(REFERENCE), n_thresholds))
    fit = ds_glm(session, "u ~ x", ROC_DATA, family="binomial", link="probit", weights="w")
    a, b = (float(v) for v in fit.params)
    auc = float(stats.norm.cdf(a / np.sqrt(1 + b * b)))
    auc_integral = float(integrate.quad(lambda t: stats.norm.cdf(a + b * stats.norm.ppf(t)), 0, 1,
                                        epsabs=1e-12, epsrel=1e-12)[0])
    empirical = ds_auc(session, truth, score, alpha=alpha, reference=ref)
    return ROCGLM(a, b, auc, auc_integral, empirical.variance, alpha, n_thresholds, fit, empirical, ref)
