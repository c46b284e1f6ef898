"""R serialization of the /ws door's values (dsfed_server/opal/rserialize.py) against R itself.

For every value shape the door returns, R's ``unserialize()`` of dsfed's bytes is ``identical()``
to the value R builds from R source, and, where R's own ``serialize()`` of that value uses no
compact (ALTREP) form, byte for byte equal to it past the header's writer version; a property-based
round trip (hypothesis) over random shapes checks the same with R source written from the shape by
an independent writer in this file. Then every dsBase call of test_opal_shapes.py is asked over HTTP
for R serialization (as R's DSOpal asks) and unserialized in R: the same R value as dsBase's,
built in R from the site's data (types, names, dims and classes identical, numbers to 1e-12)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import GBSG2_SITES
from dsfed_server import rbridge
from dsfed_server.opal.rserialize import serialize
from dsfed_server.rvalues import RArray, RDataFrame, RFactor, RList, RMatrix, RVector
from test_opal_shapes import DSBASE_VALUES, R_SETUP

HEADER_VERSION_FIELD = slice(6, 10)  # "X\n", format version (4 bytes), then the writer's R version


def _r() -> Any:
    return rbridge.robjects()


def r_call(function: str, *args: Any) -> Any:
    ro = _r()
    with rbridge.lock(), ro.default_converter.context():
        return ro.r(function)(*args)


def unserialized_identical(data: bytes, source: str) -> bool:
    """``identical(unserialize(data), <source>)`` in R."""
    ro = _r()
    with rbridge.lock(), ro.default_converter.context():
        check = ro.r("function(bytes, src) identical(unserialize(bytes), eval(parse(text = src), new.env()))")
        return bool(check(ro.vectors.ByteVector(data), ro.StrVector([source]))[0])


def r_serialized(source: str, version: int) -> bytes:
    ro = _r()
    with rbridge.lock(), ro.default_converter.context():
        out = ro.r("function(src, v) serialize(eval(parse(text = src), new.env()), NULL, version = v)")(
            ro.StrVector([source]), ro.IntVector([version]))
        return bytes(out)


# --- each shape the door writes, against R's own value ------------------------------------------

CASES: list[tuple[Any, str]] = [
    (None, "NULL"),
    (RVector([1.5, None, float("nan"), float("inf"), -0.25], type="double"), "c(1.5, NA, NaN, Inf, -0.25)"),
    (RVector([1.0, 2.0], names=["a", "b"]), "c(a = 1, b = 2)"),
    ([1, None, -2147483647], "c(1L, NA, -2147483647L)"),
    ([2**31], "2147483648"),  # beyond R's integers: a double
    ([True, None, False], "c(TRUE, NA, FALSE)"),
    (["a", None, "é", "中文", ""], 'c("a", NA, "\\u00e9", "\\u4e2d\\u6587", "")'),
    (42, "42L"),
    ("VALID ANALYSIS", '"VALID ANALYSIS"'),
    ([], "logical(0)"),
    (RVector([], type="character"), "character(0)"),
    ({"a": 1, "b": {"c": 2.5, "d": [True]}}, "list(a = 1L, b = list(c = 2.5, d = TRUE))"),
    ([{"a": 1}, "x"], 'list(list(a = 1L), "x")'),
    (RList([]), "list()"),
    (RList({"family": "binomial", "link": "logit"}, r_class="family"),
     'structure(list(family = "binomial", link = "logit"), class = "family")'),
    (RList([1.5], attributes={"note": "x"}), 'structure(list(1.5), note = "x")'),
    (RVector([1, 2], type="integer", attributes={"class": "foo"}), 'structure(c(1L, 2L), class = "foo")'),
    (RFactor([2, None, 1, 2], ["lo", "hi"]), 'factor(c("hi", NA, "lo", "hi"), levels = c("lo", "hi"))'),
    (RMatrix([[1.0, 3.0], [2.0, 4.0]]), "matrix(c(1, 2, 3, 4), 2)"),
    (RMatrix([[1.0, 3.0], [2.0, 4.0]], dimnames=(["r1", "r2"], ["c1", "c2"])),
     'matrix(c(1, 2, 3, 4), 2, dimnames = list(c("r1", "r2"), c("c1", "c2")))'),
    (RMatrix([[0.5], [1.5]], dimnames=(["x", "y"], None)),
     'matrix(c(0.5, 1.5), 2, 1, dimnames = list(c("x", "y"), NULL))'),
    ([[1, 2, 3]], "matrix(c(1L, 2L, 3L), 1)"),
    (RArray([3, 0, 2], [3], [["a", "b", "c"]], ["group"], r_class="table", type="integer"),
     'table(group = factor(c("a", "a", "a", "c", "c"), levels = c("a", "b", "c")))'),
    (RArray([1, 2, 3, 4], [2, 2], [["a", "b"], ["x", "y"]], ["r", "c"], r_class="table", type="integer"),
     'table(r = c("a", "b", "b", "a", "a", "a", "b", "b", "b", "b"), '
     'c = c("x", "x", "x", "y", "y", "y", "y", "y", "y", "y"))'),
    (RArray([1.5, 2.5], [2], [["p", "q"]], type="double"), 'array(c(1.5, 2.5), 2, list(c("p", "q")))'),
    (RDataFrame({"x": [1.0, 2.0], "y": ["a", None], "n": [1, 2]}),
     'data.frame(x = c(1, 2), y = c("a", NA), n = c(1L, 2L))'),
    (RDataFrame({"a": [1], "Total": [3]}, row_names=["r"]), 'data.frame(a = 1L, Total = 3L, row.names = "r")'),
    (RDataFrame({}), 'structure(list(), names = character(0), class = "data.frame", row.names = integer(0))'),
]


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("value,source", CASES, ids=[c[1][:48] for c in CASES])
def test_unserialize_gives_the_value_R_builds(value, source, version):
    data = serialize(value, version)
    assert unserialized_identical(data, source), (source, data.hex())


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("value,source", CASES, ids=[c[1][:48] for c in CASES])
def test_bytes_equal_Rs_serialize(value, source, version):
    """Byte for byte R's own ``serialize()``, but for the writer's R version in the header (the
    sources build no ALTREP sequence, which R would write in its compact form)."""
    want = r_serialized(source, version)
    got = serialize(value, version)
    assert got[:HEADER_VERSION_FIELD.start] == want[:HEADER_VERSION_FIELD.start]
    assert got[HEADER_VERSION_FIELD.stop:] == want[HEADER_VERSION_FIELD.stop:], (source, got.hex(), want.hex())


def test_empty_data_frame_is_Rs():
    """``data.frame()`` orders its attributes names, row.names, class: the same value."""
    assert unserialized_identical(serialize(RDataFrame({})), "data.frame()")


def test_table_attribute_order_is_Rs():
    """The two-way ``table`` above is R's: dim, dimnames (named), class, in that order."""
    ro = _r()
    with rbridge.lock(), ro.default_converter.context():
        names = list(ro.r('names(attributes(table(r = c("a", "b"), c = c("x", "y"))))'))
    assert names == ["dim", "dimnames", "class"]


