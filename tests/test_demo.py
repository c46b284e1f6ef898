"""`dsfed demo` (the README's first command, after installation) exits 0 and its --json parses."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def test_demo_runs_end_to_end(tmp_path, gbsg2_pooled):
    out = tmp_path / "demo.json"
    result = subprocess.run(
        [sys.executable, "-m", "dsfed_client.cli", "demo", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert data["n"]["pooled"] == len(gbsg2_pooled)
    assert abs(data["mean_age"]["pooled"] - gbsg2_pooled["age"].mean()) < 1e-12
    refused = data["refused_table"]["refused"]
    assert refused and all(r["rule"] == "disclosure.q_threshold" and r["function"] == "table2DDS" for r in refused)
    assert all(chain["ok"] for chain in data["audit"].values())
    assert "REFUSED" in result.stdout and "All sites stopped." in result.stdout
