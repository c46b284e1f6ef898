"""dsBase's R result shapes for registry entries whose native JSON differs from them.

The Opal-compatible front door answers with the JSON ``jsonlite`` gives for
the R value dsBase returns; the native API keeps dsfed's own, simpler shapes.
Each adapter below maps an entry's native (JSON-ready) result to that R value
(:mod:`dsfed_server.rvalues`), so one implementation serves both front doors.
Pure functions: they reshape, they never compute or release anything new.
"""

from __future__ import annotations

from typing import Any

from dsfed_server.functions.contingency import NA_LEVEL
from dsfed_server.registry import REGISTRY
from dsfed_server.rvalues import RArray, RDataFrame, RList, RMatrix, RVector

VALID_TABLE = "valid Table"


def quantile_mean(native: dict[str, float]) -> RVector:
    """``quantileMeanDS``: a named numeric vector ``c("5%" = ..., ..., Mean = ...)``."""
    return RVector(list(native.values()), names=list(native))


def _without_na(labels: list[str]) -> list[int]:
    """Positions of the levels R's ``table()`` shows: the NA level (listed last, if present) is left out."""
    keep = list(range(len(labels)))
    return keep[:-1] if labels and labels[-1] == NA_LEVEL else keep


def table1d(native: dict[str, Any]) -> RList:
    """``table1DDS``: ``list(table = <1-row data.frame: a column per level, then Total>, message)``;
    the level counts are doubles (``as.numeric`` of the table), ``Total`` an integer (its ``sum``)."""
    keep = _without_na(native["levels"])
    columns: dict[str, RVector] = {native["levels"][i]: RVector([native["counts"][i]], type="double") for i in keep}
    columns["Total"] = RVector([sum(native["counts"][i] for i in keep)], type="integer")
    return RList({"table": RDataFrame(columns), "message": VALID_TABLE})


def table2d(native: dict[str, Any]) -> RList:
    """``table2DDS``: ``list(table = <data.frame of counts with Total row and column>, message)``.

    Rows are the levels of x (row names, then ``"Total"``), columns the levels
    of y, then ``"Total"``; the counts are doubles (``rbind`` with ``colSums``).
    """
    rows, cols = _without_na(native["rows"]), _without_na(native["cols"])
    counts = [[native["counts"][i][j] for j in cols] for i in rows]
    counts = [row + [sum(row)] for row in counts]
    counts.append([sum(column) for column in zip(*counts)] if counts else [0] * (len(cols) + 1))
    names = [native["cols"][j] for j in cols] + ["Total"]
    columns = {name: RVector([row[j] for row in counts], type="double") for j, name in enumerate(names)}
    return RList({"table": RDataFrame(columns, row_names=[native["rows"][i] for i in rows] + ["Total"]),
                  "message": VALID_TABLE})


def glm_check(native: dict[str, Any]) -> dict[str, Any]:
    """``glmDS1``: dsBase's elements, in dsBase's order (``ds.glm`` reads some by position).

    dsfed refuses an invalid model outright, so every ``*.invalid`` flag of an
    answer is the double 0 dsBase starts them at.
    """
    n_coef = len(native["coef.names"])
    zero = RVector([0.0], type="double")
    return {
        "dimX": RVector(native["dimX"], type="integer"),
        "coef.names": RVector(native["coef.names"], type="character"),
        "y.invalid": zero,
        "Xpar.invalid": RVector([0.0] * n_coef, type="double"),
        "w.invalid": zero,
        "o.invalid": zero,
        "glm.saturation.invalid": zero,
        "errorMessage": native["errorMessage"],
    }


def study_glm(native: dict[str, Any]) -> dict[str, Any]:
    """``glmSLMADS2``: dsBase's list (``summary.glm``'s pieces) with R's types: matrices with the
    coefficient names as dimnames, counts as integers, ``family`` a list of class ``family``."""
    names = native["coef.names"]

    def matrix(rows: list[list[float]], columns: list[str]) -> RArray:
        return RArray([row[j] for j in range(len(columns)) for row in rows], [len(rows), len(columns)],
                      [names, columns], type="double")

    integer = {key: RVector([native[key]], type="integer")
               for key in ("rank", "iter", "Ntotal", "Nvalid", "Nmissing", "df.null", "df.resid")}
    double = {key: RVector([native[key]], type="double")
              for key in ("aic", "dispersion", "deviance.null", "deviance.resid")}
    shaped = {
        **integer, **double,
        "converged": RVector([native["converged"]], type="logical"),
        "boundary": RVector([native["boundary"]], type="logical"),
        "na.action": RList({"na.action": native["na.action"]["na.action"]}),
        "contrasts": None,
        "aliased": RVector([native["aliased"][n] for n in names], names=names, type="logical"),
        "data": native["data"],
        "df": RVector(native["df"], type="integer"),
        "cov.unscaled": matrix(native["cov.unscaled"], names),
        "cov.scaled": matrix(native["cov.scaled"], names),
        "offset": native["offset"],
        "weights": native["weights"],
        "VarCovMatrix": RVector([None], type="logical"),
        "CorrMatrix": RVector([None], type="logical"),
        "formula": native["formula"],
        "family": RList({"family": native["family"], "link": native["link"]}, r_class="family"),
        "coefficients": matrix(native["coefficients"], native["coefficient.columns"]),
    }
    order = ("rank", "aic", "iter", "converged", "boundary", "na.action", "contrasts", "aliased", "dispersion",
             "data", "df", "Ntotal", "Nvalid", "Nmissing", "cov.unscaled", "cov.scaled", "offset", "weights",
             "VarCovMatrix", "CorrMatrix", "deviance.null", "df.null", "deviance.resid", "df.resid", "formula",
             "family", "coefficients")
    return RList({key: shaped[key] for key in order})


