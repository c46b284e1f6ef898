"""A refusal the site's secret margin may have caused says so, so that an analyst can tell the data
from the draw. Twenty tables of the values 0 to 39 at one site (shipped rules: q = 5, a margin of
0 to 5 records drawn per cell with the site's key); a histogram releases the cut 9.5 on each, then a
subset ``x > 14.5`` leaves 5 records (q exactly) between its cut and 9.5. The data pass q, so every
refusal is the margin's: about half are refused, each naming the margin, that sites with other
secrets may draw otherwise, and why the site cannot say which; the subset of 10 records beyond
the cut (q plus the largest margin) is never refused, whatever the draw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from sitekit import ROOT, write_table

TABLES = 20


@pytest.fixture
def site(tmp_path: Path):
    for j in range(TABLES):
        write_table(tmp_path / "data" / "s", pd.DataFrame({"x": np.arange(40.0)}), table=f"t{j}")
    rules = ROOT / "disclosure_rules" / "default.toml"
    provisioned = provision(tmp_path / "run", {"s": (tmp_path / "data" / "s", rules)})
    return provisioned, {"s": SiteService.from_config_file(provisioned["s"].config)}


def _subset(session, j: int, threshold: float) -> str | None:
    """The subset ``x > threshold`` of table j after a histogram released the cut 9.5 on it: None,
    or the refusal's message (rule disclosure.cut_history); a released subset holds pandas' rows."""
    session.assign_table(f"T{j}", f"P.t{j}")
    session.aggregate("histogramDS", Ref(f"T{j}$x"), [0.0, 9.5, 39.5])
    try:
        session.assign_expr(f"S{j}", f'dataFrameSubsetDS2("T{j}", "T{j}$x", "{threshold}", 5, NULL, NULL, FALSE)')
    except FederatedCallError as exc:
        failure = exc.failures["s"]
        assert failure.rule == "disclosure.cut_history", failure
        return failure.message
    assert session.length(f"S{j}$x").n == int(np.sum(np.arange(40.0) > threshold))
    return None


def test_a_refusal_by_the_secret_margin_says_so(site):
    with inprocess_builder(*site).login() as session:
        refused = [m for m in (_subset(session, j, 14.5) for j in range(TABLES)) if m is not None]
    assert 0 < len(refused) < TABLES  # 5 records, q exactly: kept with probability 1/2 per table
    for message in refused:
        assert "plus the site's secret margin of 0 to 5 records" in message
        assert "sites with other secrets may draw otherwise" in message
        assert "as that would tell the cell's count" in message


def test_cells_of_q_plus_the_largest_margin_never_depend_on_the_draw(site):
    with inprocess_builder(*site).login() as session:
        assert [_subset(session, j, 19.5) for j in range(TABLES)] == [None] * TABLES  # 10 records
