"""Two nested 0/1 columns summed at one site: the few records between them, read by a red team (a helper) at one
site of 24 records with the shipped rules (q = 5) before their records were audited as row sets.

Grade III holds 12 records, grade IV 2 (one an event); ``high`` is grade III or IV (14 records). No release names
grade IV, and each 0/1 column's records at each value are q or more; but sums over ``iii`` and over ``high`` differ
by grade IV's 2 records, their count and their events:

- one release, ``glmDS2(y ~ iii + high)`` at coefficients 0: its information matrix gives 14 - 12 records and its
  score 11 - 10 events (also with ``high`` padded by a negligible many-valued term, ``I(high + 1e-13*age)``);
- derived sums with no few-valued column (``D$y * D$high + D$age``, ``D$high + D$age``, less ``meanDS(D$age)``)
  beside the subset of grade III and its events, in either order.

Before the fix each route read grade IV's 2 records and their 1 event (the code before it passed every release
here). Now the records each summed 0/1 column, GLM dummy or derived column's 0/1 factor is over are audited as row
sets with every subset and cell of the table (rule ``disclosure.subset_min_difference``), and a GLM's two-valued
design columns (a derived variable's 0/1 factors among them) must differ and agree in 0 or at least q records, per
site and pooled (``disclosure.q_threshold``): 0 read. The GLM's control runs it with ``q_threshold = 2`` and
``subset_min_difference = 1`` (no pair of row sets too close) and reads 2, so what stops it is those rules; the
pooled fit has no control (the same fit on the code before read 2, 1 event); the derived sums' control, with ``cut_history = false`` (no release history, so no row set audited), reads 2
too: with the minimum at 1 the audit's span check still finds the event of grade IV alone (the events of ``high``
less those of grade III). Honest sums stay released: a prevalence of 2 in 24 (a rare value's count is what a table of the column
gives) and the events of a subset with 2 non-events.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from sitekit import ROOT, make_sites

SITE = "small"
N = 24
SUBSET = 'dataFrameSubsetDS2("D", "D$iii", "1", 1, NULL, NULL, FALSE)'


def _frames() -> dict[str, pd.DataFrame]:
    """24 records: grade III 12 (10 events), outside it 12 (2 events); grade IV (records 13, an event, and 20, not)
    lies outside grade III; ``high`` is grade III or IV, ``iv`` grade IV; ``e3`` the events within grade III."""
    rng = np.random.default_rng(41)
    iii = np.r_[np.ones(12, int), np.zeros(12, int)]
    y = np.r_[np.ones(10, int), 0, 0, 1, 1, np.zeros(10, int)]
    grade = np.where(iii == 1, "III", "I")
    grade[[13, 20]] = "IV"
    return {SITE: pd.DataFrame({"iii": iii, "grade": grade, "y": y, "high": (grade != "I").astype(int),
                                "iv": (grade == "IV").astype(int),
                                "e3": iii * y, "age": np.round(rng.uniform(30, 80, N), 1)})}


class _Site:
    def __init__(self, view):
        self.view = view

    def get(self, expr: str) -> dict | None:
        try:
            return self.view.aggregate_expr(expr)[SITE]
        except FederatedCallError as exc:
            print(f"  refused {expr}: {sorted({str(f.rule) for f in exc.failures.values()})}")
            return None

    def assign(self, name: str, expr: str) -> bool:
        try:
            self.view.assign_expr(name, expr)
            return True
        except FederatedCallError as exc:
            print(f"  refused {name} <- {expr}: {sorted({str(f.rule) for f in exc.failures.values()})}")
            return False

    def subset_events(self) -> int | None:
        """Grade III as a subset, and its events (meanDS)."""
        if not self.assign("S", SUBSET):
            return None
        m = self.get("meanDS(S$y)")
        return None if m is None else int(round(m["EstimatedMean"] * m["Nvalid"]))


def _rules(tmp_path: Path, control: str) -> Path | None:
    """The shipped rules, or for a control the same with one line changed."""
    if not control:
        return None
    text = (ROOT / "disclosure_rules" / "default.toml").read_text()
    for change in control.split("; "):
        line = change.split(" = ")[0] + " = "
        assert text.count(line) == 1
        text = re.sub(f"^{line}.*$", change, text, flags=re.M)
    path = tmp_path / "control.toml"
    path.write_text(text)
    return path


def _run(tmp_path: Path, steps, frames: dict[str, pd.DataFrame] | None = None, control: str = ""):
    provisioned, services = make_sites(tmp_path, frames or _frames(), _rules(tmp_path, control))
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        site = _Site(session.site_view(SITE))
        return [step(site) for step in steps]


@pytest.mark.parametrize("control", ["", "q_threshold = 2; subset_min_difference = 1"], ids=["shipped", "control"])
@pytest.mark.parametrize("term", ["high", "I(high + 1e-13*age)"])
def test_nested_design_columns_of_one_glm(tmp_path: Path, term: str, control: str):
    """glmDS2(y ~ iii + high, gaussian) at 0, nothing released before: iii (12 records) lies inside high (14). Its
    information matrix would give grade IV's count (14 - 12 = 2), its score grade IV's events (11 - 10 = 1)."""
    frames = _frames()
    small = frames[SITE]
    call = f'glmDS2(y ~ iii + {term}, "gaussian", "0,0,0", NULL, NULL, "D")'
    (out,) = _run(tmp_path, [lambda site: site.get(call)], frames, control)
    read = 0
    if out is not None:
        info, score = np.array(out["info.matrix"]), np.array(out["score.vect"])
        count, events = int(round(info[2, 2] - info[1, 1])), int(round(score[2] - score[1]))
        iv = small.grade == "IV"
        assert (count, events) == (int(iv.sum()), int(small.y[iv].sum())) == (2, 1)
        read = count
    print(f"\n{term}, {'control' if control else 'shipped'}: grade IV, {read} records read from one GLM")
    assert read == (2 if control else 0)


@pytest.mark.parametrize("control", ["", "cut_history = false"], ids=["shipped", "control"])
@pytest.mark.parametrize("sum_first", [False, True], ids=["subset-first", "sums-first"])
def test_a_product_inside_a_many_valued_column_beside_a_subset(tmp_path: Path, sum_first: bool, control: str):
    """Grade IV's 2 records and their events, no subset of them: Z = D$y * D$high + D$age and H = D$high + D$age
    (deriveDS; W = D$y * D$high alone, after the subset, is refused as a row set 3 records from it) take many
    values; meanDS(Z), meanDS(H) and meanDS(D$age) would give grade III or IV's events (11) and records (14); the
    subset of grade III its 10 events of 12 records: grade IV 2 records, 1 an event, in either order."""
    frames = _frames()

    def sums(site: _Site) -> tuple[int, int] | None:
        if not (site.assign("Z", "D$y * D$high + D$age") and site.assign("H", "D$high + D$age")):
            return None
        z, h, age = site.get("meanDS(Z)"), site.get("meanDS(H)"), site.get("meanDS(D$age)")
        if z is None or h is None or age is None:
            return None
        return (int(round((z["EstimatedMean"] - age["EstimatedMean"]) * N)),
                int(round((h["EstimatedMean"] - age["EstimatedMean"]) * N)))

    def grade_iii(site: _Site) -> tuple[int, int] | None:
        events = site.subset_events()
        return None if events is None else (events, 12)

    steps = [sums, grade_iii]
    high, iii = _run(tmp_path, steps if sum_first else steps[::-1], frames, control)[:: 1 if sum_first else -1]
    small = frames[SITE]
    iv = small.grade == "IV"
    read = 0
    if high is not None and iii is not None:
        events, count = high[0] - iii[0], high[1] - iii[1]
        assert (count, events) == (int(iv.sum()), int(small.y[iv].sum())) == (2, 1)
        read = count
    print(f"\n{'sums first' if sum_first else 'subset first'}, {'control' if control else 'shipped'}: grade IV, "
          f"{read} records read")
    assert read == (2 if control else 0)


def test_a_rare_values_count_and_a_subsets_events_are_released_as_a_table_gives_them(tmp_path: Path):
    """Honest sums of 0/1 columns under the shipped rules: the prevalence of grade IV (2 of 24) and, over the
    subset of grade III, the events (10 of 12: 2 non-events), each equal to the data's."""
    frames = _frames()
    small = frames[SITE]

    def steps(site: _Site) -> tuple[dict | None, int | None]:
        return site.get("meanDS(D$iv)"), site.subset_events()

    (got,) = _run(tmp_path, [steps], frames)
    prevalence, events = got
    assert prevalence is not None and prevalence["EstimatedMean"] * N == pytest.approx((small.grade == "IV").sum()) \
        == pytest.approx(2)
    assert events == int(small.y[small.iii == 1].sum()) == 10


