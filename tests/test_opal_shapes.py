"""Result shapes: what the Opal front door sends equals what R's ``jsonlite::toJSON(x,
auto_unbox = TRUE, null = "null", na = "null", digits = NA)`` gives for the R value dsBase
returns. The R values are built in R from each site's fixture file (written here from dsBase's
documented result structure), encoded by the real jsonlite, and compared with what the
unmodified DataSHIELD client received from the site over HTTP."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from conftest import GBSG2_SITES
from dsfed_server.rvalues import RDataFrame, RList, RMatrix, RVector, opal_json
from opalkit import ds_session
from rref import r_eval

# Opal's R server's encoding of a result, verbatim (toJSON, or serializeJSON where toJSON refuses)
OPAL_ENCODING = ('J <- function(x) tryCatch(jsonlite::toJSON(x, auto_unbox = TRUE, null = "null", na = "null", '
                 'digits = NA), error = function(e) jsonlite::serializeJSON(x))\n')


def r_json(source: str, **data: Any) -> Any:
    """Evaluate R ``source`` (ending in a value), encode it as Opal's R server does, parse the JSON."""
    return json.loads(str(r_eval(OPAL_ENCODING + f"J({{ {source} }})", **data)[0]))


def digits_of(want: Any) -> float:
    """The relative precision of R's numbers: toJSON's digits = NA writes 15 significant digits,
    serializeJSON (the typed form, a dict with "type") its default 8."""
    return 1e-8 if isinstance(want, dict) and "type" in want else 1e-13