def test_versions_and_refusals():
    assert serialize(None, 2).startswith(b"X\n\x00\x00\x00\x02")
    assert serialize(None, 3).startswith(b"X\n\x00\x00\x00\x03") and b"UTF-8" in serialize(None, 3)
    with pytest.raises(ValueError):
        serialize(None, 1)
    with pytest.raises(TypeError):
        serialize(RVector([1, "a"], type="integer"))
    with pytest.raises(ValueError):
        serialize(RVector([1.5], type="integer"))
    with pytest.raises(TypeError):
        serialize(object())


# --- random shapes: hypothesis writes the value and, independently, its R source ----------------

def r_double(x: float | None) -> str:
    if x is None:
        return "NA_real_"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return f"({float(x).hex()})"  # R reads C99 hexadecimal doubles exactly


def r_string(s: str | None) -> str:
    if s is None:
        return "NA_character_"
    return '"' + "".join(c if c.isascii() and c.isalnum() or c in " .,_-" else f"\\U{{{ord(c):x}}}" for c in s) + '"'


def r_atomic(values: list[Any], storage: str) -> str:
    if not values:
        return {"logical": "logical(0)", "integer": "integer(0)", "double": "numeric(0)",
                "character": "character(0)"}[storage]
    write = {"logical": lambda v: "NA" if v is None else ("TRUE" if v else "FALSE"),
             "integer": lambda v: "NA_integer_" if v is None else f"{v}L",
             "double": r_double, "character": r_string}[storage]
    return "c(" + ", ".join(write(v) for v in values) + ")"


