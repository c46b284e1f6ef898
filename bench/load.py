"""Load: 20 honest analysts at once on three site processes, then the same with a login flood.

    .venv/bin/python bench/load.py                      # 20 analysts, 30 s per phase, 32 flooders
    .venv/bin/python bench/load.py --check-slots 64         # password checks not bounded
    .venv/bin/python bench/load.py --seconds 10 --analysts 5

Every analyst has an account of their own and, at every site, a session holding ``D``: the same
table, with variables of their own (``v_i``, ``v_{i+1}``, ``y``), so that a symbol seen across
sessions shows at once. Once all have logged in and assigned, each analyst loops over three
federated calls, each timed from the client: the column names of ``D`` (must be theirs), the
pooled mean of ``D$v_i`` (must be near 10 i: column k has mean 10 k) and the session's symbols
(must be theirs). The flood is password guessing by 32 clients from 8 other loopback addresses
(127.0.0.2 to .9), in a process of its own, against the analysts' own names and invented ones,
each as fast as it is answered. Prints per phase: calls, errors, leaks, median, p95 and p99
latency, and the flood's statuses.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing import Process, Queue
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dsfed_client import FederatedCallError, LoginBuilder, Ref  # noqa: E402
from dsfed_server.launch import LocalSites  # noqa: E402
from dsfed_server.provision import ProvisionedSite, provision  # noqa: E402
from sitekit import write_table  # noqa: E402  (tests/sitekit.py)

COLUMNS = 20  # v0 .. v19, column k ~ N(10 k, 1)
ROWS_PER_SITE = 200


@dataclass
class Phase:
    """What the honest analysts saw in one phase, and what the flood got."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    loops: Counter[str] = field(default_factory=Counter)
    flood: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> dict[str, object]:
        ms = sorted(t * 1e3 for t in self.latencies)
        quantile = (lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]) if ms else (lambda q: float("nan"))
        return {"calls": len(ms), "errors": len(self.errors), "leaks": len(self.leaks),
                "analysts_done": len(self.loops), "median_ms": round(statistics.median(ms), 1) if ms else None,
                "p95_ms": round(quantile(0.95), 1), "p99_ms": round(quantile(0.99), 1),
                "flood": dict(sorted(self.flood.items()))}


def make_sites(workdir: Path, analysts: int, n_sites: int = 3, check_slots: int | None = None
               ) -> dict[str, ProvisionedSite]:
    """Three sites of 200 records at the default rules; ``check_slots`` sets ``[login]
    concurrent_checks`` (default: the site's, half the cores)."""
    rng = np.random.default_rng(11)
    spec = {}
    for s in range(1, n_sites + 1):
        frame = pd.DataFrame({f"v{k}": rng.normal(10.0 * k, 1.0, ROWS_PER_SITE) for k in range(COLUMNS)})
        frame["y"] = rng.integers(0, 2, ROWS_PER_SITE).astype(float)
        write_table(workdir / "data" / f"site{s}", frame)
        spec[f"site{s}"] = (workdir / "data" / f"site{s}", ROOT / "disclosure_rules" / "default.toml")
    users = tuple((name(i), "analyst") for i in range(analysts)) + (("governance", "governance"),)
    sites = provision(workdir / "run", spec, users=users)
    if check_slots is not None:
        for site in sites.values():
            site.config.write_text(site.config.read_text() + f"\n[login]\nconcurrent_checks = {check_slots}\n")
    return sites


def name(i: int) -> str:
    return f"analyst{i:02d}"


def variables(i: int) -> list[str]:
    return [f"v{i % COLUMNS}", f"v{(i + 1) % COLUMNS}", "y"]


