"""Benchmark: bias of the histogram AUC and ROC-GLM AUC in the demo's setting, against the pooled
empirical AUC of the GBSG2 validation records.

    .venv/bin/python bench/demo_auc.py --runs 30 --levels 3 6 8     # the figure in bench/RESULTS.md (4 min)
    .venv/bin/python bench/demo_auc.py --runs 8 --levels 6          # quicker
    .venv/bin/python bench/demo_auc.py --runs 30 --levels 4 5 6 --auc-first   # the AUC before any other cut

Setting: the five GBSG2 sites (250 records) with their own rules (``disclosure_rules/site*.toml``),
provisioned afresh for every run (new site secrets, ledgers and release histories, so new noise
and new gate margins), and ``validate()``'s order of releases on the score: the calibration curve's
bins and the Hosmer-Lemeshow H and C groups, then the histogram AUC (pooled releases) at each depth
asked. Bias = mean signed error over the runs with its standard error; coverage = how often the
reported interval (sampling and noise variance) holds the pooled AUC; noise-only interval: how often the error
is within 1.96 reported non-sampling sds (the target is the pooled AUC, so the sampling variance does not enter):
the noise's variance and the released cells' ties' (``noise_error_variance``, :func:`tie_variance`), the noise's
alone printed beside it (the interval before). The ROC-GLM's noise-only interval is also read against its own target,
the pooled ROC-GLM of the same class's exact placement values (no cells, no noise): the binormal model's distance
from the empirical AUC is a difference of estimands, there in the pooled analysis too, not a non-sampling error.
``--dump FILE``: every run (its result, the reference the sites derived) pickled for offline analysis.
``--auc-first``: the histogram AUC on fresh sites before the calibration bins and H-L groups (the order tried for
``validate()``, not shipped); either way a run reports what the curve and the groups kept.
The shipped AUC corrects each placement mean by its class's own (control variates); every run also
reports the weighted means without that correction (the estimator before). ``--kept-edges``: how many inner edges
the reference the sites derive has -- the tree's leaf edges they keep and the cuts released before that they add
(``curves.earlier_edges``; the in-process sites' ``derived_reference`` wrapped to note them) -- and the error of
the pooled AUC with the scores binned at those edges (exact counts, ties one half): the bias the merged leaves
leave without any noise. ``--decompose``: the ROC-GLM's AUC refitted offline on the pooled records' placement
values at the cells of each run's reference, on either class's (the positives', Schalk et al.'s, or the negatives',
the inverse curve's), against that reference and against exact counts at its edges: what the noise, and what the
ties and the binormal model alone, make of it.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, special

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from coverage import pooled_auc  # noqa: E402  (bench/coverage.py)
from dsfed_client import FederatedCallError, LoginBuilder  # noqa: E402
from dsfed_client.analyses.calibration import ds_calibration_curve, ds_hosmer_lemeshow  # noqa: E402
from dsfed_client.analyses.curves import ds_hist_auc, placement_weight  # noqa: E402
from dsfed_server.inprocess import in_process  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402
import dsfed_server.functions.curves as site_curves  # noqa: E402
from dsfed_server.disclosure.gate import Cut, cell_index  # noqa: E402
from dsfed_server.functions.curves import reference_cuts  # noqa: E402
from dsfed_server.functions.validation import roc_glm_table  # noqa: E402

SITES = ("site1", "site2", "site3", "site4", "site5")


def noting_references() -> list[pd.DataFrame]:
    """Wrap the in-process sites' ``derived_reference`` so that every reference they derive is noted in the list
    returned (its inner edges, as cuts: the leaf edges kept and the earlier cuts added)."""
    derive, kept = site_curves.derived_reference, []

    def noted(release, leaves, added=()):  # noqa: ANN001, ANN202
        reference = derive(release, leaves, added)
        kept.append(reference)
        return reference

    site_curves.derived_reference = noted
    return kept


def probit_auc(table: pd.DataFrame, inverse: bool) -> float:
    """The binormal AUC of a probit fit ``u ~ x`` weighted by ``w`` (maximum likelihood): :math:`\\Phi(a /
    \\sqrt{1 + b^2})` of the curve's line, or of the inverse curve's, :math:`\\Phi(-c / \\sqrt{1 + d^2})`."""
    u, x, w = (table[k].to_numpy(dtype=float) for k in ("u", "x", "w"))

    def loss(beta: np.ndarray) -> float:
        eta = beta[0] + beta[1] * x
        return -float(np.sum(w * (u * special.log_ndtr(eta) + (1 - u) * special.log_ndtr(-eta))))

    a, b = optimize.minimize(loss, np.array([0.5, 1.0]), method="BFGS", options={"gtol": 1e-9}).x
    return float(special.ndtr((-a if inverse else a) / np.sqrt(1 + b * b)))


def exact_roc_glm(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """The ROC-GLM's AUC (99 thresholds) on the pooled records' exact DeLong placement values (ties one half, no
    cells), on the positives' and on the negatives': the binormal model's own error on these scores."""
    neg, pos = np.sort(p[y == 0]), np.sort(p[y == 1])
    v10 = (np.searchsorted(neg, p[y == 1], "left") + np.searchsorted(neg, p[y == 1], "right")) / 2 / neg.size
    v01 = 1 - (np.searchsorted(pos, p[y == 0], "left") + np.searchsorted(pos, p[y == 0], "right")) / 2 / pos.size
    return {"positives": probit_auc(roc_glm_table(1.0 - v10, 99, y), False),
            "negatives": probit_auc(roc_glm_table(v01, 99, y), True)}


