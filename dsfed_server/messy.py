"""A messy-data corpus: hospital-like CSVs written the ways real exports write them (no real patients).

Each data set is three to five sites of unequal sizes (40 to 2,000 records) of one simulated
cohort, split at random, each site one CSV written as a different export would write it:

- missing values spelled ``NA`` (R's ``write.csv``), an empty field, ``NaN`` (pandas, Excel) or
  ``.`` (SAS, Stata), several spellings in one file;
- ``risk_score`` rounded to three decimals and ``old_score`` to two (ties), both probabilities;
- ``smoker`` a boolean as ``TRUE``/``FALSE`` (R) or ``True``/``False`` (pandas);
- ``sex`` with stray whitespace and case (``"F"``, ``"F "``, ``"f"``, ``" M"``);
- ``age`` with the missing-value code ``999`` in a few records (an out-of-range value);
- ``stage`` with a rare level (``IV``) and ``ward`` with a level a small site may lack;
- Windows line endings (``\\r\\n``) at some sites.

The outcome ``y`` follows a logistic model in age, sex, BMI, smoking and stage; ``risk_score`` is
that model's probability with a little miscalibration, ``old_score`` a weaker one. Everything is
deterministic by ``seed``. :func:`write_corpus` also returns the records as they are meant
(missing values as NaN, categories trimmed and upper-cased, codes kept as written), the
reference a test compares a site's answers with.

Run ``python -m dsfed_server.messy OUT [--seed S] [--dataset NAME]`` to write one to ``OUT``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

DATASETS: dict[str, tuple[int, ...]] = {
    "three_hospitals": (897, 690, 413),
    "five_unequal": (2000, 640, 180, 75, 40),
    "small": (120, 60, 40),
    "four_mid": (400, 260, 150, 90),
}
"""Site sizes of each corpus data set."""

NA_SPELLINGS = ("NA", "", "NaN", ".")
"""How the corpus writes a missing value (each site mixes them)."""

AGE_CODE = 999
"""The missing-value code some records hold in ``age`` (outside any real age)."""

COLUMNS = ("age", "sex", "bmi", "smoker", "stage", "ward", "y", "risk_score", "old_score")


@dataclass(frozen=True)
class MessySite:
    name: str
    csv: Path
    n: int
    crlf: bool  # written with Windows line endings
    truth: pd.DataFrame  # the records as meant: NaN for missing, categories trimmed and upper-cased


def cohort(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """``n`` clean records: the meaning of the corpus before any export mangles it."""
    age = np.clip(np.round(rng.normal(62, 12, n)), 18, 95)
    sex = rng.choice(["F", "M"], n, p=[0.55, 0.45])
    bmi = np.round(rng.normal(27, 4.5, n), 1)
    smoker = rng.random(n) < 0.28
    stage = rng.choice(["I", "II", "III", "IV"], n, p=[0.42, 0.34, 0.21, 0.03])
    ward = rng.choice(["surgery", "medicine", "oncology", "icu"], n, p=[0.45, 0.35, 0.17, 0.03])
    stage_effect = pd.Series(stage).map({"I": 0.0, "II": 0.5, "III": 1.1, "IV": 1.8}).to_numpy()
    eta = -4.2 + 0.035 * (age - 62) + 0.3 * (sex == "M") + 0.06 * (bmi - 27) + 0.5 * smoker + stage_effect + 1.6
    y = (rng.random(n) < special.expit(eta)).astype(np.int64)
    risk = special.expit(0.9 * eta + 0.1 + rng.normal(0, 0.3, n))
    old = special.expit(0.5 * eta - 0.4 + rng.normal(0, 0.8, n))
    return pd.DataFrame({"age": age, "sex": sex, "bmi": bmi, "smoker": smoker, "stage": stage, "ward": ward,
                         "y": y, "risk_score": np.round(risk, 3), "old_score": np.round(old, 2)})


def _missing(truth: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Missing values where exports lose them: a few per column, more in BMI and the scores."""
    truth = truth.astype({"age": "float64", "smoker": "object", "sex": "object"})
    n = len(truth)
    for column, rate in (("bmi", 0.04), ("risk_score", 0.02), ("old_score", 0.01), ("smoker", 0.01),
                         ("age", 0.005), ("sex", 0.005)):
        count = max(1, int(round(rate * n))) if n >= 100 or column in ("bmi", "risk_score") else 0
        rows = rng.choice(n, size=count, replace=False)
        truth.loc[rows, column] = np.nan
    return truth


