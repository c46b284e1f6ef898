"""Benchmark: AUC from histogram placement values (noisy hierarchical histograms, DeLong sums)
against the paper-faithful mode of Schalk et al. (2024) (noisy scores, ROC-GLM), on their simulation design.

    .venv/bin/python bench/hist_auc.py --reps 250       # 250 simulated data sets (about 1-3 minutes)
    .venv/bin/python bench/hist_auc.py --reps 50        # quicker
    .venv/bin/python bench/hist_auc.py --design binormal --n 500 --secure --honest-sites 1 --no-paper \
        --min-levels 3 6 --reps 200                     # smooth risk, validate()'s default (pooled)

Design (Schalk et al. 2024, "Data generation"): n drawn from {100, 200, ..., 2500}; scores U[0, 1];
y = 1(score >= 0.5) with a fraction gamma ~ U[0.5, 1] of the labels redrawn from Ber(0.5);
split at random over 5 in-process sites. ``--design binormal``: a smooth risk instead (binormal
scores, AUC 0.75, prevalence 0.3, :func:`dsfed_server.synthetic.binormal`) at ``--n`` records;
Schalk et al.'s (2024) risk is flat except for a step at 0.5, always a leaf edge, so a histogram's bins hide
nothing there. ``--cuts-first`` releases the calibration curve's bins and the Hosmer-Lemeshow H
and C groups on the score before the AUC, as ``validate()`` did. Privacy: epsilon = 1, delta = 1e-5 at every site
(a copy of ``disclosure_rules/default.toml`` with the score l2-sensitivity Delta2 = 0.1 for
the paper's mode and a budget large enough for the loop). Error = |estimate - empirical AUC
of the pooled data| (the paper's Delta AUC), and the same for the DeLong CI ends; bias = the mean
signed error with its standard error over the data sets; coverage = how often the reported interval
(sampling and noise variance) holds the pooled AUC; noise cover = how often the error is within 1.96 reported
noise sds, and the mean reported noise variance over the errors' variance (the target is the pooled AUC, so the
error is the noise's, and the tie bias's); the reported non-sampling variance is the noise's plus the released
cells' ties' (``noise_error_variance``: :func:`~dsfed_client.analyses.curves.tie_variance`), the noise's alone
printed beside it. The rows without a suffix are the shipped
estimator: each placement mean corrected by its class's own mean placement against the same reference
(control variates, :func:`~dsfed_client.analyses.curves.control_variates`), then weighted. Rows
``_weighted``: the inverse-variance weighted means without the correction, from the same call (the
estimator before, and what a site without the own-class sums gets), with their noise variance; rows
``_equal``: the equal mean of the two placement means (the estimator before the weights); ``--references
linear isotonic``: rows ``_iso`` from the sites' reference made monotone as before, on the same table and
noise (paired); rows ``_leaves``: the control variates as shipped before, their β, weight and noise variance from
the leaves' own shares of the monotone CDFs and no correction of the bias that leaves (from the same call).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from curves import bench_rules, inprocess_sites, login  # noqa: E402  (bench/curves.py)
from demo_auc import exact_roc_glm  # noqa: E402  (bench/demo_auc.py)
from dsfed_client import FederatedCallError  # noqa: E402
from dsfed_client.analyses.curves import (  # noqa: E402
    auc_levels, control_variates, ds_hist_auc, noise_variance, placement_weight,
)
from dsfed_client.analyses.discrimination import ds_roc_glm, logit_ci  # noqa: E402
from dsfed_client.analyses.calibration import ds_calibration_curve, ds_hosmer_lemeshow  # noqa: E402
from dsfed_server.synthetic import PROJECT, binormal, seed000_scores  # noqa: E402
import dsfed_server.functions.curves as site_curves  # noqa: E402
from dsfed_core.histograms import global_cdfs  # noqa: E402


def isotonic_reference(levels, variances, branching):  # noqa: ANN001, ANN201
    """The sites' reference as it was derived before: made monotone (isotonic regression)."""
    return global_cdfs(levels, variances, branching, monotone=True)