def assert_same_json(got: Any, want: Any, where: str = "$", rel_tol: float = 1e-13) -> None:
    """Same structure, same key order, same strings; numbers equal to the digits R wrote."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (where, got, want)
        for key in want:
            assert_same_json(got[key], want[key], f"{where}.{key}", rel_tol)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_json(g, w, f"{where}[{i}]", rel_tol)
    elif isinstance(want, (int, float)) and not isinstance(want, bool):
        assert isinstance(got, (int, float)) and not isinstance(got, bool), (where, got, want)
        assert math.isclose(got, want, rel_tol=rel_tol, abs_tol=rel_tol), (where, got, want)
    else:
        assert got == want, (where, got, want)


def first_elements(answer: Any, n: int) -> Any:
    """The first ``n`` elements of a named list, in toJSON's form or serializeJSON's typed form."""
    if "type" not in answer:
        return {k: answer[k] for k in list(answer)[:n]}
    names = answer["attributes"]["names"]
    return {**answer, "attributes": {**answer["attributes"], "names": {**names, "value": names["value"][:n]}},
            "value": answer["value"][:n]}


# --- the encoder against jsonlite, value by value ----------------------------------------------

ENCODER_CASES = [
    (RVector([1.5]), "1.5"),
    (RVector([1, 2], names=["a", "b"]), "c(a = 1, b = 2)"),
    ([3], "3L"),
    ({"a": 1, "b": [1, 2], "c": None, "d": float("nan"), "e": "x", "f": []},
     'list(a = 1, b = c(1, 2), c = NULL, d = NA, e = "x", f = list())'),
    ([True, None], "c(TRUE, NA)"),
    ([float("inf"), -float("inf"), 0.25], "c(Inf, -Inf, 0.25)"),
    (RMatrix([[1, 3], [2, 4]]), "matrix(c(1, 2, 3, 4), 2, dimnames = list(c('a', 'b'), c('c', 'd')))"),
    (RMatrix([[5]]), "matrix(5, 1, 1)"),
    ([[1.5], [2.5]], "matrix(c(1.5, 2.5), 2, 1)"),
    ([[0, 0]], "matrix(0, 1, 2)"),
    (RDataFrame({"a": [1], "b": [None], "Total": [3]}), "data.frame(a = 1, b = NA, Total = 3)"),
    (RDataFrame({"x": [1, 2], "y": [None, 4]}, row_names=["r1", "Total"]),
     "data.frame(x = c(1, 2), y = c(NA, 4), row.names = c('r1', 'Total'))"),
    (RList([1, "a"]), 'list(1, "a")'),
    ([{"a": 1}, {"a": 2}], "list(list(a = 1), list(a = 2))"),
    ({"Levels": ["I"], "ValidityMessage": "VALID ANALYSIS"}, 'list(Levels = "I", ValidityMessage = "VALID ANALYSIS")'),
    ({"histobject": RList({"breaks": [0.0, 1.0, 2.0, 3.0], "counts": [1, 2, 3], "density": [1 / 6, 1 / 3, 0.5],
                           "mids": [0.5, 1.5, 2.5], "xname": "xvect", "equidist": True}, r_class="histogram"),
      "invalidcells": RVector([0], type="double")},
     "xvect <- c(1, 2, 2, 3, 3, 3); "
     "list(histobject = hist(xvect, breaks = c(0, 1, 2, 3), plot = FALSE), invalidcells = 0)"),
]


@pytest.mark.parametrize("value,r_source", ENCODER_CASES, ids=[c[1][:40] for c in ENCODER_CASES])
def test_encoder_equals_opal_encoding(value, r_source):
    want = r_json(r_source)
    assert_same_json(opal_json(value), want, rel_tol=digits_of(want))


# --- each dsBase function's result, built in R, against what the site sent ---------------------

R_SETUP = """
horTh <- factor(horTh, levels = c("no", "yes")); menostat <- factor(menostat, levels = c("Pre", "Post"))
tgrade <- factor(tgrade, levels = c("I", "II", "III"))
for (v in c("age", "tsize", "pnodes", "progrec", "estrec", "time", "cens", "y")) assign(v, as.integer(get(v)))
D <- data.frame(horTh, age, menostat, tsize, tgrade, pnodes, progrec, estrec, time, cens, y, score)
"""

DSBASE_VALUES = {
    "meanDS(D$age)":
        'list(EstimatedMean = mean(age), Nmissing = sum(is.na(age)), Nvalid = sum(!is.na(age)), '
        'Ntotal = length(age), ValidityMessage = "VALID ANALYSIS")',
    "varDS(D$score)":
        'list(Sum = sum(score), SumOfSquares = sum(score^2), Nmissing = 0L, Nvalid = length(score), '
        'Ntotal = length(score), ValidityMessage = "VALID ANALYSIS")',
    'lengthDS("D$age")': "length(age)",
    'dimDS("D")': "dim(D)",
    'classDS("D$tgrade")': "class(tgrade)",
    'colnamesDS("D")': "colnames(D)",
    'namesDS("D")': "names(D)",
    "levelsDS(D$tgrade)": 'list(Levels = levels(tgrade), ValidityMessage = "VALID ANALYSIS")',
    "isValidDS(D$age)": "!(length(age) > 0 & length(age) < 5)",
    "quantileMeanDS(D$score)":
        "c(quantile(score, c(0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)), Mean = mean(score))",
    "table1DDS(D$horTh)":
        'tab <- table(horTh); cc <- as.data.frame(t(as.numeric(tab))); cc <- cbind(cc, sum(tab)); '
        'colnames(cc) <- c(names(tab), "Total"); list(table = cc, message = "valid Table")',
    "table2DDS(D$y, D$cens)":
        'aa <- table(y, cens); bb <- matrix(aa, nrow = nrow(aa)); bb <- rbind(bb, colSums(bb)); '
        'bb <- cbind(bb, rowSums(bb)); cc <- as.data.frame(bb); '
        'colnames(cc) <- c(levels(as.factor(cens)), "Total"); rownames(cc) <- c(levels(as.factor(y)), "Total"); '
        'list(table = cc, message = "valid Table")',
    "histogramDS2(D$age, 2, 0, 100, 1, 3, 0.25)":
        "xvect <- age; list(histobject = graphics::hist(xvect, breaks = seq(0, 100, by = 50), plot = FALSE), "
        "invalidcells = 0)",
    "corDS(D$age, D$score)":  # dsBase names two vectors' columns x.val and y.val (cbind(x.val, y.val))
        "df <- data.frame(x.val = age, y.val = score); cls <- colnames(df); cc <- as.matrix(df[complete.cases(df), ]); "
        "N <- 2; m <- function(v) matrix(v, N, N, dimnames = list(cls, cls)); "
        "list(sums.of.products = t(cc) %*% cc, sums = m(colSums(cc)), complete.counts = m(nrow(cc)), "
        "na.counts = list(`Number of NAs in each column` = matrix(as.integer(colSums(is.na(df))), 1, N, "
        "dimnames = list(NULL, cls)), `Number of NAs casewise` = m(nrow(df) - nrow(cc))), "
        "sums.of.squares = m(colSums(cc^2)), class = class(age))",
    'glmDS1(y ~ score + age, "binomial", NULL, NULL, "D")':
        "X <- model.matrix(~ score + age, D); list(dimX = dim(X), coef.names = colnames(X), y.invalid = 0, "
        "Xpar.invalid = rep(0, ncol(X)), w.invalid = 0, o.invalid = 0, glm.saturation.invalid = 0, "
        'errorMessage = "No errors")',
    'glmDS2(y ~ score + age, "binomial", "-1.5,2,0.01", NULL, NULL, "D")':
        "X <- model.matrix(~ score + age, D); f <- binomial(); eta <- X %*% c(-1.5, 2, 0.01); "
        "mu <- f$linkinv(eta); m <- f$mu.eta(eta); W <- as.vector(m^2 / f$variance(mu)); u <- (y - mu) / m; "
        'list(family = structure(f[c("family", "link")], class = "family"), info.matrix = t(X) %*% (W * X), '
        "score.vect = t(X) %*% matrix(W * u), numsubs = length(y), "
        "dev = sum(f$dev.resids(y, mu, rep(1, length(y)))), Nvalid = length(y), Nmissing = 0L, "
        'Ntotal = length(y), disclosure.risk = 0, errorMessage2 = "No errors")',
    'asFactorDS1("D$horTh")': "levels(factor(horTh))",
    "numNaDS(D$age)": "length(which(is.na(age)))",
    'testObjExistsDS("D")': "list(test.obj.exists = TRUE, test.obj.class = class(D))",
    'testObjExistsDS("E")': "list(test.obj.exists = FALSE, test.obj.class = NULL)",
    # the DataSHIELD session's environment holds D only
    "lsDS(NULL, 1)": 'e <- new.env(); assign("D", D, e); '
                     "list(environment.searched = environmentName(globalenv()), objects.found = ls(e))",
    'lsDS("_:A:_D", 1)': 'e <- new.env(); assign("D", D, e); list(environment.searched = environmentName(globalenv()), '
                         'objects.found = ls(e, pattern = utils::glob2rx("*D")), search.filter.final = "*D")',
    'messageDS("D")': '"ALL OK: there are no studysideMessage(s) on this datasource"',
    'exists("age", D)': 'exists("age", D)',
    'dataFrameSubsetDS1("D", "D$age", "50", 6, NULL, NULL, FALSE)': '"Subsetting undertaken without problems"',
    "meanSdGpDS(D$age, D$horTh)":
        "am <- cbind(age, horTh); ok <- complete.cases(am); g <- as.factor(am[ok, 2]); group <- as.integer(g); "
        "X <- am[ok, 1]; list(Table_valid = TRUE, Mean_gp = tapply(X, g, mean), StDev_gp = sqrt(tapply(X, g, var)), "
        "N_gp = table(group), Nvalid = sum(ok), Nmissing = sum(!ok), Ntotal = nrow(am), "
        'Message = "All tables valid")',
    'tableDS("D$menostat", NULL, NULL, "Post,Pre", NULL, NULL, NULL, "always", NULL)':
        'rvar <- factor(menostat, levels = c("Post", "Pre")); table(rvar, useNA = "always")',
    'tapplyDS("D$score", "D$menostat", "sd")':
        'names <- list(paste0("D$menostat.", levels(menostat))); s <- tapply(score, list(menostat), sd); '
        "n <- tapply(score, list(menostat), length); dimnames(s) <- names; dimnames(n) <- names; list(SD = s, N = n)",
}


@pytest.fixture(scope="module")
def opal_answers(gbsg2_http, gbsg2_provisioned) -> dict[str, dict[str, Any]]:
    with ds_session(gbsg2_http, gbsg2_provisioned) as session:
        return {call: session.aggregate(call) for call in DSBASE_VALUES}


@pytest.mark.parametrize("call", DSBASE_VALUES, ids=[c.split("(")[0] for c in DSBASE_VALUES])
def test_site_answers_equal_dsBase_values_through_jsonlite(opal_answers, gbsg2_frames, call):
    for site in GBSG2_SITES:
        frame = gbsg2_frames[site]
        want = r_json(R_SETUP + DSBASE_VALUES[call], **{c: frame[c].to_numpy() for c in frame.columns})
        got = opal_answers[call][site]
        if call.startswith("glmDS2"):  # dsBase's ten elements first; dsfed's extras follow
            got = first_elements(got, len(want["value"]))
        assert_same_json(got, want, f"{site}:{call}", digits_of(want))
