"""DataSHIELD's unmodified R client (dsBaseClient's ``ds.meanSdGp``, over DSOpal and ``/ws``) against
groups a site withholds: the messy corpus's three hospitals made by ``dsfed-server init``, shipped
default rules. After ``ds.table("D$stage")``, hospital3 withholds the BMI's stage II-IV groups (a few
of their records miss the BMI; tests/test_first_hour_datashield.py, tests/test_redteam_group_missing.py).

``ds.meanSdGp(type = "both")`` then returns a sensible result, no error: each released group's mean,
SD and size per site equal pandas' on the records the site keeps; a withheld group is NA in its site's
column and in ``COMBINE`` (R's arithmetic with NA), and ``COMBINE`` of a group every site released is
dsBase's pooling of the per-site figures (the size-weighted mean of means and of variances), computed
here from pandas' per-site figures; ``Total_Nvalid`` is NA. dsBaseClient drops the site's ``Message``;
``datashield.aggregate(conns, "meanSdGpDS(D$bmi,D$stage)")`` shows it (docs/analyst.md)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dsfed_server.launch import LocalSites
from test_first_hour_datashield import hospitals_by_init
from test_r_client import INSTALL_HINT, R_LIB, _client_installed

STAGES = ("I", "II", "III", "IV")
SCRIPT = r"""
args <- commandArgs(trailingOnly = TRUE)
config <- jsonlite::fromJSON(args[1], simplifyVector = FALSE)
.libPaths(c(config$lib, .libPaths()))
suppressPackageStartupMessages({library(DSI); library(DSOpal); library(dsBaseClient)})
b <- DSI::newDSLoginBuilder()
for (name in names(config$sites)) {
  s <- config$sites[[name]]
  b$append(server = name, url = s$url, user = "analyst", password = s$password, table = "main.patients",
           driver = "OpalDriver")
}
conns <- suppressWarnings(DSI::datashield.login(b$build(), assign = TRUE, symbol = "D"))
table <- ds.table("D$stage", datasources = conns)
r <- ds.meanSdGp("D$bmi", "D$stage", type = "both", datasources = conns)
raw <- DSI::datashield.aggregate(conns, as.symbol("meanSdGpDS(D$bmi,D$stage)"))
cols <- function(m) lapply(setNames(colnames(m), colnames(m)), function(k) as.list(unname(m[, k])))
out <- list(table = lapply(table$output.list$TABLES.COMBINED_all.sources_counts, identity),
            mean = cols(r$Mean_gp_study), sd = cols(r$StDev_gp_study), n = cols(r$Nvalid_gp_study),
            total_nvalid = r$Total_Nvalid, total_ntotal = r$Total_Ntotal,
            errors = if (length(DSI::datashield.errors())) DSI::datashield.errors() else NULL,
            messages = lapply(raw, function(s) s$Message), withheld = lapply(raw, function(s) as.list(s$withheld)))
DSI::datashield.logout(conns)
writeLines(jsonlite::toJSON(out, auto_unbox = TRUE, digits = NA, null = "null", na = "null"), args[2])
"""


@pytest.fixture(scope="module")
def r_outcome(tmp_path_factory) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    if not _client_installed():  # its absence fails the test, saying how to install it
        pytest.fail(INSTALL_HINT.format(lib=R_LIB), pytrace=False)
    tmp = tmp_path_factory.mktemp("r-meansdgp")
    sites, passwords, kept = hospitals_by_init(tmp)
    script, config, out = tmp / "session.R", tmp / "config.json", tmp / "out.json"
    script.write_text(SCRIPT)
    with LocalSites(sites, tmp / "run") as local:
        # opalr refuses plain http to any host but localhost
        config.write_text(json.dumps({"lib": str(R_LIB), "sites": {
            s.name: {"url": local.urls[s.name].replace("127.0.0.1", "localhost"), "password": passwords[s.name]}
            for s in sites}}))
        run = subprocess.run(["Rscript", "--vanilla", str(script), str(config), str(out)], capture_output=True,
                             text=True, timeout=900, cwd=tmp)
    assert run.returncode == 0 and out.exists(), run.stderr[-4000:]
    return json.loads(out.read_text()), kept


def test_ds_meanSdGp_shows_withheld_groups_as_NA_and_the_rest_as_pandas(r_outcome):
    got, kept = r_outcome
    assert got["errors"] is None
    stage_counts = sum(k.stage.value_counts() for k in kept.values())
    assert [got["table"][s] for s in STAGES] == [int(stage_counts[s]) for s in STAGES]  # the earlier table
    withheld = {site: [STAGES[int(g) - 1] for g in w] for site, w in got["withheld"].items()}
    assert withheld == {"hospital1": [], "hospital2": [], "hospital3": ["II", "III", "IV"]}
    assert "3 group(s) withheld (II, III, IV)" in got["messages"]["hospital3"]
    assert "disclosure.subset_min_difference" in got["messages"]["hospital3"]
    complete = {site: k.dropna(subset=["stage", "bmi"]).groupby("stage").bmi for site, k in kept.items()}
    for site, groups in complete.items():
        for at, stage in enumerate(STAGES):
            figures = [got[k][site][at] for k in ("mean", "sd", "n")]
            if stage in withheld[site]:
                assert figures == [None, None, None], (site, stage)
            else:
                assert figures[0] == pytest.approx(groups.mean()[stage], rel=1e-12)
                assert figures[1] == pytest.approx(groups.std()[stage], rel=1e-12)
                assert figures[2] == groups.size()[stage]
    for at, stage in enumerate(STAGES):
        combined = [got[k]["COMBINE"][at] for k in ("mean", "sd", "n")]
        if any(stage in w for w in withheld.values()):
            assert combined == [None, None, None], stage
            continue
        n = np.array([g.size()[stage] for g in complete.values()], dtype=float)
        means = np.array([g.mean()[stage] for g in complete.values()])
        variances = np.array([g.var()[stage] for g in complete.values()])
        assert combined[0] == pytest.approx(np.sum(n * means) / n.sum(), rel=1e-12)
        assert combined[1] == pytest.approx(np.sqrt(np.sum(n * variances) / n.sum()), rel=1e-12)
        assert combined[2] == n.sum()
    assert got["total_nvalid"] is None and got["total_ntotal"] == sum(len(k) for k in kept.values())