def correlation(native: dict[str, Any]) -> dict[str, Any]:
    """``corDS``: its matrices with the variables' names as dimnames (``x.val``, ``y.val`` for two
    vectors, a table's column names), counts as integers, sums as doubles, as dsBase builds them."""
    names = native["variables"]
    both = (names, names)

    def matrix(key: str, storage: str) -> RArray:
        rows = native[key]
        return RArray([row[j] for j in range(len(names)) for row in rows], [len(rows), len(names)], both,
                      type=storage)

    na_counts = native["na.counts"]
    column = na_counts["Number of NAs in each column"]
    casewise = na_counts["Number of NAs casewise"]
    return {
        "sums.of.products": matrix("sums.of.products", "double"),
        "sums": matrix("sums", "double"),
        "complete.counts": matrix("complete.counts", "integer"),
        "na.counts": {
            "Number of NAs in each column": RArray(column[0], [1, len(names)], [None, names], type="integer"),
            "Number of NAs casewise": RArray([row[j] for j in range(len(names)) for row in casewise],
                                             [len(names), len(names)], both, type="integer"),
        },
        "sums.of.squares": matrix("sums.of.squares", "double"),
        "class": native["class"],
    }


_GLM2_ORDER = ("family", "info.matrix", "score.vect", "numsubs", "dev", "Nvalid", "Nmissing", "Ntotal",
               "disclosure.risk", "errorMessage2")


def glm_parts(native: dict[str, Any]) -> dict[str, Any]:
    """``glmDS2``: dsBase's ten elements in dsBase's order, then dsfed's extras.

    ``info.matrix`` is a p x p matrix and ``score.vect`` (like ``xwz``) a p x 1
    matrix, as dsBase computes them with ``%*%``; ``family`` carries the data
    of R's family object (its name and link, with its class ``family``; R's function
    definitions are code, not data, and are not sent). The class makes Opal's R server send the
    answer in ``serializeJSON``'s typed form; dsBase's counts are integers, ``disclosure.risk`` a double.
    """
    names = native["coef.names"]
    shaped = {
        "family": RList({"family": native["family"], "link": native["link"]}, r_class="family"),
        "info.matrix": RMatrix(native["info.matrix"], dimnames=(names, names)),
        "score.vect": RMatrix([[s] for s in native["score.vect"]], dimnames=(names, None)),
    }
    shaped |= {key: RVector([native[key]], type="integer") for key in ("numsubs", "Nvalid", "Nmissing", "Ntotal")}
    shaped["disclosure.risk"] = RVector([native["disclosure.risk"]], type="double")
    out = {key: shaped.get(key, native.get(key)) for key in _GLM2_ORDER}
    for key, value in native.items():
        if key not in out and key not in ("family", "link"):
            out[key] = RMatrix([[v] for v in value]) if key == "xwz" else value
    return out


def _asked_breaks(released: list[float], merged: list[list[float]]) -> list[float]:
    """The breaks ``ds.histogram`` asked for, from a coarsened answer: every end of a requested bin
    not released as asked (``merged``) and every released break that lies inside none of those bins
    (a break the gate moved to a cut released before lies inside the requested bin it replaced)."""
    inside = [b for b in released if any(lo < b < hi for lo, hi in merged)]
    return sorted({*released, *(b for bin_ in merged for b in bin_)} - set(inside))


def on_breaks(released: list[float], counts: list[float], asked: list[float]) -> list[float]:
    """Counts of bins ``released`` spread over the bins ``asked`` in proportion to their overlap: a
    bin merged over m requested bins of equal width gives each 1/m of its count, so the histogram
    keeps the released density and its total, and sums bin by bin with other sites' histograms over
    the same breaks."""
    out = [0.0] * (len(asked) - 1)
    for (lo, hi), count in zip(zip(released[:-1], released[1:]), counts):
        for j, (a, b) in enumerate(zip(asked[:-1], asked[1:])):
            overlap = min(hi, b) - max(lo, a)
            if overlap > 0:
                out[j] += count * overlap / (hi - lo)
    return out


