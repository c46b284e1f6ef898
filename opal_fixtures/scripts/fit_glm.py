"""Fit the demo's logistic model on the GBSG2 training split, across a training site, and write it
as a GLM model file (formula, family, link, coefficients: no code).

    python opal_fixtures/scripts/fit_glm.py            # writes opal_fixtures/models/gbsg2-logit.json

The site runs as its own process on loopback (dsfed_demo.models.training_session); the fit
is the distributed GLM (R's glm on the training records). The demo sites' rules approve the file
by its SHA-256 (dsfed models approve opal_fixtures/models/gbsg2-logit.json --rules ...): refitting
on another machine may change the last bits of a coefficient, and with them the digest, so the
demo refits and compares with this file rather than approving a fresh fit.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from dsfed_client.models import glm_model
from dsfed_demo.models import fit_logistic, model_files, training_session

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=model_files(ROOT / "opal_fixtures")["gbsg2-logit"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dsfed-fit-") as run, \
            training_session(ROOT / "opal_fixtures", ROOT / "disclosure_rules", Path(run)) as session:
        fit = fit_logistic(session)
    print(fit.summary())
    model = glm_model(fit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(model.canonical() + b"\n")
    print(f"wrote {args.out} (SHA-256 {model.sha256})")


if __name__ == "__main__":
    main()
