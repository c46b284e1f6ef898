"""Benchmark: the validation suite at a fixed total n spread over K = 2, 5, 10, 20, 50 sites,
over HTTP (one loopback server process per site) and in-process (every site in this process).

    .venv/bin/pip install -e '.[bench]'                                # psutil, once
    .venv/bin/python bench/sites_scaling.py                          # n = 1e6, K = 2..50, both modes
    .venv/bin/python bench/sites_scaling.py --n 100000 --http-max-k 10   # HTTP up to K = 10 only
    .venv/bin/python bench/sites_scaling.py --mode inprocess --k 2 5 10 20 50 --json scaling.jsonl

Data: the binormal design of ``dsfed synth`` (AUC 0.8, prevalence 0.3), n // K rows per site,
every site with the seed-000 privacy settings (disclosure_rules/site1.toml); the suite assigns
y and score only. A K whose HTTP sites would not fit in the available memory (psutil; about
``--site-mb`` MB per idle site process plus the site's data) is skipped, and the line says so.

For each K and mode: the wall time of ``validate(session, "D$y", "D$score")``, the round trips
per site (``session.transfer_stats()``), the mean time per round trip (wall / trips), and where
it goes. The sites do not return their compute time in their answers; a site process writes it
to its access log (the duration of each request, from the request's arrival to its answer sent,
dsfed_server/access_log.py), and an in-process site's time is measured around its HTTP app,
which the in-process transport runs without a socket (the request's JSON encoding and the
answer's decoding are counted as transport).
The client times each request. The requests of one round go to every site at once, so per round:

- site ms: the site time of the request that finished last (the slowest site bounds the round);
- transport ms: that round's span (first request sent to last answer received) minus site ms:
  HTTP, (de)serialisation, thread hand-over, and on this machine waiting for a core;
- client ms: wall / trips minus the mean span: the analysis' own work between rounds.

site + transport + client = ms/trip. Each K runs ``--repeat`` times (default 1); the best run
is shown.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsfed_client import LoginBuilder  # noqa: E402
from dsfed_client.analyses.suite import validate  # noqa: E402
from dsfed_client.session import FederatedSession  # noqa: E402
from dsfed_server.inprocess import InProcessTransport, in_process  # noqa: E402
from dsfed_server.launch import LocalSites  # noqa: E402
from dsfed_server.provision import ProvisionedSite, provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402
from dsfed_server.synthetic import write_sites  # noqa: E402
from suite import append_json  # noqa: E402  (bench/suite.py, beside this file)

MB = 1024 * 1024
RULES = ROOT / "disclosure_rules" / "site1.toml"


@dataclass
class Request:
    """One request as the client saw it, and the time the site spent on it."""

    site: str
    line: str  # "METHOD /v1/path", as the site's access log shows it
    function: str
    start: float
    end: float
    site_s: float = 0.0


def timed_requests(session: FederatedSession) -> dict[str, list[Request]]:
    """Time every request the session sends from now on, per site (the transport's own method,
    wrapped in place)."""
    log: dict[str, list[Request]] = {site: [] for site in session.transports}
    for site, transport in session.transports.items():
        send = transport.request

        def request(method: str, path: str, *args: Any, _send: Callable[..., Any] = send,
                    _log: list[Request] = log[site], _site: str = site, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _send(method, path, *args, **kwargs)
            finally:
                _log.append(Request(_site, f"{method} /v1{path}", kwargs.get("function", ""), start,
                                    time.perf_counter()))

        transport.request = request  # type: ignore[method-assign]
    return log


class TimedApp:
    """A site's app, timed: each request's time through it (the site's side of a request) is logged."""

    def __init__(self, app: Any, log: list[float]) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.log.append(time.perf_counter() - start)


def timed_dispatch(session: FederatedSession) -> dict[str, list[float]]:
    """Time every in-process site's handling of a request (its HTTP app, run without a socket), per site."""
    log: dict[str, list[float]] = {site: [] for site in session.transports}
    for site, transport in session.transports.items():
        if not isinstance(transport, InProcessTransport):
            raise TypeError(f"site {site}: not an in-process transport ({type(transport).__name__})")
        transport.app = TimedApp(transport.app, log[site])  # type: ignore[assignment]
    return log


_LINE = re.compile(r'"(\S+ \S+)" \d+ (\d+\.\d)ms$')


def access_durations(path: Path, requests: list[Request], wait_s: float = 5.0) -> list[float]:
    """The durations (seconds) the site's access log gives for ``requests``, its last requests.
    A site writes a line after sending the answer, so the last lines may come a moment late:
    wait until the log's last lines are these requests (method and path, in order)."""
    deadline = time.monotonic() + wait_s
    while True:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        parsed = [_LINE.search(line) for line in lines[-len(requests):]]
        if len(parsed) == len(requests) and all(
                m is not None and m.group(1) == r.line for m, r in zip(parsed, requests)):
            return [float(m.group(2)) / 1000 for m in parsed if m is not None]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path}: the last {len(requests)} lines are not the requests the client sent "
                               f"(last line: {lines[-1] if lines else '(none)'!r}); cannot pair them")
        time.sleep(0.05)