def r_names(names: list[str] | None) -> str:
    return "NULL" if names is None else r_atomic(names, "character") if names else "character(0)"


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=6)
elements = {
    "logical": st.one_of(st.none(), st.booleans()),
    "integer": st.one_of(st.none(), st.integers(-(2**31) + 1, 2**31 - 1)),
    "double": st.one_of(st.none(), st.floats(allow_subnormal=False, width=64)),
    "character": st.one_of(st.none(), text),
}


@st.composite
def vectors(draw: st.DrawFn) -> tuple[Any, str]:
    storage = draw(st.sampled_from(sorted(elements)))
    values = draw(st.lists(elements[storage], max_size=5))
    named = draw(st.booleans()) and bool(values)
    names = draw(st.lists(text, min_size=len(values), max_size=len(values))) if named else None
    source = r_atomic(values, storage)
    if names is not None:
        source = f"structure({source}, names = {r_names(names)})"
    return RVector(values, names=names, type=storage), source


@st.composite
def factors(draw: st.DrawFn) -> tuple[Any, str]:
    levels = draw(st.lists(st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=4),
                           min_size=1, max_size=4, unique=True))
    codes = draw(st.lists(st.one_of(st.none(), st.integers(1, len(levels))), max_size=6))
    labels = [None if c is None else levels[c - 1] for c in codes]
    return RFactor(codes, levels), f"factor({r_atomic(labels, 'character')}, levels = {r_atomic(levels, 'character')})"


@st.composite
def matrices(draw: st.DrawFn) -> tuple[Any, str]:
    n_rows, n_cols = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    storage = draw(st.sampled_from(["integer", "double"]))
    rows = [draw(st.lists(elements[storage], min_size=n_cols, max_size=n_cols)) for _ in range(n_rows)]
    row_names = draw(st.one_of(st.none(), st.lists(text, min_size=n_rows, max_size=n_rows)))
    col_names = draw(st.one_of(st.none(), st.lists(text, min_size=n_cols, max_size=n_cols)))
    dimnames = None if row_names is None and col_names is None else (row_names, col_names)
    column_major = [rows[i][j] for j in range(n_cols) for i in range(n_rows)]
    source = f"matrix({r_atomic(column_major, storage)}, {n_rows}, {n_cols}"
    if dimnames is not None:
        source += f", dimnames = list({r_names(row_names)}, {r_names(col_names)})"
    if storage == "double" and any(v is not None for r in rows for v in r):
        return RMatrix(rows, dimnames=dimnames), source + ")"  # read as double from its float values
    return RArray(column_major, [n_rows, n_cols], list(dimnames) if dimnames else None, type=storage), source + ")"


@st.composite
def tables(draw: st.DrawFn) -> tuple[Any, str]:
    dims = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    n = math.prod(dims)
    counts = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    labels = [[f"l{k}" for k in range(d)] for d in dims]
    dim_names = draw(st.lists(st.text(st.characters(codec="ascii", categories=("L",)), min_size=1, max_size=3),
                              min_size=len(dims), max_size=len(dims), unique=True))
    dimnames = ", ".join(f"{r_string(nm)} = {r_atomic(lv, 'character')}" for nm, lv in zip(dim_names, labels))
    source = (f"structure({r_atomic(counts, 'integer')}, dim = {r_atomic(dims, 'integer')}, "
              f"dimnames = list({dimnames}), class = \"table\")")
    return RArray(counts, dims, labels, dim_names, r_class="table", type="integer"), source


@st.composite
def data_frames(draw: st.DrawFn) -> tuple[Any, str]:
    n = draw(st.integers(1, 4))
    names = draw(st.lists(st.text(st.characters(codec="ascii", categories=("L",)), min_size=1, max_size=3),
                          min_size=1, max_size=3, unique=True))
    parts = []
    for name in names:
        storage = draw(st.sampled_from(sorted(elements)))
        parts.append((name, draw(st.lists(elements[storage], min_size=n, max_size=n)), storage))
    row_names = draw(st.one_of(st.none(), st.lists(st.text(st.characters(codec="ascii", categories=("L",)),
                                                                   min_size=1, max_size=3),
                                                           min_size=n, max_size=n, unique=True)))
    body = ", ".join(f"{r_string(nm)} = {r_atomic(v, s)}" for nm, v, s in parts)
    rows = f".set_row_names({n}L)" if row_names is None else r_atomic(row_names, "character")
    source = f"structure(list({body}), class = \"data.frame\", row.names = {rows})"
    return RDataFrame({nm: RVector(v, type=s) for nm, v, s in parts}, row_names), source


