"""The refusal an honest isotonic recalibration can meet says that it may come from the sites' draws:
``ds_recalibrate``'s PCHIP rises between the mean scores of its steps, over bins the sites' release
gates chose with secret draws, so with other site secrets the same call may pass (measured: five
sites of 400 records, noise off, refused at one or two sites in some federations and not in others).
The site names the knots between which the map rises over fewer than q of its records, that the
knots follow the sites' draws, and what to do (fewer, wider bins, or the logistic map), where it
used to say only "use a larger table or subset". A map that rises over q records or more is applied
and equals scipy's PCHIP. One in-process site under the shipped default rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.interpolate import PchipInterpolator

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from sitekit import make_sites


def test_a_map_rising_over_too_few_records_names_its_knots_and_the_draws(tmp_path):
    scores = np.round(np.linspace(0.05, 0.95, 60), 4)
    provisioned, services = make_sites(tmp_path, {"s": pd.DataFrame({"score": scores})})
    low, high = float(scores[29]) - 1e-4, float(scores[31]) + 1e-4  # two records between the knots
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as refused:
            session.assign_expr("R", f'recalibrateDS(D$score, "pchip", NULL, c(0.01, {low!r}, {high!r}, 0.99), '
                                     "c(0.1, 0.2, 0.6, 0.7))")
        knots = [0.01, 0.3, 0.7, 0.99]  # rises over 17, 26 and 17 records
        session.assign_expr("F", f'recalibrateDS(D$score, "pchip", NULL, c({", ".join(map(repr, knots))}), '
                                 "c(0.1, 0.2, 0.6, 0.7))")
        mean = session.aggregate("meanDS", "F")["s"]["EstimatedMean"]
    failure = refused.value.failures["s"]
    assert failure.rule == "disclosure.q_threshold"
    assert failure.message == (f"records between the map's knots 2 and 3 ({low:.6g} to {high:.6g}), where it rises: "
                               "fewer than the site's minimum of 5")
    assert "secret draws" in failure.hint and "with other secrets the sites may bin otherwise" in failure.hint
    assert "n_bins" in failure.hint and "method='logistic'" in failure.hint
    assert "larger table" not in failure.hint
    want = PchipInterpolator(knots, [0.1, 0.2, 0.6, 0.7])(np.clip(scores, knots[0], knots[-1])).mean()
    assert mean == pytest.approx(want, rel=1e-12)