def histogram(native: dict[str, Any]) -> RList:
    """``histogramDS2``: ``list(histobject = <an object of class histogram>, invalidcells)``; the class
    makes Opal's R server send it in ``serializeJSON``'s typed form.

    Where bins were merged, the histogram object is still on the breaks asked for, since
    ``ds.histogram(type = "combine")`` adds the sites' counts bin by bin on the first site's breaks
    (a shorter vector would be recycled): a merged bin's count is spread over the requested bins it
    covers (:func:`on_breaks`; fractional counts, the released density), ``merged`` lists those bins
    as ``c(lower, upper)``, ``why`` gives the site's reason, and ``released`` holds the histogram as
    the site released it (its ``breaks`` and whole ``counts``)."""
    if "merged" not in native:
        return RList({"histobject": RList(native["histobject"], r_class="histogram"),
                      "invalidcells": RVector([native["invalidcells"]], type="double")})
    kept = native["histobject"]
    asked = _asked_breaks(kept["breaks"], native["merged"])
    counts = on_breaks(kept["breaks"], kept["counts"], asked)
    n, widths = sum(kept["counts"]), [b - a for a, b in zip(asked[:-1], asked[1:])]
    histobject = {"breaks": asked, "counts": counts, "density": [c / (n * w) for c, w in zip(counts, widths)],
                  "mids": [(a + b) / 2 for a, b in zip(asked[:-1], asked[1:])], "xname": kept["xname"],
                  "equidist": True}
    why = (f"{native['why']}; the histogram object is on the breaks asked for, each merged bin's count spread "
           "evenly over the bins it covers (ds.histogram's combine adds the sites' counts bin by bin); "
           "'released' holds the bins as released")
    return RList({"histobject": RList(histobject, r_class="histogram"),
                  "invalidcells": RVector([native["invalidcells"]], type="double"),
                  "merged": RList([RVector(b, type="double") for b in native["merged"]]),
                  "why": RVector([why], type="character"),
                  "released": RList({"breaks": RVector(kept["breaks"], type="double"),
                                     "counts": RVector(kept["counts"], type="double")})})


def mean_sd_by_group(native: dict[str, Any]) -> RList:
    """``meanSdGpDS``: 1-d arrays over the groups holding records, named by their level numbers;
    ``N_gp`` a ``table`` (``table(group)``), which makes Opal's R server send the typed form; after
    dsBase's elements, where some are withheld, ``withheld``: their level numbers (their figures NA)."""
    groups = native["groups"]
    one_d = {"dim": [len(groups)], "dimnames": [groups]}
    return RList({
        "Table_valid": RVector([native["Table_valid"]], type="logical"),
        "Mean_gp": RArray(native["Mean_gp"], type="double", **one_d),
        "StDev_gp": RArray(native["StDev_gp"], type="double", **one_d),
        "N_gp": RArray(native["N_gp"], dimnames_names=["group"], r_class="table", type="integer", **one_d),
        **{key: RVector([native[key]], type="integer") for key in ("Nvalid", "Nmissing", "Ntotal")},
        "Message": native["Message"],
        **({"withheld": RVector(native["withheld"], type="character")} if native["withheld"] else {}),
    })


def table(native: dict[str, Any]) -> RArray:
    """``tableDS``: R's ``table`` (an integer array with named dimnames, class ``table``)."""
    return RArray(native["counts"], native["dim"], native["dimnames"], native["names"], r_class="table",
                  type="integer")


def tapply(native: dict[str, Any]) -> RList:
    """``tapplyDS``: ``list(<Mean|SD|Sum> = <array>, N = <array>)`` with dsBase's dimnames."""
    shape = {"dim": native["dim"], "dimnames": native["dimnames"]}
    return RList({key: RArray(values, type="integer" if key == "N" else "double", **shape)
                  for key, values in native.items() if key not in ("dim", "dimnames")})


for _name, _adapter in {
    "histogramDS2": histogram,
    "quantileMeanDS": quantile_mean,
    "table1DDS": table1d,
    "table2DDS": table2d,
    "glmDS1": glm_check,
    "glmSLMADS1": glm_check,
    "glmSLMADS2": study_glm,
    "corDS": correlation,
    "glmDS2": glm_parts,
    "meanSdGpDS": mean_sd_by_group,
    "tapplyDS": tapply,
    "tableDS": table,
}.items():
    REGISTRY.set_opal_shape(_name, _adapter)