def test_the_events_over_the_table_after_the_events_by_grade_tell_nothing_new_and_are_released(tmp_path: Path):
    """The events of each value of ``iii`` (tapplyDS: 2 of 12 and 10 of 12), then over the table (meanDS): the
    records of the outcome's ones lie 2 records from those within grade III, but their sum is the two groups' sum,
    already released: released, equal to the data's."""
    frames = _frames()
    small = frames[SITE]

    def steps(site: _Site) -> tuple[dict | None, dict | None]:
        assert site.assign("G", 'asFactorDS2("D$iii", "0,1", FALSE, 1)')
        return site.get('tapplyDS("D$y", "G", "sum")'), site.get("meanDS(D$y)")

    (got,) = _run(tmp_path, [steps], frames)
    by_grade, overall = got
    assert by_grade is not None and overall is not None
    assert sorted(np.ravel(by_grade["Sum"]).tolist()) == sorted(small.groupby("iii").y.sum().tolist()) == [2, 10]
    assert overall["EstimatedMean"] * N == pytest.approx(small.y.sum())


def _pooled_frames() -> dict[str, pd.DataFrame]:
    """Three sites of 24 records as the one above (other ages and outcomes outside grade IV), grade IV's 2 records
    at the first (1 an event) and none elsewhere: pooled, grade III holds 36 records, grade IV 2."""
    frames = {}
    for k, name in enumerate(("a", "b", "c")):
        frame = _frames()[SITE]
        if k:  # grade I where the first site has grade IV
            frame.loc[frame.grade == "IV", ["grade", "high", "iv"]] = ["I", 0, 0]
        frame["age"] = np.round(np.random.default_rng(k).uniform(30, 80, N), 1)
        frames[name] = frame
    return frames


