"""``ds.histogram(type = "combine")`` in the unmodified R client (dsBaseClient 6.3.4) adds the sites'
counts bin by bin on the first site's breaks. Under the shipped ``small_bin_policy = "merge"`` a site
releases coarser bins; its ``/ws`` answer used to carry them as they were, so R recycled a shorter
counts vector into the others' (a wrong pooled histogram, with only R's length warning). The site now
answers on the breaks asked for, each merged bin's count spread over the requested bins it covers, and
keeps the bins as released in ``released``. Checked through R against R's ``hist`` on the pooled
records: the combined breaks are the requested ones, every record is counted once, a bin every site
released as asked holds R's pooled count, and over every block bounded by breaks all sites released
the combined count is R's pooled count. The messy corpus's three hospitals (BMI, a few values
missing), shipped default rules, real servers on loopback."""

from __future__ import annotations

import json
import subprocess
from contextlib import ExitStack
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dsfed_server.messy import write_corpus
from rref import r_eval
from sitekit import make_sites, serve
from test_r_client import r_client_lib  # noqa: F401  (fixture: the R library, or a failure saying how to install it)

BREAKS = (5, 10, 20)

R_SCRIPT = """
args <- commandArgs(trailingOnly = TRUE)
config <- jsonlite::fromJSON(args[1], simplifyVector = FALSE)
.libPaths(c(config$lib, .libPaths()))
suppressPackageStartupMessages({library(DSI); library(DSOpal); library(dsBaseClient)})
grDevices::pdf(NULL)
options(datashield.progress = FALSE)
b <- DSI::newDSLoginBuilder()
for (name in names(config$sites)) {
  s <- config$sites[[name]]
  b$append(server = name, url = s$url, user = s$user, password = s$password, table = "P.t", driver = "OpalDriver")
}
conns <- DSI::datashield.login(b$build(), assign = TRUE, symbol = "D")
ranges <- unlist(DSI::datashield.aggregate(conns, quote(histogramDS1(D$bmi, 1, 3, 0.25))))
out <- list(lo = min(ranges), hi = max(ranges), runs = list())
for (n in config$breaks) {
  warned <- character(0)
  combined <- withCallingHandlers(ds.histogram("D$bmi", type = "combine", num.breaks = n, datasources = conns),
                                  warning = function(w) {
                                    warned <<- c(warned, conditionMessage(w)); invokeRestart("muffleWarning")
                                  })
  answers <- DSI::datashield.aggregate(conns, paste0("histogramDS2(D$bmi,", n, ",", out$lo, ",", out$hi, ",1,3,0.25)"))
  sites <- lapply(answers, function(a) list(breaks = a$histobject$breaks, counts = a$histobject$counts,
                                            released = if (is.null(a$released)) NULL else
                                              list(breaks = a$released$breaks, counts = a$released$counts),
                                            invalidcells = a$invalidcells))
  out$runs[[length(out$runs) + 1]] <- list(n = n, breaks = combined$breaks, counts = combined$counts,
                                           warnings = as.list(warned), sites = sites)
}
DSI::datashield.logout(conns)
writeLines(jsonlite::toJSON(out, auto_unbox = TRUE, digits = NA, null = "null"), args[2])
"""


def _r_hist(values: np.ndarray, breaks: list[float]) -> np.ndarray:
    """R's ``hist(x, breaks, plot = FALSE)$counts`` over the non-missing values."""
    return r_eval("hist(x[!is.na(x)], breaks = b, plot = FALSE)$counts", x=values, b=np.asarray(breaks, dtype=float))


@pytest.fixture(scope="module")
def r_run(r_client_lib, tmp_path_factory) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("r-histogram")
    frames = {s.name: s.truth[["bmi"]].reset_index(drop=True)
              for s in write_corpus(tmp / "corpus", dataset="three_hospitals", seed=37)}
    provisioned, services = make_sites(tmp, frames)
    with ExitStack() as stack:
        urls = {name: stack.enter_context(serve(service)) for name, service in services.items()}
        sites = {name: {"url": url.replace("127.0.0.1", "localhost"),  # opalr: plain http to localhost only
                        "user": provisioned[name].credentials["analyst"].user,
                        "password": provisioned[name].credentials["analyst"].password}
                 for name, url in urls.items()}
        (tmp / "config.json").write_text(json.dumps({"lib": str(r_client_lib), "sites": sites,
                                                     "breaks": list(BREAKS)}))
        (tmp / "combine.R").write_text(R_SCRIPT)
        run = subprocess.run(["Rscript", "--vanilla", str(tmp / "combine.R"), str(tmp / "config.json"),
                              str(tmp / "out.json")], capture_output=True, text=True, timeout=600, cwd=tmp)
    assert run.returncode == 0, run.stderr[-4000:]
    return frames, json.loads((tmp / "out.json").read_text())


def test_combined_histogram_equals_R_on_the_pooled_records(r_run):
    frames, out = r_run
    pooled = pd.concat(frames.values(), ignore_index=True)["bmi"].to_numpy(float)
    merged_somewhere = 0
    for run in out["runs"]:
        n = run["n"]
        seq = r_eval(f"seq({out['lo']!r}, {out['hi']!r}, by = ({out['hi']!r} - {out['lo']!r}) / {n})")
        asked = [float(v) for v in run["breaks"]]  # the breaks ds.histogram asked for, as the sites read them
        np.testing.assert_allclose(asked, seq, rtol=0, atol=1e-9)
        assert not run["warnings"], run["warnings"]  # no "longer object length" recycling
        counts = np.asarray(run["counts"], dtype=float)
        assert counts.sum() == pytest.approx(np.sum(~np.isnan(pooled)), abs=1e-9)
        want = _r_hist(pooled, asked)
        # blocks bounded by breaks every site released: R's pooled count over each block
        common = set(asked)
        as_asked = np.ones(len(asked) - 1, dtype=bool)
        for site, answer in run["sites"].items():
            assert answer["breaks"] == asked
            released = answer["released"]
            if released is None:
                assert answer["invalidcells"] == 0
                np.testing.assert_array_equal(answer["counts"], _r_hist(frames[site]["bmi"].to_numpy(float), asked))
                continue
            merged_somewhere += 1
            kept = [float(b) for b in released["breaks"]]
            np.testing.assert_array_equal(released["counts"], _r_hist(frames[site]["bmi"].to_numpy(float), kept))
            common &= set(kept)
            pairs = set(zip(kept[:-1], kept[1:]))
            as_asked &= np.array([(a, b) in pairs for a, b in zip(asked[:-1], asked[1:])])
            assert answer["invalidcells"] == int(np.sum(~np.array([(a, b) in pairs
                                                                   for a, b in zip(asked[:-1], asked[1:])])))
        np.testing.assert_allclose(counts[as_asked], want[as_asked], rtol=0, atol=1e-9)
        edges = [i for i, b in enumerate(asked) if b in common]
        for i, j in zip(edges[:-1], edges[1:]):
            assert counts[i:j].sum() == pytest.approx(want[i:j].sum(), abs=1e-9)
    assert merged_somewhere > 0  # 20 breaks over BMI: the tails hold fewer than q records at a site
