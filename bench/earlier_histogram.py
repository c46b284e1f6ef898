"""What an earlier exploratory histogram costs a later per-site ``validate()``: calibration cells and
decision thresholds released on fresh sites, and on sites where another analyst first asked
``ds.histogram``'s 10 breaks of the score (messy corpus, shipped default rules, noise on).

    .venv/bin/python bench/earlier_histogram.py three_hospitals

Measured (three_hospitals, seed 37, fresh site secrets each run): fresh 9 calibration cells, 4 of 19
decision thresholds; after the histogram 6 and 5 cells in two runs (4 before the gate moved a dropped
edge onto a nearby earlier cut, dsfed_server/disclosure/snapping.py; the secret margins decide which
breaks each site released, and a site that moved an edge elsewhere than the others merges the summed
cell), 3 of 19 thresholds with or without the move.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", nargs="?", default="three_hospitals", help="a messy-corpus data set")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from conftest import inprocess_builder  # noqa: PLC0415 (the tests' site helpers)
    from dsfed_client.analyses.suite import validate  # noqa: PLC0415
    from dsfed_server.messy import write_corpus  # noqa: PLC0415
    from sitekit import make_sites  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp())
    frames = {s.name: s.truth[["y", "risk_score"]].dropna().rename(columns={"risk_score": "score"})
              .reset_index(drop=True) for s in write_corpus(tmp / "corpus", dataset=args.dataset, seed=37)}
    for explore in (False, True):
        provisioned, services = make_sites(tmp / f"sites-{explore}", frames)
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "P.t")
            if explore:
                ranges = session.aggregate_expr("histogramDS1(D$score, 1, 3, 0.25)").values()
                lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
                session.aggregate_expr(f"histogramDS2(D$score, 10, {lo!r}, {hi!r}, 1, 3, 0.25)")
            result = validate(session, "D$y", "D$score", secure=False, heterogeneity=False)
        curve = result.decision_curve
        thresholds = "-" if curve is None else f"{curve.n_thresholds} of {curve.counts.requested.size}"
        print(f"{'after a histogram' if explore else 'fresh sites':18} calibration cells {result.curve.n_bins:2d}  "
              f"decision thresholds {thresholds}  moved {dict(result.curve.bins.moved)}")


if __name__ == "__main__":
    main()
