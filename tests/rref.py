"""Independent references: R code run through rpy2 (never skipped: R is part of the test set-up),
and the privacy accounting written out from its paper."""

from __future__ import annotations

from typing import Any

import numpy as np

from dsfed_server import rbridge
from dsfed_server.disclosure.mechanisms import analytic_gaussian_sigma


def r_eval(source: str, **data: Any) -> Any:
    """Evaluate R ``source`` with numeric/character vectors bound as variables; return a numpy array."""
    ro = rbridge.robjects()
    with rbridge.lock(), ro.default_converter.context():
        env = ro.Environment()
        for name, values in data.items():
            arr = np.asarray(values)
            if arr.dtype.kind in "iuf":
                env[name] = ro.FloatVector(arr.astype(float).tolist())
            else:
                env[name] = ro.StrVector([str(v) for v in arr.tolist()])
        result = ro.r["eval"](ro.r["parse"](text=source), envir=env)
        return np.asarray(list(result))


def rdp_epsilon_reference(noise_multiplier: float, k: int, delta: float) -> float:
    """RDP epsilon of k Gaussian releases, written out independently of the ledger: RDP of order
    alpha is alpha k / (2 z^2), converted with Canonne, Kamath & Steinke (2020, Prop. 12),
    minimised over a dense grid of orders."""
    alphas = 1 + np.logspace(-3, 4, 200_000)
    rdp = alphas * k / (2 * noise_multiplier**2)
    eps = rdp + np.log1p(-1 / alphas) - (np.log(delta) + np.log(alphas)) / (alphas - 1)
    return float(max(0.0, eps.min()))


def gaussian_spent_reference(k: int, *, epsilon: float, delta: float, sensitivity: float,
                             budget_delta: float) -> tuple[float, float]:
    """(epsilon, delta) spent by k releases of the analytic Gaussian calibrated to (epsilon, delta,
    sensitivity): the tighter of basic composition (when k delta fits ``budget_delta``) and RDP
    (:func:`rdp_epsilon_reference`) at ``budget_delta``."""
    sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    options = [(rdp_epsilon_reference(sigma / sensitivity, k, budget_delta), budget_delta)]
    if k * delta <= budget_delta:
        options.append((k * epsilon, k * delta))
    return min(options)


# --- R references for the validation estimators (written here, in R, from the methods'
# definitions; nothing of dsfed's code is used) ---------------------------------------------

def r_hl_on_edges(y: Any, p: Any, edges: Any, upper_closed: Any = None) -> float:
    """Hosmer-Lemeshow C over the groups between ``edges`` (R's ``cut(p, edges, include.lowest = TRUE)``,
    as ``hoslem.test`` cuts at its quantiles), written out in R: the reference for groups the sites merged.
    ``upper_closed`` (per group): False where a record at the group's upper edge is in the group above."""
    group = ("g <- cut(p, e, include.lowest = TRUE); " if upper_closed is None else
             "i <- e[-c(1, length(e))]; h <- u[-length(u)] == 0; "
             "g <- factor(rowSums(outer(p, i, '>') | (outer(p, i, '==') & matrix(h, length(p), length(i), "
             "byrow = TRUE)))); ")
    return float(r_eval(group + "o <- tapply(y, g, sum); x <- tapply(p, g, sum); "
                        "n <- tapply(p, g, length); k <- !is.na(n); sum(((o - x)^2 / (x * (1 - x / n)))[k])",
                        y=np.asarray(y, dtype=float), p=np.asarray(p, dtype=float),
                        e=np.asarray(edges, dtype=float),
                        u=np.asarray(upper_closed if upper_closed is not None else [], dtype=float))[0])


R_HOSLEM = """
hl_ref <- function(y, p, breaks) {
  cutp <- cut(p, breaks = breaks, include.lowest = TRUE)
  n <- as.vector(table(cutp)); obs1 <- as.vector(tapply(y, cutp, sum)); exp1 <- as.vector(tapply(p, cutp, sum))
  keep <- n > 0
  obs1 <- obs1[keep]; exp1 <- exp1[keep]; n <- n[keep]
  chisq <- sum((obs1 - exp1)^2 / exp1 + ((n - obs1) - (n - exp1))^2 / (n - exp1))
  G <- length(n)
  c(chisq, G - 2, 1 - pchisq(chisq, G - 2), n)
}
# hoslem.test's grouping: type-7 quantile breaks, unique, cut(include.lowest = TRUE)
hl_c <- function(y, p, g) hl_ref(y, p, unique(quantile(p, probs = seq(0, 1, 1 / g), type = 7)))
hl_h <- function(y, p, g) hl_ref(y, p, (0:g) / g)
ece_ref <- function(y, p, g) {
  cutp <- cut(p, breaks = unique(quantile(p, probs = seq(0, 1, 1 / g), type = 7)), include.lowest = TRUE)
  n <- as.vector(table(cutp)); keep <- n > 0
  gap <- abs(as.vector(tapply(y, cutp, mean)) - as.vector(tapply(p, cutp, mean)))[keep]
  c(sum(n[keep] / sum(n) * gap), max(gap))
}
"""

