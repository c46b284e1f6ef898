"""Benchmark: bias of the histogram AUC and ROC-GLM AUC in the demo's setting, against the pooled
empirical AUC of the GBSG2 validation records.

    .venv/bin/python bench/demo_auc.py --runs 30 --levels 3 6 8     # the figure in bench/RESULTS.md (4 min)
    .venv/bin/python bench/demo_auc.py --runs 8 --levels 6          # quicker

Setting: the five GBSG2 sites (250 records) with their own rules (``disclosure_rules/site*.toml``),
provisioned afresh for every run (new site secrets, ledgers and release histories, so new noise
and new gate margins), and ``validate()``'s order of releases on the score: the calibration curve's
bins and the Hosmer-Lemeshow H and C groups, then the histogram AUC (pooled releases) at each depth
asked. Bias = mean signed error over the runs with its standard error; coverage = how often the
reported interval (sampling and noise variance) holds the pooled AUC.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from coverage import pooled_auc  # noqa: E402  (bench/coverage.py)
from dsfed_client import LoginBuilder  # noqa: E402
from dsfed_client.analyses.calibration import ds_calibration_curve, ds_hosmer_lemeshow  # noqa: E402
from dsfed_client.analyses.curves import ds_hist_auc  # noqa: E402
from dsfed_server.inprocess import in_process  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402

SITES = ("site1", "site2", "site3", "site4", "site5")


def one_run(levels: int, workdir: Path) -> tuple[float, float, tuple[float, float]]:
    """Fresh GBSG2 sites; the cuts validate() releases first, then the AUC at ``levels``: (empirical
    AUC, ROC-GLM AUC, reported interval)."""
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
        ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=True)
        for kind in ("H", "C"):
            ds_hosmer_lemeshow(session, "D$y", "D$score", kind=kind, secure=True)
        res = ds_hist_auc(session, "D$y", "D$score", secure=True, levels=levels)
    return res.auc, res.roc_glm.auc, tuple(res.ci_logit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--levels", type=int, nargs="+", default=[6])
    args = parser.parse_args()
    pooled = pd.concat([pd.read_csv(ROOT / "opal_fixtures" / s / "GBSG2" / "validation.csv") for s in SITES])
    truth = pooled_auc(pooled["y"].to_numpy(), pooled["score"].to_numpy())
    print(f"GBSG2, 5 sites, site*.toml, {args.runs} runs per depth; pooled empirical AUC {truth:.4f}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsfed-demo-auc-") as tmp:
        for levels in args.levels:
            runs = [one_run(levels, Path(tmp) / f"L{levels}-{r}") for r in range(args.runs)]
            emp, glm = (np.array([r[i] for r in runs]) - truth for i in (0, 1))
            covered = np.mean([lo <= truth <= hi for _, _, (lo, hi) in runs])
            se = np.sqrt(args.runs)
            print(f"  {2**levels:>4} leaves: empirical bias {emp.mean():+.4f} (SE {emp.std(ddof=1) / se:.4f}), "
                  f"MAE {np.abs(emp).mean():.4f}; ROC-GLM bias {glm.mean():+.4f} (SE {glm.std(ddof=1) / se:.4f}); "
                  f"coverage {covered:.3f}")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
