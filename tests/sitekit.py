"""Building small single-purpose sites for tests: a data frame, a rules variant, a service."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import pandas as pd
import requests
import uvicorn

from dsfed_client import Ref
from dsfed_client.errors import FederatedCallError
from dsfed_server.api import create_app
from dsfed_server.dictionary import Variable, write_dictionary
from dsfed_server.disclosure.checks import Guard
from dsfed_server.cli import _bind
from dsfed_server.provision import ProvisionedSite, provision
from dsfed_server.service import SiteService

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RULES = ROOT / "disclosure_rules" / "default.toml"
NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"

# One line of the access log as docs/deployment.md documents it: time (UTC), client address:port,
# user or ``-``, "METHOD path", status, duration.
ACCESS_LINE = re.compile(r'^(?P<time>\S+Z) (?P<address>\d+\.\d+\.\d+\.\d+):\d+ (?P<user>\S+) '
                         r'"(?P<method>[A-Z]+) (?P<path>\S+)" (?P<status>\d{3}) (?P<ms>\d+\.\d)ms$')


def rules_variant(path: Path, *, base: Path = DEFAULT_RULES, **changes: object) -> Path:
    """Copy ``base`` (default.toml unless given), replacing ``key = value`` lines (TOML-formatted
    values given as text); a key that is not in ``base`` exactly once fails the test."""
    text = base.read_text()
    for key, value in changes.items():
        text, n = re.subn(rf"(?ms)^{key} = (\[.*?\]|[^\n]*)$", f"{key} = {value}", text)
        assert n == 1, key
    path.write_text(text)
    return path


def approving(path: Path, models: dict[str, str], **changes: str) -> Path:
    """The no-noise rules approving ``models`` (name -> SHA-256), with other keys changed."""
    entries = ", ".join(f'{{ name = "{n}", sha256 = "{h}", note = "test" }}' for n, h in models.items())
    return rules_variant(path, base=NO_NOISE, approved=f"[{entries}]", **changes)


def dsfed(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The analyst's command line (``dsfed``) run as a process from the repository root."""
    return _run("dsfed_client.cli", args)


