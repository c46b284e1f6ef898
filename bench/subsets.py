"""What subsets, combined tables and views cost a site: bytes held after the call and peak bytes during it.

One in-process site of ``--n`` records (binormal design: y, score, x1, x2 as Parquet, the rules of
site1.toml, set for the method of Schalk et al. 2024), the analyst's calls measured with tracemalloc
(numpy reports its buffers to it) from the moment before the call:

- ``S <- dataFrameSubsetDS2(D, D$x1 > 0)``, ``S2 <- dataFrameSubsetDS2(S, S$score < 0.5)``: held
  should be the kept records' positions (4 bytes each), against a copy of the subset's columns;
- ``T <- dataFrameDS(D$x1, D$score, D$y)``: held should be nothing, against copies of its columns;
- ``V <- deriveDS(...)`` and ``P <- predictDS(D, "bench")`` (a logistic model of ``y ~ score + x1``
  the rules approve): held should be nothing, against the stored vector (8 bytes a record); and the
  price of a view, the time of ``meanDS`` of it against ``meanDS(D$score)`` of a stored column and
  against pooled numpy computing the same values; and one run of the demo's ONNX graph
  (``gbsg2-gbm``, 100 trees) over a million GBSG2 records in a fresh process, its time and peak
  resident memory: what every read of its predictions pays as a view (``[catalog] onnx_predictions
  = "view"``; by default they are stored);
- the peak above the start, against the bytes of the columns the call reads (against a bound of 3 x): a
  condition's column as the call sees it and the site table column whose cut history checks it;
- the same subset in pooled numpy (``frame[frame.x1 > 0]``) for time, in the same run.

    .venv/bin/python bench/subsets.py --n 10000000
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsfed_client import Call, LoginBuilder  # noqa: E402
from dsfed_client.models import upload_model  # noqa: E402
from dsfed_core.models import GLMModel  # noqa: E402
from dsfed_server.onnx_model import parse_onnx, probabilities  # noqa: E402
from dsfed_server.inprocess import in_process  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402
from dsfed_server.synthetic import write_sites  # noqa: E402

RULES = ROOT / "disclosure_rules" / "site1.toml"
MODEL = GLMModel("y ~ score + x1", "binomial", "logit", {"(Intercept)": -1.25, "score": 2.5, "x1": 0.75})
EXPRESSION = "log(D$x1^2 + 1) * 0.5 + D$score"


def approving(rules: Path, out: Path) -> Path:
    """Site 1's rules, approving :data:`MODEL` as "bench" as well."""
    text = rules.read_text()
    entry = f'approved = [\n    {{ name = "bench", sha256 = "{MODEL.sha256}", note = "bench/subsets.py" }},\n'
    assert text.count("approved = [\n") == 1
    out.write_text(text.replace("approved = [\n", entry))
    return out


def onnx_run(n: int) -> tuple[float, float, float]:
    """One run of the demo's ONNX graph over ``n`` records drawn from site 1's GBSG2 table, in this
    (fresh) process: its seconds, its peak resident memory above the start in MB (the graph's working
    tensors, onnxruntime's included, which tracemalloc does not see: Linux's VmHWM, reset to the
    resident set just before the run) and the MB of its input columns."""
    model = parse_onnx((ROOT / "opal_fixtures" / "models" / "gbsg2-gbm.onnx").read_bytes())
    table = pd.read_csv(ROOT / "opal_fixtures" / "site1" / "GBSG2" / "validation.csv")
    drawn = np.random.default_rng(1).integers(0, len(table), n)  # no n-row table: the inputs are the high mark
    columns = {spec.name: table[spec.name].to_numpy()[drawn] for spec in model.inputs}
    del drawn
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux 4.0 and later)
    before = _status_kb("VmRSS")
    start = time.perf_counter()
    probabilities(model, columns)
    seconds = time.perf_counter() - start
    return seconds, (_status_kb("VmHWM") - before) / 1024, sum(c.nbytes for c in columns.values()) / 1e6