@pytest.mark.parametrize("term", ["high", "I(high + 1e-13*age)"])
def test_nested_design_columns_of_one_pooled_glm(tmp_path: Path, term: str):
    """The pooled Gaussian fit ``y ~ iii + high`` over three sites (secure aggregation): its design holds grade
    IV's 2 records apart (high less iii), so ``(Intercept) + high`` is their mean outcome and the unscaled variance
    of that sum their number. Before the fit checked how many records two 0/1 columns differ in, pooled, the analyst
    read both (2 records, 1 event), also with ``high`` padded by a negligible many-valued term; now refused before
    any sum is released."""
    from dsfed_client.analyses.glm import ds_glm

    frames = _pooled_frames()
    provisioned, services = make_sites(tmp_path, frames)
    read, why = 0, ""
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        try:
            fit = ds_glm(session, f"y ~ iii + {term}", "D", family="gaussian", secure=True, null_model=False)
        except FederatedCallError as exc:
            why = sorted({str(f.rule) for f in exc.failures.values()})
        else:
            names = list(fit.names)
            i, h = names.index("(Intercept)"), names.index(term)
            v = fit.cov_params_ / fit.dispersion
            count = int(round(1 / (v[i, i] + v[h, h] + 2 * v[i, h])))
            events = int(round(count * (fit.params.iloc[i] + fit.params.iloc[h])))
            pooled = pd.concat(frames.values())
            iv = pooled.grade == "IV"
            assert (count, events) == (int(iv.sum()), int(pooled.y[iv].sum())) == (2, 1)
            read = count
    print(f"\npooled y ~ iii + {term}: grade IV, {read} records read {why}")
    assert read == 0 and why == ["disclosure.q_threshold"]


def _coded_frames() -> dict[str, pd.DataFrame]:
    """The site above with three more columns: ``x`` 1 but at records 3 and 7 (0), ``sex`` coded 1/2 with 2 at
    records 5 and 9, and two rare 0/1 columns without a record in common, ``a`` at records 1, 2 and ``b`` at 10, 11."""
    frame = _frames()[SITE]
    frame["x"] = np.where(np.isin(np.arange(N), [3, 7]), 0, 1)
    frame["sex"] = np.where(np.isin(np.arange(N), [5, 9]), 2, 1)
    frame["a"] = np.isin(np.arange(N), [1, 2]).astype(int)
    frame["b"] = np.isin(np.arange(N), [10, 11]).astype(int)
    return {SITE: frame}


@pytest.mark.parametrize("factor, few", [("D$x", [3, 7]), ("D$sex", [5, 9])], ids=["0/1 but 2", "coded 1/2"])
def test_a_product_with_a_two_valued_column_less_the_table_reads_nothing(tmp_path: Path, factor: str, few: list[int]):
    """``D$age*D$x`` with ``x`` 0 at 2 of 24 records, and ``D$age*D$sex`` with ``sex`` 2 at 2 (a + (b - a) times an
    indicator), beside ``meanDS(D$age)``: the sum of the 2 records' ages (found by a review of the first version of
    this audit, which compared a 0/1 factor's records with the table as it does a column's own values, and read
    both as ones). Now the product's sum is refused: 0 read."""
    frames = _coded_frames()
    small = frames[SITE]

    def steps(site: _Site) -> float | None:
        age = site.get("meanDS(D$age)")
        if age is None or not site.assign("W", f"D$age*{factor}"):
            return None
        product = site.get("meanDS(W)")
        return None if product is None else (product["EstimatedMean"] - age["EstimatedMean"]) * N

    (got,) = _run(tmp_path, [steps], frames)
    truth = float(small.age.iloc[few].sum())
    read = 0
    if got is not None:
        assert abs(got) == pytest.approx(truth, abs=1e-6)
        read = len(few)
    print(f"\n{factor}: {read} records' summed age read (truth {truth:.1f})")
    assert read == 0


def test_two_rare_values_of_two_columns_without_a_record_in_common_are_both_released(tmp_path: Path):
    """``a`` and ``b`` each 1 at 2 records, none in common: their prevalences (2 in 24 each) are released one after the
    other; the records where neither is 1 differ by 4, whose number the two counts already give."""
    frames = _coded_frames()
    small = frames[SITE]
    (got,) = _run(tmp_path, [lambda site: (site.get("meanDS(D$a)"), site.get("meanDS(D$b)"))], frames)
    assert got[0] is not None and got[1] is not None
    assert (got[0]["EstimatedMean"] * N, got[1]["EstimatedMean"] * N) == pytest.approx((small.a.sum(), small.b.sum()))