leaves = st.one_of(vectors(), factors(), matrices(), tables())


def lists(children: st.SearchStrategy[tuple[Any, str]]) -> st.SearchStrategy[tuple[Any, str]]:
    @st.composite
    def build(draw: st.DrawFn) -> tuple[Any, str]:
        items = draw(st.lists(children, max_size=4))
        named = draw(st.booleans())
        r_class = draw(st.one_of(st.none(), st.sampled_from(["histogram", "family", "glmds"])))
        if named:
            keys = draw(st.lists(text, min_size=len(items), max_size=len(items)))
            value = RList(dict(zip(keys, (v for v, _ in items))), r_class=r_class)
            if len(set(keys)) < len(keys):  # a dict cannot hold repeated names: keep them unique
                return lists_fallback(items, r_class)
            body = ", ".join(src for _, src in items)
            source = f"structure(list({body}), names = {r_names(keys)}"
        else:
            value = RList([v for v, _ in items], r_class=r_class)
            source = f"structure(list({', '.join(src for _, src in items)})"
        source += f", class = {r_string(r_class)})" if r_class else ")"
        return value, source
    return build()


def lists_fallback(items: list[tuple[Any, str]], r_class: str | None) -> tuple[Any, str]:
    source = f"structure(list({', '.join(src for _, src in items)})"
    source += f", class = {r_string(r_class)})" if r_class else ")"
    return RList([v for v, _ in items], r_class=r_class), source


shapes = st.recursive(st.one_of(leaves, data_frames()), lists, max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, st.sampled_from([2, 3]))
def test_random_shapes_round_trip_through_R(shape, version):
    value, source = shape
    assert unserialized_identical(serialize(value, version), source), source


# --- every dsBase call's answer, asked as R's DSOpal asks, against dsBase's value built in R -----

R_SAME = """
skeleton <- function(x) {
  if (is.list(x)) { a <- attributes(x); y <- lapply(x, skeleton); attributes(y) <- a; y }
  else if (is.double(x)) { x[] <- 0; x } else x
}
same <- function(got, want) identical(skeleton(got), skeleton(want)) &&
  isTRUE(all.equal(got, want, tolerance = 1e-12))
"""


@pytest.fixture(scope="module")
def serialized_answers(gbsg2_http, gbsg2_provisioned) -> dict[str, dict[str, bytes]]:
    """Each call of DSBASE_VALUES at each site, answered in R's serialization (a session per site,
    D assigned as DSOpal assigns it: an application/x-opal body)."""
    out: dict[str, dict[str, bytes]] = {call: {} for call in DSBASE_VALUES}
    for site in GBSG2_SITES:
        cred = gbsg2_provisioned[site].credentials["analyst"]
        http = requests.Session()
        http.auth = (cred.user, cred.password)
        ws = f"{gbsg2_http.urls[site]}/ws/datashield"
        sid = http.post(f"{ws}/sessions", timeout=10).json()["id"]
        assigned = http.put(f"{ws}/session/{sid}/symbol/D", params={"async": "false"}, data="GBSG2.validation",
                            headers={"Content-Type": "application/x-opal"}, timeout=10)
        assert assigned.status_code == 200, assigned.text
        for call in DSBASE_VALUES:
            got = http.post(f"{ws}/session/{sid}/aggregate", data=call, timeout=30,
                            headers={"Content-Type": "application/x-rscript", "Accept": "application/octet-stream"})
            assert got.status_code == 200 and got.headers["content-type"] == "application/octet-stream", got.text
            out[call][site] = got.content
        http.delete(f"{ws}/session/{sid}", timeout=10)
    return out