def access_log_path(site: ProvisionedSite) -> Path:
    """Where a provisioned site writes its access log (the default: next to its audit log)."""
    return site.audit_log.with_name(f"{site.name}-access.log")


def rounds(log: dict[str, list[Request]]) -> list[list[Request]]:
    """The requests grouped into rounds: the i-th request to each site, when every site got as many
    (an analysis asks all sites each round); otherwise by time (a round ends when all its requests
    were answered: the client sends the next round only then)."""
    counts = {len(requests) for requests in log.values()}
    if len(counts) == 1:
        return [list(group) for group in zip(*log.values())]
    out: list[list[Request]] = []
    end = float("-inf")
    for r in sorted((r for requests in log.values() for r in requests), key=lambda r: r.start):
        if r.start >= end:
            out.append([])
        out[-1].append(r)
        end = max(end, r.end)
    return out


def breakdown(wall: float, trips: int, log: dict[str, list[Request]]) -> dict[str, float]:
    """ms per trip and its split into site, transport and client (see the module docstring)."""
    grouped = rounds(log)
    spans, site, transport = [], [], []
    for group in grouped:
        span = max(r.end for r in group) - min(r.start for r in group)
        last = max(group, key=lambda r: r.end)
        spans.append(span)
        site.append(last.site_s)
        transport.append(span - last.site_s)
    n = len(grouped)
    slowest = max((r for rs in log.values() for r in rs), key=lambda r: r.site_s)
    return {"rounds": n, "ms_per_trip": 1000 * wall / trips, "site_ms": 1000 * sum(site) / n,
            "transport_ms": 1000 * sum(transport) / n, "client_ms": 1000 * (wall / trips - sum(spans) / n),
            "site_ms_mean_all": 1000 * sum(r.site_s for rs in log.values() for r in rs)
            / sum(len(rs) for rs in log.values()),
            "slowest": f"{slowest.function or slowest.line} {1000 * slowest.site_s:.0f} ms"}


def login(provisioned: dict[str, ProvisionedSite], *, urls: dict[str, str] | None = None,
          services: dict[str, SiteService] | None = None) -> LoginBuilder:
    """The analyst's login to every site, over HTTP (``urls``) or in-process (``services``)."""
    cred = provisioned[next(iter(provisioned))].credentials["analyst"]
    builder = LoginBuilder()
    for name in provisioned:
        if urls is not None:
            builder.append(name, urls[name], user=cred.user, password=cred.password)
        else:
            assert services is not None
            builder.append_inprocess(in_process(services[name]), user=cred.user, password=cred.password)
    return builder


def one_run(session: FederatedSession, provisioned: dict[str, ProvisionedSite], mode: str) -> dict[str, Any]:
    """validate() once, with every request timed; the HTTP sites' times from their access logs."""
    log = timed_requests(session)
    dispatch = timed_dispatch(session) if mode == "inprocess" else None
    before = session.transfer_stats()
    t0 = time.perf_counter()
    report = validate(session, "D$y", "D$score")
    wall = time.perf_counter() - t0
    after = session.transfer_stats()
    for name, requests in log.items():
        times = (dispatch[name] if dispatch is not None
                 else access_durations(access_log_path(provisioned[name]), requests))
        if len(times) != len(requests):
            raise RuntimeError(f"site {name}: {len(requests)} requests sent but {len(times)} site times "
                               f"({'dispatch' if dispatch is not None else 'access log'}); cannot pair them")
        for r, s in zip(requests, times):
            r.site_s = s
    # unwrap: the next run wraps afresh
    for transport in session.transports.values():
        del transport.request
        if dispatch is not None and isinstance(transport, InProcessTransport):
            transport.app = transport.app.app  # type: ignore[attr-defined]
    trips = max(after[s]["requests"] - before[s]["requests"] for s in after)
    return {"wall_s": wall, "trips": trips, "auc": report.discrimination.auc, "suite_mode": report.mode,
            **breakdown(wall, trips, log)}