R_ROCGLM_FIT = """
# The ROC-GLM of Schalk et al. (2024) from each positive's placement value pv(s) against the pooled negatives: each
# site's intermediate data u = 1(PV <= t_j) over t_j = j / (nT + 1), aggregated with weights, the rows
# of all sites stacked ("the same intermediate data") and fitted by R's probit glm: (a, b).
rocglm_fit <- function(y, p, site, nT, pv) {
  neg <- p[y == 0]
  t <- (1:nT) / (nT + 1)
  rows <- lapply(split(seq_along(y), site), function(idx) {
    pos <- p[idx][y[idx] == 1]
    ones <- vapply(t, function(tj) sum(vapply(pos, pv, numeric(1), neg = neg) <= tj), numeric(1))
    data.frame(u = rep(c(0, 1), nT), x = rep(qnorm(t), each = 2), w = as.vector(rbind(length(pos) - ones, ones)))
  })
  d <- do.call(rbind, rows)
  coef(suppressWarnings(glm(u ~ x, family = binomial(link = "probit"), data = d, weights = w)))
}
"""

R_ROCGLM = R_ROCGLM_FIT + """
# placement values PV = share of the pooled negatives above the score; AUC in closed form and integrated
rocglm_ref <- function(y, p, site, nT) {
  f <- rocglm_fit(y, p, site, nT, function(s, neg) mean(neg > s))
  a <- f[1]; b <- f[2]
  c(a, b, pnorm(a / sqrt(1 + b^2)),
    integrate(function(x) pnorm(a + b * qnorm(x)), 0, 1, rel.tol = 1e-12)$value)
}
"""

R_CALCURVE = """
# the calibration curve of Schalk et al. (2024): bins [p_l, p_l+1), the last one closed
calcurve_ref <- function(y, p, nbins) {
  b <- cut(p, (0:nbins) / nbins, right = FALSE, include.lowest = TRUE)
  c(as.vector(table(b)), as.vector(tapply(y, b, mean)), as.vector(tapply(p, b, mean)))
}
"""

R_BINNED = """
# per-cell count, sum of outcomes and sum of predictions over cut(p, breaks, include.lowest = TRUE),
# right-closed (R's cut default, Hosmer-Lemeshow groups) or left-closed (right = 0: calibration bins)
binned_ref <- function(y, p, breaks, right) {
  b <- cut(p, breaks, right = right == 1, include.lowest = TRUE)
  s <- function(v) { x <- as.vector(tapply(v, b, sum)); x[is.na(x)] <- 0; x }
  c(as.vector(table(b)), s(y), s(p))
}
"""

R_PROC = """
proc_ref <- function(y, p) {
  r <- pROC::roc(y, p, levels = c(0, 1), direction = "<", quiet = TRUE)
  ci <- pROC::ci.auc(r, method = "delong")
  c(as.numeric(pROC::auc(r)), as.numeric(ci)[c(1, 3)], pROC::var(r, method = "delong"))
}
"""

R_HIST_ROCGLM = R_ROCGLM_FIT + """
# DeLong placement values (ties one half): PV = 1 - (#neg < x + #neg == x / 2) / n0 for each positive
hist_rocglm_ref <- function(y, p, site, nT) {
  f <- rocglm_fit(y, p, site, nT, function(s, neg) 1 - (sum(neg < s) + sum(neg == s) / 2) / length(neg))
  c(f, pnorm(f[1] / sqrt(1 + f[2]^2)))
}
"""

R_VALPROB = """
valprob_ref <- function(y, p) {
  v <- suppressWarnings(rms::val.prob(p, y, pl = FALSE))
  i <- p > 0 & p < 1
  citl <- coef(glm(y[i] ~ 1, offset = qlogis(p[i]), family = binomial))
  c(v[c("Brier", "S:z", "Intercept", "Slope")], citl)
}
"""


def r_reference(function: str, source: str, **data: Any) -> np.ndarray:
    """Define ``source`` (R functions) and call ``function`` with the given arguments."""
    args = ", ".join(data)
    return r_eval(f"{source}\n{function}({args})", **data)

R_COORDS = """
# pROC's metrics at given thresholds (a record is positive when p >= t), one row per threshold:
# tp, fp, tn, fn, sensitivity, specificity, ppv, npv, accuracy
coords_ref <- function(y, p, t) {
  r <- pROC::roc(y, p, levels = c(0, 1), direction = "<", quiet = TRUE)
  m <- pROC::coords(r, x = t, input = "threshold", transpose = FALSE,
                    ret = c("tp", "fp", "tn", "fn", "sensitivity", "specificity", "ppv", "npv", "accuracy"))
  as.vector(t(as.matrix(m)))
}
"""

R_BINOM_CI = """
# per proportion k/n its interval: Wilson (prop.test without continuity correction) or exact
# (binom.test, Clopper-Pearson); NA where n is 0
binom_ci_ref <- function(k, n, alpha, exact) {
  one <- function(k, n) {
    if (n == 0) return(c(NA, NA))
    if (exact == 1) return(as.vector(binom.test(k, n, conf.level = 1 - alpha)$conf.int))
    as.vector(suppressWarnings(prop.test(k, n, correct = FALSE, conf.level = 1 - alpha))$conf.int)
  }
  as.vector(mapply(one, k, n))
}
"""