def roc_glm_parts(reference: pd.DataFrame, y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """The ROC-GLM's AUC (99 thresholds) on the pooled records' placement values at the reference's cells, ties one
    half, on the positives' (Schalk et al.) and on the negatives' (the inverse curve), against the reference itself
    (its noise) and against the pooled records' exact CDFs at the same edges (the ties and the binormal model
    alone)."""
    edges, closed = reference["edge"].to_numpy(), reference["closed"].to_numpy(dtype=bool)
    exact = reference.copy()
    for name, cls in (("neg", 0), ("pos", 1)):
        x = np.sort(p[y == cls])
        exact[name] = [np.searchsorted(x, e, "right" if c else "left") for e, c in zip(edges, closed)]
        exact.loc[exact.index[-1], name] = x.size
    out = {}
    for label, ref in (("noisy", reference), ("exact", exact)):
        v10, v01 = site_curves.placements(ref, reference_cuts(ref), y, p, "tied")
        out[f"positives_{label}"] = probit_auc(roc_glm_table(1.0 - v10, 99, y), False)
        out[f"negatives_{label}"] = probit_auc(roc_glm_table(v01, 99, y), True)
    return out


def binned_auc(y: np.ndarray, p: np.ndarray, inner: Sequence[Cut]) -> float:
    """The Mann-Whitney AUC of the scores binned at the ``inner`` cuts (ties one half)."""
    return pooled_auc(y, cell_index(np.asarray(p, dtype=float), inner).astype(float))


def binned_sections(session: Any) -> tuple[bool, int, int]:
    """The calibration curve's bins and the Hosmer-Lemeshow H and C groups on the score, as ``validate()`` asks
    them: (the curve coarsened, H's groups, C's groups: 0 where refused)."""
    curve = ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=True)
    groups = []
    for kind in ("H", "C"):
        try:
            groups.append(len(ds_hosmer_lemeshow(session, "D$y", "D$score", kind=kind, secure=True).group_sizes))
        except FederatedCallError:  # fewer than three groups left once merged
            groups.append(0)
    return bool(curve.coarsened), groups[0], groups[1]


