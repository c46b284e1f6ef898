"""20 analysts at once on three real site processes, then with 32 clients guessing passwords
(bench/load.py, 5 s per phase here; the benchmark runs 30 s and bench/RESULTS.md has its latency).

Every analyst holds ``D`` in their own session at every site, with variables of their own, and
checks each answer: the column names and symbols of their session, and the mean of their column.
A session mixed up with another's, an error, an analyst locked out by the flood, or an internal
fault in an audit log fails the test.
"""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import audit_records
from dsfed_server.audit import verify_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from load import make_sites, run_phase  # noqa: E402  (bench/load.py)

from dsfed_server.launch import LocalSites  # noqa: E402


def test_twenty_analysts_and_a_login_flood(tmp_path):
    sites = make_sites(tmp_path, analysts=20)
    for site in sites.values():  # 5 failed guesses per address and minute, not the default 20: the
        # throttle's 429 must come within the 5 s flood however fast this machine checks passwords
        # (one CI run of the default got 209 guesses from 8 addresses over 3 sites: 9 per address)
        site.config.write_text(site.config.read_text() + "\n[login]\nfailures_per_address = 5\n")
    with LocalSites(sites.values(), tmp_path / "proc") as local:
        quiet = run_phase(sites, local.urls, analysts=20, flooders=0, seconds=5)
        flooded = run_phase(sites, local.urls, analysts=20, flooders=32, seconds=5)
    for phase in (quiet, flooded):
        assert phase.errors == [], phase.errors[:3]
        assert phase.leaks == [], phase.leaks[:3]
        assert len(phase.loops) == 20, "every analyst got through at least one round of checks"
    # the flood was refused, and throttled: no guess got in, no guess broke anything
    assert set(flooded.flood) <= {401, 429} and flooded.flood[429] > 0, flooded.flood
    for site in sites.values():
        records = audit_records(site)
        assert [r for r in records if r["outcome"] == "internal_error"] == []
        assert verify_file(site.audit_log, site.secret).ok