def dsfed_server(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The site's command line (``dsfed-server``) run as a process from the repository root."""
    return _run("dsfed_server.cli", args)


def _run(module: str, args: tuple[str | Path, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def write_table(data_dir: Path, frame: pd.DataFrame, *, project: str = "P", table: str = "t") -> None:
    folder = data_dir / project
    folder.mkdir(parents=True, exist_ok=True)
    booleans = [name for name, col in frame.items() if pd.api.types.is_bool_dtype(col)]
    written = frame.assign(**{name: frame[name].map({True: "TRUE", False: "FALSE"}) for name in booleans})
    written.to_csv(folder / f"{table}.csv", index=False)
    variables = []
    for name, col in frame.items():
        if name in booleans:  # declared boolean, written as R writes TRUE and FALSE
            variables.append(Variable(name, "boolean", "", name, ()))
        elif pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            # the test site declares the range its values can take: whole numbers around them
            declared = (float(np.floor(col.min())), float(np.ceil(col.max())))
            if declared[0] == declared[1]:
                declared = (declared[0], declared[0] + 1)
            kind = "integer" if pd.api.types.is_integer_dtype(col) else "decimal"
            variables.append(Variable(name, kind, "", name, (), declared if col.notna().any() else None))
        else:
            variables.append(Variable(name, "text", "", name, tuple(sorted(col.dropna().unique()))))
    write_dictionary(folder / f"{table}.dictionary.json", project, table, variables)


_MADE: list[SiteService] = []  # the services make_sites made, closed with their test module (conftest.py)


def close_made_sites() -> None:
    """Close the services :func:`make_sites` made (their DuckDB databases and threads, their files)."""
    while _MADE:
        _MADE.pop().close()


def make_sites(tmp: Path, frames: dict[str, pd.DataFrame], rules: Path | None = None,
               idle_timeout_s: float = 1800, max_body_mb: int = 256, catalog: dict[str, str | int] | None = None
               ) -> tuple[dict[str, ProvisionedSite], dict[str, SiteService]]:
    rules = rules or ROOT / "disclosure_rules" / "default.toml"
    spec = {}
    for name, frame in frames.items():
        write_table(tmp / "data" / name, frame)
        spec[name] = (tmp / "data" / name, rules)
    provisioned = provision(tmp / "run", spec, idle_timeout_s=idle_timeout_s, max_body_mb=max_body_mb,
                            catalog=catalog)
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    _MADE.extend(services.values())
    return provisioned, services


@contextmanager
def serve(service: SiteService) -> Iterator[str]:
    """``service`` (e.g. with a registry of the test's own) as a real uvicorn server on a free loopback
    port, in a thread; yields its URL."""
    sock = _bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def datashield_aggregate(url: str, auth: tuple[str, str], table: str, text: str, symbol: str = "D"
                         ) -> requests.Response:
    """``text`` sent through the DataSHIELD door (/ws) in a session of its own, with ``table``
    assigned as ``symbol``; the session is closed after."""
    ws = f"{url}/ws/datashield/session"
    opened = requests.post(f"{url}/ws/datashield/sessions", auth=auth, timeout=10).json()["id"]
    requests.put(f"{ws}/{opened}/symbol/{symbol}/table/{table}", params={"async": "false"}, auth=auth,
                 timeout=10).raise_for_status()
    answer = requests.post(f"{ws}/{opened}/aggregate", data=text, auth=auth, timeout=10,
                           headers={"Content-Type": "application/x-rscript", "Accept": "application/json"})
    requests.delete(f"{ws}/{opened}", auth=auth, timeout=10)
    return answer


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A report's ``to_dict()`` as ``path -> leaf``."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}.{key}").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{prefix}[{i}]").items()}
    return {prefix: value}


def assert_same_report(got: dict[str, Any], want: dict[str, Any]) -> int:
    """Every field equal, numbers to 1e-12 (relative, or absolute near zero); returns the numbers compared."""
    got, want = flat(got), flat(want)
    assert sorted(got) == sorted(want)
    numbers = 0
    for key, expected in want.items():
        actual = got[key]
        if isinstance(expected, (int, float)) and not isinstance(expected, bool):
            numbers += 1
            assert isinstance(actual, (int, float)), key
            if math.isnan(expected):
                assert math.isnan(actual), key
            else:
                assert actual == pytest.approx(expected, rel=1e-12, abs=1e-12), key
        else:
            assert actual == expected, key
    return numbers


def held_by(call: Callable[[], object]) -> tuple[int, int]:
    """The bytes a call leaves held, and its peak above what was held before it (tracemalloc: numpy
    reports its buffers to it)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        call()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before, peak - before


def cut_next_to_one_record(p: np.ndarray, subset: np.ndarray, gap: float = 0.0) -> tuple[float, float]:
    """Cuts t1 < t2 on predictions ``p`` with exactly one record between them, a record of ``subset``
    in the middle of the table's predictions, its neighbours more than ``gap`` away (records without
    a prediction, NaN, are left out)."""
    order = np.argsort(p)[: int(np.isfinite(p).sum())]
    s = p[order]
    k = next(k for k in range(order.size // 2, order.size - 1)
             if subset[order[k]] and s[k] - s[k - 1] > gap and s[k + 1] - s[k] > gap)
    return (s[k - 1] + s[k]) / 2, (s[k] + s[k + 1]) / 2


def site1_count_below(session: Any, symbol: str, cut: float) -> list[int | None]:
    """Site 1's ``countBelowDS(symbol, [cut])``: the count at or below ``cut``, or None where the
    release gate dropped the cut."""
    return np.atleast_1d(session.aggregate("countBelowDS", Ref(symbol), [cut])["site1"]["counts"]).tolist()


def kept_by_pattern(frame: pd.DataFrame, minimum: int = 5) -> pd.DataFrame:
    """The records of ``frame`` a site with a release history keeps: those missing nothing, and those whose
    pattern of missing values (which columns are missing) at least ``minimum`` records share -- worked out
    with pandas, independently of the site's code (docs/governance.md, "Missing values")."""
    missing = frame.isna()
    pattern = missing.apply(lambda row: "".join("1" if v else "0" for v in row), axis=1)
    shared = pattern.map(pattern.value_counts()) >= minimum
    return frame[shared | ~missing.any(axis=1)].reset_index(drop=True)


def whole_table_sum(session: Any, column: str) -> tuple[float | None, Any]:
    """The table ``P.t`` assigned whole as ``D`` and the sum of ``column`` over it released (``meanDS``'s mean
    times its count): the sum, or None with the site's failure where refused."""
    try:
        session.assign_table("D", "P.t")
        mean = next(iter(session.aggregate_expr(f"meanDS(D${column})").values()))
    except FederatedCallError as exc:
        return None, next(iter(exc.failures.values()))
    return mean["EstimatedMean"] * mean["Nvalid"], None


def exposed_shares_unaudited(patch: pytest.MonkeyPatch) -> None:
    """The red teams' control: no site audits its share of a span of pooled cells as a release alone where the
    others' releases expose it (``Guard._fails_alone`` finds no span failing), nor keeps it for a later subset
    (``Guard._record_exposed``)."""
    patch.setattr(Guard, "_fails_alone",
                  lambda self, cells, spans, candidates, rows, pooled: np.zeros(len(spans), bool))
    patch.setattr(Guard, "_record_exposed", lambda self, cells, spans, exposed, held, rows, parts=(): None)