def fits(k: int, n_per_site: int, site_mb: float) -> tuple[bool, str]:
    """Whether K site processes fit in the available memory (1 GiB kept free), and the figures."""
    need = k * (site_mb + 4 * n_per_site * 16 / MB) + 1024
    available = psutil.virtual_memory().available / MB
    return need <= available, f"needs ~{need:,.0f} MB, {available:,.0f} MB available"


def run_k(k: int, mode: str, n_total: int, workdir: Path, repeat: int) -> dict[str, Any]:
    n_per_site = n_total // k
    sites_dir = workdir / f"k{k}-data"
    if not sites_dir.exists():
        write_sites(sites_dir, n_sites=k, n_per_site=n_per_site, design="binormal", seed=7, fmt="parquet")
    provisioned = provision(workdir / f"k{k}-{mode}", {f"site{i}": (sites_dir / f"site{i}", RULES)
                                                        for i in range(1, k + 1)})
    runs = []
    extra: dict[str, Any] = {}
    if mode == "http":
        with LocalSites(provisioned.values(), workdir / f"k{k}-proc", start_timeout=60 + 5 * k) as local:
            extra["startup_s"] = max(p.ready_after or 0.0 for p in local.processes.values())
            with login(provisioned, urls=local.urls).login() as session:
                session.assign_table("D", "SYNTH.validation", variables=["y", "score"])
                runs = [one_run(session, provisioned, mode) for _ in range(repeat)]
            extra["rss_peak_mb"] = max(p.peak_rss() for p in local.processes.values()) / MB
    else:
        rss0 = psutil.Process().memory_info().rss
        services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
        with login(provisioned, services=services).login() as session:
            session.assign_table("D", "SYNTH.validation", variables=["y", "score"])
            runs = [one_run(session, provisioned, mode) for _ in range(repeat)]
        extra["rss_growth_mb"] = (psutil.Process().memory_info().rss - rss0) / MB
        del services
    best = min(runs, key=lambda r: r["wall_s"])
    return {"k": k, "mode": mode, "n": n_total, "n_per_site": n_per_site, **best, **extra}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="total rows over all sites")
    parser.add_argument("--k", type=int, nargs="*", default=[2, 5, 10, 20, 50], help="numbers of sites")
    parser.add_argument("--mode", choices=["http", "inprocess"], nargs="*", default=["http", "inprocess"])
    parser.add_argument("--http-max-k", type=int, default=None, help="over HTTP, skip K above this")
    parser.add_argument("--site-mb", type=float, default=360, help="an idle site process' memory, MB")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs per K")
    parser.add_argument("--json", type=Path, default=None, help="append one JSON object per K and mode")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    print(f"machine: {platform.node()} {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB; n = {args.n:,}; repeat {args.repeat}")
    print(f"{'K':>3} {'mode':>9} {'n/site':>8} {'wall s':>7} {'trips':>6} {'ms/trip':>8} {'site ms':>8} "
          f"{'transp ms':>9} {'client ms':>9} {'AUC':>7} {'suite':>7}  slowest call; memory")
    with tempfile.TemporaryDirectory(prefix="dsfed-scaling-") as tmp:
        for k in args.k:
            for mode in args.mode:
                if mode == "http" and args.http_max_k is not None and k > args.http_max_k:
                    print(f"{k:>3} {mode:>9}  skipped: K above --http-max-k {args.http_max_k}", flush=True)
                    continue
                if mode == "http":
                    ok, why = fits(k, args.n // k, args.site_mb)
                    if not ok:
                        print(f"{k:>3} {mode:>9}  skipped: {k} site processes would not fit ({why})", flush=True)
                        continue
                try:
                    r = run_k(k, mode, args.n, Path(tmp), args.repeat)
                except Exception as exc:  # one K failing says why and the others still run
                    print(f"{k:>3} {mode:>9}  failed: {type(exc).__name__}: {exc}", flush=True)
                    continue
                memory = (f"start-up {r['startup_s']:.1f} s, peak site RSS {r['rss_peak_mb']:.0f} MB"
                          if mode == "http" else f"process RSS +{r['rss_growth_mb']:.0f} MB")
                print(f"{k:>3} {mode:>9} {r['n_per_site']:>8,} {r['wall_s']:>7.2f} {r['trips']:>6} "
                      f"{r['ms_per_trip']:>8.1f} {r['site_ms']:>8.1f} {r['transport_ms']:>9.1f} "
                      f"{r['client_ms']:>9.1f} {r['auc']:>7.4f} {r['suite_mode']:>7}  {r['slowest']}; {memory}",
                      flush=True)
                append_json(args.json, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