def _written(truth: pd.DataFrame, rng: np.random.Generator, site: int) -> pd.DataFrame:
    """``truth`` as one export writes it: text in every cell."""
    n = len(truth)
    spellings = [NA_SPELLINGS[(site + k) % len(NA_SPELLINGS)] for k in range(2)]
    out = pd.DataFrame(index=truth.index)
    for column in COLUMNS:
        values = truth[column]
        if column == "age":
            text = values.map(lambda v: f"{int(v)}" if pd.notna(v) else None)
        elif column == "smoker":
            true, false = ("TRUE", "FALSE") if site % 2 == 0 else ("True", "False")
            text = values.map(lambda v: None if pd.isna(v) else (true if v else false))
        elif column == "bmi":
            text = values.map(lambda v: f"{v:.1f}" if pd.notna(v) else None)
        elif column in ("risk_score", "old_score"):
            digits = 3 if column == "risk_score" else 2
            text = values.map(lambda v, d=digits: f"{v:.{d}f}" if pd.notna(v) else None)
        else:
            text = values.map(lambda v: None if pd.isna(v) else str(v))
        missing = text.isna().to_numpy()
        alternate = np.array(spellings, dtype=object)[np.cumsum(missing) % 2]  # both spellings in each column
        out[column] = np.where(missing, alternate, text.fillna("").to_numpy())
    coded = rng.choice(n, size=max(1, n // 150), replace=False)
    out.loc[coded, "age"] = str(AGE_CODE)
    sex = out["sex"].to_numpy(dtype=object)
    variants = {"F": ("F ", "f", " F"), "M": (" M", "m", "M ")}
    for row in rng.choice(n, size=max(2, n // 60), replace=False):
        if sex[row] in variants:
            sex[row] = variants[sex[row]][int(rng.integers(3))]
    out["sex"] = sex
    return out


def _truth_with_codes(truth: pd.DataFrame, written: pd.DataFrame) -> pd.DataFrame:
    """The reference frame: as meant, with the age code kept where it is written (a site reads it)."""
    out = truth.copy()
    out.loc[written["age"] == str(AGE_CODE), "age"] = float(AGE_CODE)
    out["smoker"] = out["smoker"].astype("boolean")
    return out.reset_index(drop=True)


def write_corpus(out: Path, *, dataset: str = "three_hospitals", seed: int = 37) -> list[MessySite]:
    """Write ``out/<site>/patients.csv`` for each site of ``dataset`` (:data:`DATASETS`); returns
    the sites with the records as meant. Deterministic by ``seed``."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown corpus data set {dataset!r}; one of {sorted(DATASETS)}")
    sizes = DATASETS[dataset]
    rng = np.random.default_rng(seed)
    pooled = cohort(int(sum(sizes)), rng)
    bounds = np.cumsum((0, *sizes))
    sites = []
    for k, n in enumerate(sizes):
        part = _missing(pooled.iloc[bounds[k]:bounds[k + 1]].reset_index(drop=True), rng)
        written = _written(part, rng, k)
        name = f"hospital{k + 1}"
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        crlf = k % 2 == 1
        path = folder / "patients.csv"
        lines = [",".join(COLUMNS)] + [",".join(_quoted(v) for v in row) for row in written.itertuples(index=False)]
        path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode() + (b"\r\n" if crlf else b"\n"))
        sites.append(MessySite(name, path, n, crlf, _truth_with_codes(part, written)))
    return sites


def _quoted(value: str) -> str:
    """A CSV field: quoted when it holds whitespace at an end (as spreadsheet exports do)."""
    return f'"{value}"' if value != value.strip() else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dsfed_server.messy", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--dataset", default="three_hospitals", choices=sorted(DATASETS))
    parser.add_argument("--seed", type=int, default=37)
    args = parser.parse_args(argv)
    for site in write_corpus(args.out, dataset=args.dataset, seed=args.seed):
        print(f"{site.csv}: {site.n} records{' (CRLF)' if site.crlf else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