def one_run(levels: int, workdir: Path, cuts_first: bool = True) -> dict[str, Any]:
    """Fresh GBSG2 sites; the calibration bins and H-L groups, then the AUC at ``levels`` (``cuts_first``), or
    the other way round: the empirical AUC (``auc``), its reported interval (``ci``) and noise variance
    (``noise``), the ROC-GLM's AUC, noise variance and the class whose placement values it was fitted on
    (``glm``, ``glm_noise``, ``placed``), the weighted means without the control variates (``before``) and
    :func:`binned_sections` (``sections``)."""
    prov = provision(workdir, {s: (ROOT / "opal_fixtures" / s, ROOT / "disclosure_rules" / f"{s}.toml")
                               for s in SITES})
    builder = LoginBuilder()
    for name, p in prov.items():
        cred = p.credentials["analyst"]
        site = in_process(SiteService.from_config_file(p.config))
        builder.append_inprocess(site, user=cred.user, password=cred.password)
    with builder.login() as session, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session.assign_table("D", "GBSG2.validation")
        sections = binned_sections(session) if cuts_first else None
        res = ds_hist_auc(session, "D$y", "D$score", secure=True, levels=levels)
        sections = sections or binned_sections(session)
    w = placement_weight(res.histograms)
    return {"auc": res.auc, "ci": tuple(res.ci_logit), "noise": res.noise_error_variance,
            "dp_noise": res.noise_variance, "ties": res.tie_variance, "df": res.noise_df,
            "no_df": res.noise_variance + res.tie_variance, "glm": res.roc_glm.auc,
            "glm_noise": res.roc_glm.noise_variance, "placed": res.roc_glm.placed,
            "before": w * res.auc_positives + (1 - w) * res.auc_negatives, "sections": sections, "result": res}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--levels", type=int, nargs="+", default=[6])
    parser.add_argument("--auc-first", action="store_true",
                        help="the AUC before the calibration bins and H-L groups")
    parser.add_argument("--decompose", action="store_true",
                        help="the ROC-GLM on either class's placement values against the run's reference and against "
                             "exact counts at its edges (offline, on the pooled records)")
    parser.add_argument("--dump", type=Path, help="pickle every run (its result and the reference) to this file "
                        "(FILE-L<levels> for several --levels)")
    parser.add_argument("--kept-edges", action="store_true",
                        help="the inner edges of the sites' reference (leaf edges kept, earlier cuts added), and "
                             "the exact AUC binned at them")
    args = parser.parse_args()
    pooled = pd.concat([pd.read_csv(ROOT / "opal_fixtures" / s / "GBSG2" / "validation.csv") for s in SITES])
    truth = pooled_auc(pooled["y"].to_numpy(), pooled["score"].to_numpy())
    order = "AUC first" if args.auc_first else "bins and H-L groups first"
    print(f"GBSG2, 5 sites, site*.toml, {args.runs} runs per depth, {order}; pooled empirical AUC {truth:.4f}")
    t0 = time.perf_counter()
    kept = noting_references() if args.kept_edges or args.decompose else None
    y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
    pooled_glm = exact_roc_glm(y, p)  # the ROC-GLM's own target: its pooled, noise-free value, either class's
    print("ROC-GLM of the exact placement values (no cells): " + "; ".join(
        f"{k}' {v - truth:+.4f}" for k, v in pooled_glm.items()))
    with tempfile.TemporaryDirectory(prefix="dsfed-demo-auc-") as tmp:
        for levels in args.levels:
            runs, edges = [], []
            for r in range(args.runs):
                runs.append(one_run(levels, Path(tmp) / f"L{levels}-{r}", not args.auc_first))
                if kept is not None:
                    edges.append(kept[-1])
                    runs[-1]["reference"] = kept[-1]
                if args.decompose:
                    runs[-1]["parts"] = roc_glm_parts(kept[-1], y, p)
            emp, glm, cv = (np.array([r[k] for r in runs]) - truth for k in ("auc", "glm", "before"))
            own = glm + truth - np.array([pooled_glm[r["placed"]] for r in runs])  # against the pooled ROC-GLM
            covered = np.mean([lo <= truth <= hi for lo, hi in (r["ci"] for r in runs)])
            # the noise-only interval: the estimate +- 1.96 reported noise sds (the target is the pooled AUC)
            noise_cover, glm_cover, dp_cover, no_df_cover = (
                np.mean(np.abs(e) <= 1.96 * np.sqrt([r[k] for r in runs]))
                for e, k in ((emp, "noise"), (glm, "glm_noise"), (emp, "dp_noise"), (emp, "no_df")))
            reported = {k: np.mean([r[k] for r in runs]) for k in ("noise", "dp_noise", "ties", "glm_noise")}
            coarsened, h, c = (np.array([r["sections"][i] for r in runs]) for i in range(3))
            se = np.sqrt(args.runs)
            placed = ", ".join(f"{k} {v}" for k, v in zip(*np.unique([r["placed"] for r in runs], return_counts=True)))
            print(f"  {2**levels:>4} leaves: empirical bias {emp.mean():+.4f} (SE {emp.std(ddof=1) / se:.4f}), "
                  f"MAE {np.abs(emp).mean():.4f}, coverage {covered:.3f}, noise-only interval covers {noise_cover:.3f}")
            print(f"              non-sampling variance (the noise's and the cells' ties'): mean reported "
                  f"{reported['noise']:.3g} (the noise's {reported['dp_noise']:.3g}, "
                  f"the ties' {reported['ties']:.3g}), "
                  f"errors' mean square {np.mean(emp**2):.3g}: ratio {reported['noise'] / np.mean(emp**2):.2f} (the "
                  f"noise's alone {reported['dp_noise'] / np.mean(emp**2):.2f}, its interval covers {dp_cover:.3f}); "
                  f"ROC-GLM: ratio {reported['glm_noise'] / np.mean(glm**2):.2f}")
            print(f"              noise df median {np.median([r['df'] for r in runs]):.1f}; the noise's and the ties' "
                  f"without the t factor: interval covers {no_df_cover:.3f}")
            print(f"              ROC-GLM bias {glm.mean():+.4f} (SE {glm.std(ddof=1) / se:.4f}), MAE "
                  f"{np.abs(glm).mean():.4f}, noise-only interval covers {glm_cover:.3f}; fitted on the placement "
                  f"values of: {placed}")
            print(f"              ROC-GLM against the pooled ROC-GLM of the same placement values: bias "
                  f"{own.mean():+.4f} (SE {own.std(ddof=1) / se:.4f}), MAE {np.abs(own).mean():.4f}, noise-only "
                  f"interval covers {np.mean(np.abs(own) <= 1.96 * np.sqrt([r['glm_noise'] for r in runs])):.3f}, "
                  f"ratio {reported['glm_noise'] / np.mean(own**2):.2f}")
            print(f"              calibration curve coarsened in {coarsened.sum()} of {args.runs}; H-L H groups "
                  f"{h.min()}-{h.max()}; H-L C groups {c.min()}-{c.max()}, refused in {(c == 0).sum()}")
            if args.kept_edges:
                binned = np.array([binned_auc(y, p, reference_cuts(e)[1:-1]) for e in edges])
                sizes = [len(e) - 2 for e in edges]
                print(f"              inner edges {np.mean(sizes):.1f} ({min(sizes)}-{max(sizes)}): the leaf edges "
                      f"kept of {2**levels - 1} and the earlier cuts added; exact counts binned at them: "
                      f"bias {binned.mean() - truth:+.4f}")
            print(f"              weighted means without the control variates (before): bias {cv.mean():+.4f} "
                  f"(SE {cv.std(ddof=1) / se:.4f}), MAE {np.abs(cv).mean():.4f}")
            if args.decompose:
                for name in runs[0]["parts"]:
                    e = np.array([r["parts"][name] for r in runs]) - truth
                    cls, ref = name.split("_")
                    print(f"              ROC-GLM on the {cls}' placement values, {ref} reference: "
                          f"bias {e.mean():+.4f} (SE {e.std(ddof=1) / se:.4f}), sd {e.std(ddof=1):.4f}")
            if args.dump:  # one file a depth where several are asked
                dump = args.dump if len(args.levels) == 1 else args.dump.with_stem(f"{args.dump.stem}-L{levels}")
                with open(dump, "wb") as fh:
                    pickle.dump({"truth": truth, "pooled_glm": pooled_glm, "runs": runs}, fh)
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
