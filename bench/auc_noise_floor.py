"""Benchmark: the noise floor of the histogram AUC -- the standard deviation the sites' DP noise
alone adds to it (:func:`dsfed_client.analyses.curves.noise_variance`), by depth, before any
question of where the leaves lie.

    .venv/bin/python bench/auc_noise_floor.py                 # seconds; the figures in bench/RESULTS.md
    .venv/bin/python bench/auc_noise_floor.py --monte-carlo --levels 3 4 6 --reps 400   # no sites (a minute)
    .venv/bin/python bench/auc_noise_floor.py --read-levels --levels 3 4 6               # no sites (seconds)

Pooled releases (secure aggregation) at five in-process sites of ``default.toml`` (epsilon 1, delta
1e-5) with ``secure_aggregation.honest_sites`` = 1 (shipped) and 5; exact class totals, levels
1..L sharing the budget equally (decay 1); n = 500, one data set per design (binormal risk, AUC 0.75,
prevalence 0.3; that of Schalk et al. 2024). The expected absolute error of a normal error is 0.80 of its sd.
The floor is given for the equal mean of the two placement means and for the inverse-variance
weighted one :func:`~dsfed_client.analyses.curves.ds_hist_auc` reports.

``--monte-carlo``: no sites; the pooled noisy counts drawn as the release draws them (five sites each
adding the full variance, epsilon 1, delta 1e-5, levels 1..L sharing the budget, exact totals), every
leaf edge kept (the sites' gate, which merges leaves holding fewer than q + margin records, is in
``bench/hist_auc.py``), and the placement values computed from the exact leaf counts; per depth, the
AUC's error against the pooled empirical AUC for three estimators: the equal mean against the monotone
CDFs (isotonic: the estimator before), the weighted mean against the consistent cumulative counts
(linear: the one shipped before), the same plus a within-leaf tie correction (``tie_correction``:
tried, not shipped), and each placement mean corrected by its class's own mean placement against the
same reference (``control_variates``: what :func:`~dsfed_client.analyses.curves.ds_hist_auc` ships now),
and the same with its gradients and β from the exact leaf shares instead of the noisy histograms (an
oracle: what estimating them costs), with the share of errors within 1.96 reported noise sds.

``--read-levels``: no sites; the weighted AUC's noise sd (the first-order formula of
:func:`~dsfed_client.analyses.curves.placement_noise_variances`, exact leaf shares) when the AUC is read
from level l of a tree of L levels (its reference's edges those of level l), for every l <= L: what
reading a coarser level of the released tree would save.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from curves import bench_rules, inprocess_sites, login  # noqa: E402  (bench/curves.py)
from dsfed_client.analyses.curves import (  # noqa: E402
    ScoreHistograms, control_variates, ds_score_histograms, noise_variance, placement_weight,
)
from dsfed_core.histograms import global_cdfs, level_variances, tree_least_squares  # noqa: E402
from dsfed_server.disclosure.mechanisms import analytic_gaussian_sigma  # noqa: E402
from dsfed_server.synthetic import PROJECT, binormal, seed000_scores  # noqa: E402


def mann_whitney(y: np.ndarray, p: np.ndarray) -> float:
    pos, neg = np.sort(p[y == 1]), np.sort(p[y == 0])
    below, upto = np.searchsorted(neg, pos, "left"), np.searchsorted(neg, pos, "right")
    return float(np.mean(below + 0.5 * (upto - below)) / neg.size)


def tie_correction(l0: np.ndarray, l1: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """The within-leaf AUC's excess over one half, summed over leaves, if each class's density follows the
    linear trend of its neighbouring leaves inside a leaf: :math:`AUC_j - 1/2 \\approx (w/12)(g_1 - g_0)`,
    g the relative slope, estimated by central differences; summed by parts,
    :math:`(12 N_0 N_1)^{-1} \\sum_j (\\ell_{0,j} \\ell_{1,j+1} - \\ell_{1,j} \\ell_{0,j+1})` (bilinear across the
    classes, whose noise is independent: unbiased under the noise). Returns it, its gradients in the two
    classes' leaves, and the bilinear form's matrix."""
    k = 1.0 / (12.0 * l0.sum() * l1.sum())
    value = k * float(np.sum(l0[:-1] * l1[1:] - l1[:-1] * l0[1:]))
    g0, g1 = np.zeros_like(l0), np.zeros_like(l1)
    g0[:-1] += k * l1[1:]
    g0[1:] -= k * l1[:-1]
    g1[1:] += k * l0[:-1]
    g1[:-1] -= k * l0[1:]
    B = np.zeros((l0.size, l0.size))
    B[np.arange(l0.size - 1), np.arange(1, l0.size)] = k
    B[np.arange(1, l0.size), np.arange(l0.size - 1)] = -k
    return value, g0, g1, B


def leaf_control_variates(means: tuple[float, float, float, float], shares: tuple[np.ndarray, np.ndarray],
                     totals: tuple[float, float], T: np.ndarray, per: np.ndarray) -> tuple[float, float]:
    r"""The two placement means each corrected by a control variate, then weighted: the AUC and its noise variance,
    with the gradients and β from the given leaf shares (the estimator before: the monotone leaf CDFs' shares).

    Besides :math:`\bar V_{10}` (positives against the negatives' reference) the sites return
    :math:`\bar V_{00}`, the negatives' own mean placement against the same reference: it is exactly one half
    without noise (ties one half, any partition into cells), and its noise comes from the same leaf estimates,
    so :math:`\bar V_{10} - \beta (\bar V_{00} - \tfrac12)`, :math:`\beta = \mathrm{cov}/\mathrm{var}`
    (Glynn & Szechtman 2002, the control variate with known mean), keeps the AUC and loses the noise the two
    share: a shift of the reference moves both alike. Likewise :math:`\bar V_{01}` with :math:`\bar V_{11}`.
    ``means``: :math:`\bar V_{10}, \bar V_{00}, \bar V_{01}, \bar V_{11}`; ``shares``: the negatives' and the
    positives' placement weights by leaf (from the released counts); ``totals``: :math:`N_0, N_1`; ``T``, ``per``:
    the tree's least-squares map and the noise variance of each count."""
    m10, m00, m01, m11 = means
    (a0, a1), (n0, n1) = shares, totals
    g10, g00, g01, g11 = a1 @ T / n0, a0 @ T / n0, -(a0 @ T) / n1, a1 @ T / n1
    beta10 = float(np.sum(g10 * g00 * per) / np.sum(g00**2 * per))
    beta01 = float(np.sum(g01 * g11 * per) / np.sum(g11**2 * per))
    r10 = float(np.sum((g10 - beta10 * g00) ** 2 * per))
    r01 = float(np.sum((g01 - beta01 * g11) ** 2 * per))
    w = r01 / (r10 + r01)
    auc = w * (m10 - beta10 * (m00 - 0.5)) + (1 - w) * (m01 - beta01 * (m11 - 0.5))
    return auc, r10 * r01 / (r10 + r01)


def read_levels(args: argparse.Namespace) -> None:
    sigma2 = 5 * analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0) ** 2
    rng = np.random.default_rng(1)
    for design in ("binormal", "seed000"):
        frame = binormal(args.n, rng, 0.75, 0.3) if design == "binormal" else seed000_scores(args.n, rng)
        y, p = frame["y"].to_numpy(), frame["score"].to_numpy()
        out = []
        for L in args.levels:
            variances = level_variances(np.full(L, sigma2 * L), 1)
            sizes = [2**lv for lv in range(L + 1)]
            unit, off = np.eye(sum(sizes)), np.cumsum([0] + sizes)
            T = tree_least_squares([unit[off[lv]:off[lv + 1]] for lv in range(L + 1)], variances, 2)
            per = np.repeat(variances, sizes)
            leaf = np.clip(np.floor(p * 2**L), 0, 2**L - 1).astype(int)
            n0, n1 = (np.bincount(leaf[y == c], minlength=2**L).astype(float) for c in (0, 1))
            for read in range(1, L + 1):
                group = 2 ** (L - read)

                def weights(other: np.ndarray) -> np.ndarray:  # placement weights, constant in a level-`read` node
                    share = other.reshape(-1, group).sum(axis=1) / other.sum()
                    return np.repeat(1.0 - np.cumsum(share) + 0.5 * share, group)

                v10 = float(np.sum((weights(n1) / n0.sum() @ T) ** 2 * per))
                v01 = float(np.sum((weights(n0) / n1.sum() @ T) ** 2 * per))
                out.append(f"{2**L}->{2**read}: {np.sqrt(v10 * v01 / (v10 + v01)):.4f}")
        print(f"{design} (tree leaves -> leaves read: weighted noise sd) " + "; ".join(out))


def monte_carlo(args: argparse.Namespace) -> None:
    sigma2 = 5 * analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0) ** 2  # pooled, per unit share
    print(f"Monte Carlo, no sites: n = {args.n}, {args.reps} data sets per design; error = estimate - pooled AUC; "
          "noise cover: |error| <= 1.96 reported noise sd")
    print(f"{'design':<9} {'leaves':>6} {'estimator':<28} {'bias (SE)':>17} {'sd':>7} {'MAE':>7} {'cover':>6} "
          f"{'rep/emp':>7}")
    for design in ("binormal", "seed000"):
        rng = np.random.default_rng(38)
        errors: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for _ in range(args.reps):
            frame = binormal(args.n, rng, 0.75, 0.3) if design == "binormal" else seed000_scores(args.n, rng)
            y, p = frame["y"].to_numpy(), frame["score"].to_numpy()
            pooled_auc = mann_whitney(y, p)
            for L in args.levels:
                leaf = np.clip(np.floor(p * 2**L), 0, 2**L - 1).astype(int)
                exact = {}
                for cls, name in ((0, "negatives"), (1, "positives")):
                    levels = [np.bincount(leaf[y == cls], minlength=2**L).astype(float)]
                    for _ in range(L):
                        levels.append(levels[-1].reshape(-1, 2).sum(axis=1))
                    exact[name] = levels[::-1]
                pooled = np.full(L, sigma2 * L)
                variances = level_variances(pooled, 1)
                noisy = {c: [v[0]] + [x + rng.normal(0.0, np.sqrt(pooled[0]), x.size) for x in v[1:]]
                         for c, v in exact.items()}
                edges = np.linspace(0.0, 1.0, 2**L + 1)
                cdf = global_cdfs(noisy, variances, 2, monotone=True)
                ref = global_cdfs(noisy, variances, 2)
                hist = ScoreHistograms(edges, cdf["negatives"], cdf["positives"], float(cdf["negatives"][-1]),
                                       float(cdf["positives"][-1]), False, variances, {})
                n0, n1 = exact["negatives"][-1], exact["positives"][-1]

                def means(c: dict[str, np.ndarray]) -> tuple[float, float]:
                    mid0 = (c["negatives"][:-1] + c["negatives"][1:]) / 2 / c["negatives"][-1]
                    mid1 = (c["positives"][:-1] + c["positives"][1:]) / 2 / c["positives"][-1]
                    return float(n1 @ mid0 / n1.sum()), float(1.0 - n0 @ mid1 / n0.sum())

                w = placement_weight(hist)
                i10, i01 = means(cdf)
                m10, m01 = means(ref)
                weighted = w * m10 + (1 - w) * m01
                errors.setdefault((L, "isotonic, equal (before)"), []).append(
                    ((i10 + i01) / 2 - pooled_auc, noise_variance(hist)))
                errors.setdefault((L, "linear, weighted (before)"), []).append(
                    (weighted - pooled_auc, noise_variance(hist, w)))
                # the tie correction's noise: its gradients with the weighted means', through the tree, and
                # the bilinear term's own variance tr(B S1 B' S0)
                sizes = [2**lv for lv in range(L + 1)]
                unit, off = np.eye(sum(sizes)), np.cumsum([0] + sizes)
                T = tree_least_squares([unit[off[lv]:off[lv + 1]] for lv in range(L + 1)], variances, 2)
                per = np.repeat(variances, sizes)
                leaves = {c: np.diff(ref[c]) for c in ref}
                value, g0, g1, B = tie_correction(leaves["negatives"], leaves["positives"])

                def placement(other: np.ndarray) -> np.ndarray:
                    share = np.clip(np.diff(other), 0.0, None)
                    share = share / share.sum()
                    return 1.0 - np.cumsum(share) + 0.5 * share

                c0 = (w * placement(cdf["positives"]) / n0.sum() + g0) @ T
                c1 = (-(1 - w) * placement(cdf["negatives"]) / n1.sum() + g1) @ T
                S = (T * per) @ T.T
                var = float(np.sum(c0**2 * per) + np.sum(c1**2 * per) + np.trace(B @ S @ B.T @ S))
                errors.setdefault((L, "linear, weighted, tie-corr."), []).append(
                    (weighted + value - pooled_auc, var))
                own0 = (ref["negatives"][:-1] + ref["negatives"][1:]) / 2 / ref["negatives"][-1]
                own1 = (ref["positives"][:-1] + ref["positives"][1:]) / 2 / ref["positives"][-1]
                cv = leaf_control_variates((m10, float(n0 @ own0 / n0.sum()), m01, float(n1 @ own1 / n1.sum())),
                                           (placement(cdf["negatives"]), placement(cdf["positives"])),
                                           (n0.sum(), n1.sum()), T, per)
                errors.setdefault((L, "control variates, leaves"), []).append((cv[0] - pooled_auc, cv[1]))
                # shipped: beta, weight and variance from the coarse consistent shares, less the Stein bias
                ship = control_variates(replace(hist, consistent_negatives=ref["negatives"],
                                                consistent_positives=ref["positives"]))
                m00, m11 = float(n0 @ own0 / n0.sum()), float(n1 @ own1 / n1.sum())
                est = (ship.weight * (m10 - ship.beta10 * (m00 - 0.5))
                       + (1 - ship.weight) * (m01 - ship.beta01 * (m11 - 0.5)) - ship.bias)
                errors.setdefault((L, "control variates, shipped"), []).append(
                    (est - pooled_auc, ship.weight**2 * ship.variance10 + (1 - ship.weight) ** 2 * ship.variance01))
                # the same with the gradients and beta from the exact leaf shares (an oracle): what estimating
                # them from the same noisy counts costs in bias
                exact_cum = {c: np.concatenate([[0.0], np.cumsum(exact[c][-1])]) for c in exact}
                oracle = leaf_control_variates((m10, float(n0 @ own0 / n0.sum()), m01, float(n1 @ own1 / n1.sum())),
                                               (placement(exact_cum["negatives"]), placement(exact_cum["positives"])),
                                               (n0.sum(), n1.sum()), T, per)
                errors.setdefault((L, "control variates, oracle"), []).append((oracle[0] - pooled_auc, oracle[1]))
        for (L, name), rows in errors.items():
            e, v = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
            print(f"{design:<9} {2**L:>6} {name:<28} {e.mean():+.4f} ({e.std(ddof=1) / np.sqrt(e.size):.4f}) "
                  f"{e.std():7.4f} {np.abs(e).mean():7.4f} {np.mean(np.abs(e) <= 1.96 * np.sqrt(v)):6.3f} "
                  f"{v.mean() / e.var():7.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--levels", type=int, nargs="+", default=[3, 4, 5, 6, 8])
    parser.add_argument("--monte-carlo", action="store_true", help="the estimators' errors without sites")
    parser.add_argument("--reps", type=int, default=400, help="data sets per design (--monte-carlo)")
    parser.add_argument("--read-levels", action="store_true", help="noise sd reading each level of the tree")
    args = parser.parse_args()
    if args.monte_carlo:
        monte_carlo(args)
        return 0
    if args.read_levels:
        read_levels(args)
        return 0
    rng = np.random.default_rng(5)
    data = {"binormal": binormal(args.n, rng, 0.75, 0.3)[["y", "score"]], "seed000": seed000_scores(args.n, rng)}
    print("noise sd: equal mean / weighted mean")
    print("design    honest_sites " + " ".join(f"{2**L:>7} leaves" for L in args.levels))
    for honest in (1, 5):
        with tempfile.TemporaryDirectory(prefix="dsfed-floor-") as tmp:
            prov, services = inprocess_sites(Path(tmp), 5, data, bench_rules(Path(tmp) / "r.toml", honest))
            with login(prov, services).login() as session:
                for name in data:
                    session.assign_table("D", f"{PROJECT}.{name}")
                    hists = [ds_score_histograms(session, "D$y", "D$score", levels=L, totals="exact", secure=True)
                             for L in args.levels]
                    sds = [(np.sqrt(noise_variance(h)), np.sqrt(noise_variance(h, placement_weight(h))))
                           for h in hists]
                    print(f"{name:<9} {honest:>12} " + " ".join(f"{a:>7.4f}/{b:.4f}" for a, b in sds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