def analyst(i: int, sites: dict[str, ProvisionedSite], urls: dict[str, str], phase: Phase,
            ready: threading.Semaphore, go: threading.Event, stop: threading.Event) -> None:
    """One honest analyst: logs in and assigns (then says it is ready), and from ``go`` to ``stop``
    checks what every answer says about whose session it is."""
    builder = LoginBuilder()
    for site, url in urls.items():
        builder.append(site, url, user=name(i), password=sites[site].credentials[name(i)].password)
    own = variables(i)

    def timed(call, check) -> None:  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            result = call()
        except FederatedCallError as exc:
            with phase.lock:
                phase.errors.append(f"{name(i)}: {exc}")
            return
        elapsed = time.perf_counter() - start
        problem = check(result)
        with phase.lock:
            phase.latencies.append(elapsed)
            if problem:
                phase.leaks.append(f"{name(i)}: {problem}")

    try:
        session = builder.login()
        session.assign_table("D", "P.t", variables=own)
        session.assign(f"own{i}", Ref(f"D${own[0]}"))
    except FederatedCallError as exc:
        with phase.lock:
            phase.errors.append(f"{name(i)}: {exc}")
        return
    finally:
        ready.release()
    with session:
        go.wait()
        while True:  # one round at least, however late a busy machine wakes this thread
            timed(lambda: session.aggregate("colnamesDS", Ref("D")),
                  lambda r: next((f"columns {v}" for v in r.values() if list(v) != own), None))
            timed(lambda: session.mean(f"D${own[0]}"),
                  lambda m: None if abs(m.mean - 10.0 * (i % COLUMNS)) < 1.0 else f"mean {m.mean}")
            timed(lambda: session.symbols(),
                  lambda r: next((f"symbols {v}" for v in r.values()
                                  if sorted(s["name"] for s in v) != sorted(["D", f"own{i}"])), None))
            with phase.lock:
                phase.loops[name(i)] += 1
            if stop.is_set():
                break


def flooder(k: int, addresses: int, urls: dict[str, str], analysts: int, phase: Phase, stop: threading.Event) -> None:
    """Password guessing from 127.0.0.{k % addresses + 2}: a real analyst's name, then an invented one."""
    targets = [urlsplit(u) for u in urls.values()]
    source = f"127.0.0.{k % addresses + 2}"
    n = 0
    while not stop.is_set():
        target = targets[n % len(targets)]
        user = name(n % analysts) if n % 2 == 0 else f"nobody{secrets.token_hex(3)}"
        credentials = base64.b64encode(f"{user}:guess{n}".encode()).decode()
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30, source_address=(source, 0))
        try:
            connection.request("GET", "/v1/whoami", headers={"Authorization": f"Basic {credentials}"})
            status = connection.getresponse().status
        finally:
            connection.close()
        with phase.lock:
            phase.flood[status] += 1
        n += 1


def flood(addresses: int, flooders: int, urls: dict[str, str], analysts: int, seconds: float, out: Queue) -> None:
    """The flood, in a process of its own (the attacker's machine), for ``seconds``."""
    phase, stop = Phase(), threading.Event()
    threads = [threading.Thread(target=flooder, args=(k, addresses, urls, analysts, phase, stop))
               for k in range(flooders)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(120)
    out.put(dict(phase.flood))


def run_phase(sites: dict[str, ProvisionedSite], urls: dict[str, str], analysts: int, flooders: int,
              seconds: float, addresses: int = 8) -> Phase:
    """The analysts for ``seconds`` once all have logged in (threads of this process), with
    ``flooders`` guessing clients in another process if any."""
    phase, ready, go, stop, counts = Phase(), threading.Semaphore(0), threading.Event(), threading.Event(), Queue()
    threads = [threading.Thread(target=analyst, args=(i, sites, urls, phase, ready, go, stop))
               for i in range(analysts)]
    attacker = Process(target=flood, args=(addresses, flooders, urls, analysts, seconds, counts)) if flooders else None
    for thread in threads:
        thread.start()
    for _ in threads:  # every analyst logged in, with their symbols (or failed): the phase starts
        ready.acquire(timeout=120)
    go.set()
    if attacker is not None:
        attacker.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(120)
    if attacker is not None:
        phase.flood.update(counts.get(timeout=120))
        attacker.join(120)
    return phase


def run(workdir: Path, analysts: int, flooders: int, seconds: float, check_slots: int | None) -> dict[str, Phase]:
    """Both phases against the same three site processes."""
    sites = make_sites(workdir, analysts, check_slots=check_slots)
    with LocalSites(sites.values(), workdir / "proc") as local:
        quiet = run_phase(sites, local.urls, analysts, 0, seconds)
        flooded = run_phase(sites, local.urls, analysts, flooders, seconds)
    return {"analysts only": quiet, "analysts + login flood": flooded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--analysts", type=int, default=20)
    parser.add_argument("--flooders", type=int, default=32, help="guessing clients, from 8 addresses")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    parser.add_argument("--check-slots", type=int, default=None,
                        help="the sites' [login] concurrent_checks (default: theirs, half the cores)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        phases = run(Path(tmp), args.analysts, args.flooders, args.seconds, args.check_slots)
    for label, phase in phases.items():
        print(f"{label}: {json.dumps(phase.summary())}")
        for line in (phase.errors + phase.leaks)[:5]:
            print("   ", line)


if __name__ == "__main__":
    main()
