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
reported interval (sampling and noise variance) holds the pooled AUC. ``--auc-first``: the histogram AUC
on fresh sites before any other cut on the score (the order tried for ``validate()``, not shipped: it leaves
the calibration curve and the H-L groups merged beside the AUC's leaves).
``--control-variates``: also the AUC with each placement mean corrected by its class's own
(``bench/hist_auc.py``: the in-process sites wrapped to return the two sums).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from coverage import pooled_auc  # noqa: E402  (bench/coverage.py)
from hist_auc import corrected_auc, with_own_class_sums  # noqa: E402  (bench/hist_auc.py)
from dsfed_client import LoginBuilder  # noqa: E402
from dsfed_client.analyses.calibration import ds_calibration_curve, ds_hosmer_lemeshow  # noqa: E402
from dsfed_client.analyses.curves import ds_hist_auc  # noqa: E402
from dsfed_server.inprocess import in_process  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402

SITES = ("site1", "site2", "site3", "site4", "site5")


def one_run(levels: int, workdir: Path, cuts_first: bool = True, own_sums: dict[str, Any] | None = None
            ) -> tuple[float, float, tuple[float, float], float]:
    """Fresh GBSG2 sites; the calibration bins and H-L groups (``cuts_first``), then the AUC at ``levels``:
    (empirical AUC, ROC-GLM AUC, reported interval, control-variate AUC: NaN without ``own_sums``)."""
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
        if cuts_first:
            ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=True)
            for kind in ("H", "C"):
                ds_hosmer_lemeshow(session, "D$y", "D$score", kind=kind, secure=True)
        res = ds_hist_auc(session, "D$y", "D$score", secure=True, levels=levels)
    cv = float("nan") if own_sums is None else corrected_auc(res, own_sums)[0]
    return res.auc, res.roc_glm.auc, tuple(res.ci_logit), cv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--levels", type=int, nargs="+", default=[6])
    parser.add_argument("--auc-first", action="store_true",
                        help="the AUC before the calibration bins and H-L groups")
    parser.add_argument("--control-variates", action="store_true",
                        help="also the AUC with each placement mean corrected by its class's own")
    args = parser.parse_args()
    pooled = pd.concat([pd.read_csv(ROOT / "opal_fixtures" / s / "GBSG2" / "validation.csv") for s in SITES])
    truth = pooled_auc(pooled["y"].to_numpy(), pooled["score"].to_numpy())
    order = "AUC first" if args.auc_first else "bins and H-L groups first"
    print(f"GBSG2, 5 sites, site*.toml, {args.runs} runs per depth, {order}; pooled empirical AUC {truth:.4f}")
    t0 = time.perf_counter()
    own_sums = with_own_class_sums() if args.control_variates else None
    with tempfile.TemporaryDirectory(prefix="dsfed-demo-auc-") as tmp:
        for levels in args.levels:
            runs = [one_run(levels, Path(tmp) / f"L{levels}-{r}", not args.auc_first, own_sums)
                    for r in range(args.runs)]
            emp, glm, cv = (np.array([r[i] for r in runs]) - truth for i in (0, 1, 3))
            covered = np.mean([lo <= truth <= hi for _, _, (lo, hi), _ in runs])
            se = np.sqrt(args.runs)
            print(f"  {2**levels:>4} leaves: empirical bias {emp.mean():+.4f} (SE {emp.std(ddof=1) / se:.4f}), "
                  f"MAE {np.abs(emp).mean():.4f}; ROC-GLM bias {glm.mean():+.4f} (SE {glm.std(ddof=1) / se:.4f}); "
                  f"coverage {covered:.3f}")
            if own_sums is not None:
                print(f"              control variates: bias {cv.mean():+.4f} (SE {cv.std(ddof=1) / se:.4f}), "
                      f"MAE {np.abs(cv).mean():.4f}")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