@pytest.mark.parametrize("call", DSBASE_VALUES, ids=[c.split("(")[0] for c in DSBASE_VALUES])
def test_site_answers_unserialize_to_dsBase_values(serialized_answers, gbsg2_frames, call):
    ro = _r()
    for site in GBSG2_SITES:
        frame = gbsg2_frames[site]
        source = R_SETUP + DSBASE_VALUES[call]
        if call.startswith("glmDS2"):  # dsBase's ten elements first; dsfed's extras follow
            source = source + "\n"
        with rbridge.lock(), ro.default_converter.context():
            env = ro.Environment()
            for column in frame.columns:
                values = frame[column].to_numpy()
                env[column] = (ro.FloatVector(values.astype(float).tolist()) if values.dtype.kind in "iuf"
                               else ro.StrVector([str(v) for v in values]))
            ro.r["eval"](ro.r["parse"](text=R_SAME), envir=env)
            want = ro.r["eval"](ro.r["parse"](text=source), envir=env)
            got = ro.r["unserialize"](ro.vectors.ByteVector(serialized_answers[call][site]))
            if call.startswith("glmDS2"):
                got = ro.r("function(g, w) g[seq_along(w)]")(got, want)
            same = ro.r["eval"](ro.r["parse"](text="same"), envir=env)
            ok = bool(same(got, want)[0])
            if not ok:
                detail = "\n".join(ro.r("function(g, w) c(capture.output(str(g)), '--- want', "
                                        "capture.output(str(w)))")(got, want))
        assert ok, f"{site}: {call}\n{detail}"


R_SLMA = """
D <- data.frame(y = as.integer(y), score = score, age = as.integer(age))
f <- glm(y ~ score + age, family = binomial, data = D); s <- summary(f)
list(rank = f$rank, aic = f$aic, iter = f$iter, converged = f$converged, boundary = f$boundary,
     na.action = options("na.action"), contrasts = s$contrasts, aliased = s$aliased, dispersion = s$dispersion,
     data = NULL, df = s$df, Ntotal = nrow(D), Nvalid = nrow(D), Nmissing = 0L, cov.unscaled = s$cov.unscaled,
     cov.scaled = s$cov.scaled, offset = NULL, weights = NULL, VarCovMatrix = NA, CorrMatrix = NA,
     deviance.null = f$null.deviance, df.null = f$df.null, deviance.resid = f$deviance, df.resid = f$df.residual,
     formula = "y ~ score + age", family = structure(list(family = "binomial", link = "logit"), class = "family"),
     coefficients = s$coefficients)
"""


def test_glmSLMADS2_unserializes_to_dsBases_list(gbsg2_http, gbsg2_provisioned, gbsg2_frames):
    """dsBase's glmSLMADS2 list (summary.glm's pieces, but call and terms, which are R code), built in
    R from glm() on the site's data: types, names, dims and classes identical, numbers to 1e-12."""
    cred = gbsg2_provisioned["site2"].credentials["analyst"]
    http = requests.Session()
    http.auth = (cred.user, cred.password)
    ws = f"{gbsg2_http.urls['site2']}/ws/datashield"
    sid = http.post(f"{ws}/sessions", timeout=10).json()["id"]
    rscript = {"Content-Type": "application/x-rscript"}
    http.put(f"{ws}/session/{sid}/symbol/D", params={"async": "false"}, data="GBSG2.validation",
             headers={"Content-Type": "application/x-opal"}, timeout=10).raise_for_status()
    http.put(f"{ws}/session/{sid}/symbol/fit", params={"async": "false"}, headers=rscript, timeout=30,
             data='glmSLMADS.assign(y ~ score + age, "binomial", NULL, NULL, "D")').raise_for_status()
    got = http.post(f"{ws}/session/{sid}/aggregate", headers={**rscript, "Accept": "application/octet-stream"},
                    data='glmSLMADS2(y ~ score + age, "binomial", NULL, NULL, "fit", "D")', timeout=30)
    http.delete(f"{ws}/session/{sid}", timeout=10)
    assert got.status_code == 200, got.text
    frame = gbsg2_frames["site2"]
    ro = _r()
    with rbridge.lock(), ro.default_converter.context():
        env = ro.Environment()
        for column in ("y", "score", "age"):
            env[column] = ro.FloatVector(frame[column].astype(float).tolist())
        ro.r["eval"](ro.r["parse"](text=R_SAME), envir=env)
        want = ro.r["eval"](ro.r["parse"](text=R_SLMA), envir=env)
        value = ro.r["unserialize"](ro.vectors.ByteVector(got.content))
        same = bool(ro.r["eval"](ro.r["parse"](text="same"), envir=env)(value, want)[0])
        detail = "" if same else "\n".join(ro.r("function(g, w) c(capture.output(str(g)), '--- want', "
                                                "capture.output(str(w)))")(value, want))
    assert same, detail