def _status_kb(field: str) -> int:
    """A ``/proc/self/status`` figure, in kB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def pooled_views(frame: pd.DataFrame) -> None:
    """What the views compute, in pooled numpy."""
    b = MODEL.coefficients
    np.log(frame["x1"].to_numpy() ** 2 + 1) * 0.5 + frame["score"].to_numpy()
    1 / (1 + np.exp(-(b["(Intercept)"] + b["score"] * frame["score"].to_numpy() + b["x1"] * frame["x1"].to_numpy())))


def measured(call: Callable[[], Any]) -> tuple[float, int, int]:
    """Seconds, bytes held after ``call`` and its peak, both above what was held before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        call()
        seconds = time.perf_counter() - start
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return seconds, after - before, peak - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="records at the site")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_sites(work / "data", n_sites=1, n_per_site=args.n, design="binormal", seed=7, fmt="parquet")
        rules = approving(RULES, work / "rules.toml")
        provisioned = provision(work / "run", {"site1": (work / "data" / "site1", rules)})
        service = SiteService.from_config_file(provisioned["site1"].config)
        frame = pd.read_parquet(work / "data" / "site1" / "SYNTH" / "validation.parquet")
        cred = provisioned["site1"].credentials["analyst"]
        builder = LoginBuilder()
        builder.append_inprocess(in_process(service), user=cred.user, password=cred.password)
        with builder.login() as session:
            session.assign_table("D", "SYNTH.validation")
            upload_model(session, MODEL)
            session.aggregate("meanDS", "D$x1")  # the columns read before anything is measured
            session.aggregate("meanDS", "D$score")
            session.aggregate("meanDS", "D$y")
            first = frame[frame["x1"] > 0]
            column = 8 * args.n  # a float64 column of the table
            # call: (the call, what it makes in pandas, the bytes it reads: the condition's column as the
            # call sees it, and the site table column whose cut history the condition is checked in)
            calls = {
                "S <- subset of D (x1 > 0)": (Call("dataFrameSubsetDS2", "D", "D$x1", "0", 5), first, column),
                "S2 <- subset of S (score < 0.5)": (Call("dataFrameSubsetDS2", "S", "S$score", "0.5", 3),
                                                     first[first["score"] < 0.5], 8 * len(first) + column),
                "T <- dataFrameDS(D$x1, D$score, D$y)": (
                    Call("dataFrameDS", "D$x1,D$score,D$y", None, False, True, "D$x1,D$score,D$y", True, False),
                    frame[["x1", "score", "y"]], 3 * column),
                # a view reads two columns, x1 and score; what it would store is a float64 vector as x1 is
                f"V <- deriveDS({EXPRESSION})": (Call("deriveDS", EXPRESSION), frame["x1"], 2 * column),
                'P <- predictDS(D, "bench")': (Call("predictDS", "D", "bench", "response"), frame["x1"], 2 * column),
            }
            start = time.perf_counter()
            frame[frame["x1"] > 0]
            numpy_s = time.perf_counter() - start
            print(f"n = {args.n:,}; pooled numpy frame[frame.x1 > 0]: {numpy_s:.3f} s")
            print(f"{'call':48} {'s':>6} {'rows':>11} {'held MB':>9} {'copy MB':>9} {'read MB':>9} {'peak MB':>9} "
                  f"{'peak/read':>9}")
            for (label, (call, expected, read)), symbol in zip(calls.items(), ("S", "S2", "T", "V", "P")):
                seconds, held, peak = measured(lambda: session.assign(symbol, call))
                copy = int(np.sum(expected.memory_usage(index=False)))
                print(f"{label:48} {seconds:6.2f} {len(expected):11,} {held / 1e6:9.1f} {copy / 1e6:9.1f} "
                      f"{read / 1e6:9.1f} {peak / 1e6:9.1f} {peak / read:9.2f}")
            print("the price of a view: meanDS of it, computed when read, against a stored column's")
            for target in ("D$score", "V", "P"):
                seconds, held, peak = measured(lambda: session.aggregate("meanDS", target))
                print(f"  meanDS({target}): {seconds:.3f} s, peak {peak / 1e6:.1f} MB, held after {held / 1e6:.1f} MB")
            start = time.perf_counter()
            pooled_views(frame)
            print(f"  pooled numpy computing V and P: {time.perf_counter() - start:.3f} s")
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
                seconds, peak, inputs = child.submit(onnx_run, 1_000_000).result()
            print(f"  one run of the ONNX graph gbsg2-gbm over 1,000,000 records: {seconds:.2f} s, peak "
                  f"{peak:.0f} MB above its start (its input columns: {inputs:.0f} MB)")
        service.catalog.close()
    print(f"(numpy {np.__version__}, pandas {pd.__version__}; held: above the start, after the call; copy: the "
          f"pandas table it makes; peak/read: the call's peak above its start over the bytes of the columns it reads)")


if __name__ == "__main__":
    main()