def pooled_delong(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Empirical AUC (ties one half) and DeLong variance of the pooled data (numpy; pROC's)."""
    pos, neg = np.sort(p[y == 1]), np.sort(p[y == 0])
    v10 = (np.searchsorted(neg, pos, "left") + 0.5 * (np.searchsorted(neg, pos, "right")
                                                      - np.searchsorted(neg, pos, "left"))) / neg.size
    v01 = (pos.size - np.searchsorted(pos, neg, "right") + 0.5 * (np.searchsorted(pos, neg, "right")
                                                                   - np.searchsorted(pos, neg, "left"))) / pos.size
    return float(v10.mean()), float(v10.var(ddof=1) / pos.size + v01.var(ddof=1) / neg.size)


def release_cuts_first(session, secure: bool) -> None:
    """The cuts ``validate()`` released on the score before the AUC: the calibration curve's bins,
    the Hosmer-Lemeshow H and C groups."""
    ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=secure)
    for kind in ("H", "C"):
        ds_hosmer_lemeshow(session, "D$y", "D$score", kind=kind, secure=secure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=250)
    parser.add_argument("--sites", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--sensitivity", type=float, default=0.1, help="Delta2 of the paper's mode")
    parser.add_argument("--per-leaf", type=float, nargs="*", default=[16.0],
                        help="histogram depth rule(s): records per class, site and leaf")
    parser.add_argument("--no-paper", action="store_true", help="skip the paper-faithful mode")
    parser.add_argument("--min-levels", type=int, nargs="*", default=[6],
                        help="fewest levels of the depth rule (several: one histogram mode each)")
    parser.add_argument("--design", choices=("seed000", "binormal"), default="seed000")
    parser.add_argument("--references", nargs="+", choices=("linear", "isotonic"), default=["linear"],
                        help="the sites' derived reference (pooled): the consistent cumulative counts (linear, "
                             "shipped) or made monotone as before (isotonic; patched into the in-process sites; "
                             "with both, on the same table and noise)")
    parser.add_argument("--n", type=int, default=None, help="records per data set (default: seed 000's draw)")
    parser.add_argument("--cuts-first", action="store_true",
                        help="release calibration bins and H-L groups on the score before the AUC")
    parser.add_argument("--honest-sites", type=int, default=None,
                        help="secure_aggregation.honest_sites of the rules (default: K with --secure, else 1)")
    parser.add_argument("--decay", type=float, default=1.0,
                        help="scoreHistogramDS's decay: level l's share of the budget is proportional to decay^l")
    parser.add_argument("--secure", action="store_true",
                        help="histogram mode by secure aggregation, each site adding 1/K of the noise variance "
                             "(rules: secure_aggregation.honest_sites = K)")
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores; {args.reps} data sets, K = {args.sites}, "
          f"epsilon = {args.epsilon}, delta = {args.delta}, Delta2 = {args.sensitivity} (paper mode), "
          f"decay = {args.decay}")
    rng = np.random.default_rng(2024)
    sizes = rng.choice(np.arange(100, 2501, 100), size=args.reps) if args.n is None else [args.n] * args.reps
    scores = [seed000_scores(int(n), rng) if args.design == "seed000" else
              binormal(int(n), rng, 0.75, 0.3)[["y", "score"]] for n in sizes]
    # each mode on its own copy of a data set: a site keeps the cuts released on a table for every
    # analyst, so a second mode on the same table would have its references coarsened against the
    # first one's cuts (rule disclosure.cut_history)
    references = sorted(args.references, reverse=True)  # linear first: the isotonic one reads its table after it
    hist_modes = {f"hist{per_leaf:g}L{m}" + ("_iso" if ref == "isotonic" else ""): (per_leaf, m, ref)
                  for per_leaf in args.per_leaf for m in args.min_levels for ref in references}
    # the isotonic reference reads the linear one's table right after it: the same query on the same data
    # gets the same seeded noise and the same leaf edges (cuts released again), a paired comparison
    modes = ([] if args.no_paper else ["paper"]) + sorted({mode.removesuffix("_iso") for mode in hist_modes})
    data = {f"rep{r}_{mode}": frame for r, frame in enumerate(scores) for mode in modes}
    rows, refused = [], []
    paired: dict[str, np.ndarray] = {}
    # "_equal": the equal mean of the two placement means (the estimator before the inverse-variance weights),
    # from the same call
    # "_rocglm_own": the ROC-GLM against its own pooled, noise-free value (the same class's exact placement values)
    kinds = ("", "_weighted", "_equal", "_rocglm", "_rocglm_own", "_leaves")
    signed: dict[str, list[float]] = {f"{mode}{k}": [] for mode in hist_modes for k in kinds}
    covered: dict[str, list[bool]] = {f"{mode}{k}": [] for mode in hist_modes for k in kinds}
    noise: dict[str, list[float]] = {f"{mode}{k}": [] for mode in hist_modes for k in kinds}
    dp_noise: dict[str, list[float]] = {mode: [] for mode in hist_modes}
    no_df: dict[str, list[float]] = {mode: [] for mode in hist_modes}
    dfs: dict[str, list[float]] = {mode: [] for mode in hist_modes}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsfed-histauc-") as tmp:
        honest = args.honest_sites if args.honest_sites is not None else (args.sites if args.secure else 1)
        rules = bench_rules(Path(tmp) / "rules.toml", honest,
                            score_l2_sensitivity=args.sensitivity)
        prov, services = inprocess_sites(Path(tmp), args.sites, data, rules, seed=7)
        with login(prov, services).login() as session:
            for rep, pooled in enumerate(scores):
                n = len(pooled)
                y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
                auc, var = pooled_delong(y, p)
                half = 1.959963984540054 * np.sqrt(var)
                row = {"rep": rep, "n": n, "auc": auc}
                try:
                    if not args.no_paper:
                        session.assign_table("D", f"{PROJECT}.rep{rep}_paper")
                        paper = ds_roc_glm(session, "D$y", "D$score", epsilon=args.epsilon, delta=args.delta,
                                           sensitivity=args.sensitivity)
                        row["paper_rocglm"] = abs(paper.auc - auc)
                        row["paper_empirical"] = abs(paper.empirical.auc - auc)
                        lo, hi = paper.empirical.ci_delong
                        row["paper_ci"] = abs(lo - (auc - half)) + abs(hi - (auc + half))
                    for mode, (per_leaf, min_levels, reference) in hist_modes.items():
                        site_curves.global_cdfs = isotonic_reference if reference == "isotonic" else global_cdfs
                        session.assign_table("D", f"{PROJECT}.rep{rep}_{mode.removesuffix('_iso')}")
                        if args.cuts_first and not (reference == "isotonic" and "linear" in args.references):
                            release_cuts_first(session, args.secure)
                        levels = auc_levels(n, 1 if args.secure else args.sites, per_leaf, min_levels)
                        res = ds_hist_auc(session, "D$y", "D$score", levels=levels, epsilon=args.epsilon,
                                          delta=args.delta, secure=args.secure, decay=args.decay)
                        if reference == "isotonic" and "linear" in args.references:  # paired: same noise
                            twin = paired.pop(mode.removesuffix("_iso"))
                            assert np.array_equal(twin, res.histograms.cum_negatives), "not the same noise"
                        else:
                            paired[mode] = res.histograms.cum_negatives
                        row[mode] = abs(res.auc - auc)
                        row[f"{mode}_rocglm"] = abs(res.roc_glm.auc - auc)
                        lo, hi = res.ci_delong
                        row[f"{mode}_ci"] = abs(lo - (auc - half)) + abs(hi - (auc + half))
                        signed[mode].append(res.auc - auc)
                        signed[f"{mode}_rocglm"].append(res.roc_glm.auc - auc)
                        lo, hi = res.ci_logit
                        covered[mode].append(lo <= auc <= hi)
                        noise[mode].append(res.noise_error_variance)  # the noise's and the cells' ties
                        dp_noise[mode].append(res.noise_variance)  # the noise's alone, as before
                        no_df[mode].append(res.noise_variance + res.tie_variance)  # and the ties', without the t
                        dfs[mode].append(res.noise_df)
                        noise[f"{mode}_rocglm"].append(res.roc_glm.noise_variance)
                        signed[f"{mode}_rocglm_own"].append(res.roc_glm.auc - exact_roc_glm(y, p)[res.roc_glm.placed])
                        noise[f"{mode}_rocglm_own"].append(res.roc_glm.noise_variance)
                        assert res.estimator == "control variates", res.estimator
                        w = placement_weight(res.histograms)  # the weighted means without the correction
                        weighted = w * res.auc_positives + (1 - w) * res.auc_negatives
                        row[f"{mode}_weighted"] = abs(weighted - auc)
                        signed[f"{mode}_weighted"].append(weighted - auc)
                        lo, hi = logit_ci(weighted, res.variance, res.alpha, noise_variance(res.histograms, w))
                        covered[f"{mode}_weighted"].append(lo <= auc <= hi)
                        noise[f"{mode}_weighted"].append(noise_variance(res.histograms, w))
                        equal = (res.auc_positives + res.auc_negatives) / 2
                        row[f"{mode}_equal"] = abs(equal - auc)
                        signed[f"{mode}_equal"].append(equal - auc)
                        lo, hi = logit_ci(equal, res.variance, res.alpha, noise_variance(res.histograms, 0.5))
                        covered[f"{mode}_equal"].append(lo <= auc <= hi)
                        noise[f"{mode}_equal"].append(noise_variance(res.histograms, 0.5))
                        # the control variates before: beta, weight, variance from the leaves' monotone shares
                        old = control_variates(res.histograms, coarse_nodes=res.histograms.edges.size - 1,
                                               stein=False, consistent=False)
                        before = (old.weight * (res.auc_positives - old.beta10 * (res.mean_v00 - 0.5))
                                  + (1 - old.weight) * (res.auc_negatives - old.beta01 * (res.mean_v11 - 0.5)))
                        old_noise = old.weight**2 * old.variance10 + (1 - old.weight) ** 2 * old.variance01
                        row[f"{mode}_leaves"] = abs(before - auc)
                        signed[f"{mode}_leaves"].append(before - auc)
                        lo, hi = logit_ci(before, res.variance, res.alpha, old_noise)
                        covered[f"{mode}_leaves"].append(lo <= auc <= hi)
                        noise[f"{mode}_leaves"].append(old_noise)
                        lo, hi = res.roc_glm.ci
                        covered[f"{mode}_rocglm"].append(lo <= auc <= hi)
                except FederatedCallError as exc:  # a site below q positives or negatives (rule A1)
                    refused.append((rep, n, str(exc).splitlines()[1].strip()))
                    continue
                rows.append(row)
    df = pd.DataFrame(rows)
    cols = [c for c in df.columns if c not in ("rep", "n", "auc")]
    pd.set_option("display.width", 200)
    print("\nmean absolute error against the pooled empirical AUC (CI: |lower diff| + |upper diff| of the "
          "DeLong Wald CI)")
    summary = pd.DataFrame({"mean": df[cols].mean(), "median": df[cols].median(), "p90": df[cols].quantile(0.9)})
    print(summary.map(lambda v: f"{v:.4f}").to_string())
    small, large = df[df.n <= 1000], df[df.n > 1000]
    print(f"\nby n: n <= 1000 ({len(small)} data sets) | n > 1000 ({len(large)})")
    print(pd.DataFrame({"n<=1000": small[cols].mean(), "n>1000": large[cols].mean()})
          .map(lambda v: f"{v:.4f}").to_string())
    print("\nbias (mean signed error, its standard error) and coverage of the reported interval")
    for mode, errors in signed.items():
        e = np.asarray(errors)
        cover = f"; coverage {np.mean(covered[mode]):.3f}" if covered.get(mode) else ""
        if noise.get(mode):  # the noise alone: its reported variance against the errors' over the data sets
            v = np.asarray(noise[mode])
            cover += (f"; noise cover {np.mean(np.abs(e) <= 1.959963984540054 * np.sqrt(v)):.3f}, "
                      f"reported/empirical noise variance {v.mean() / e.var(ddof=1):.2f}, "
                      f"reported/mean squared error {v.mean() / np.mean(e**2):.2f}")
            if dp_noise.get(mode):  # without the cells' ties (tie_variance): the noise's variance alone
                d = np.asarray(dp_noise[mode])
                cover += (f"; the noise's alone: cover {np.mean(np.abs(e) <= 1.959963984540054 * np.sqrt(d)):.3f}, "
                          f"ratio {d.mean() / e.var(ddof=1):.2f}")
                t, df = np.asarray(no_df[mode]), np.asarray(dfs[mode])
                cover += (f"; noise and ties without the t factor: cover "
                          f"{np.mean(np.abs(e) <= 1.959963984540054 * np.sqrt(t)):.3f}, "
                          f"ratio {t.mean() / e.var(ddof=1):.2f}; noise df median {np.median(df):.1f} "
                          f"({df.min():.1f}-{df.max():.1f})")
        print(f"  {mode:<22} bias {e.mean():+.4f} (SE {e.std(ddof=1) / np.sqrt(e.size):.4f}){cover}")
    for rep, n, why in refused:
        print(f"data set {rep} (n = {n}) left out, refused by a site: {why}")
    print(f"\nwall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
