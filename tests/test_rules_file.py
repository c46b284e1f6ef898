"""Rules files: the shipped ones are valid and documented in place; a bad one stops
the server with file:line: reason."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dsfed_server.disclosure.rules import Rules, load_rules
from dsfed_server.tomlfile import ConfigFileError
from sitekit import ROOT, make_sites, rules_variant

RULE_FILES = sorted((ROOT / "disclosure_rules").glob("*.toml"))


@pytest.mark.parametrize("path", RULE_FILES, ids=[p.name for p in RULE_FILES])
def test_shipped_rules_are_valid_and_every_key_is_commented(path: Path):
    load_rules(path)
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines):
        if "=" in line and not line.lstrip().startswith(("#", '"')) and not line.startswith(" "):
            assert lines[number - 1].lstrip().startswith("#") or lines[number - 2].lstrip().startswith("#"), (
                f"{path.name}:{number + 1}: key without a comment explaining it"
            )


def test_default_is_conservative():
    rules = load_rules(ROOT / "disclosure_rules" / "default.toml")
    assert rules.disclosure.q_threshold >= 3  # at least DataSHIELD's nfilter.tab
    assert rules.disclosure.subset_min >= 3
    assert rules.disclosure.glm_saturation <= 0.33
    # a small bin is merged with a neighbour: every released bin still holds q records (the release gate)
    assert rules.bins.small_bin_policy == "merge"
    assert rules.privacy.mechanism != "none"


def test_every_schema_key_is_in_default_toml():
    data = tomllib.loads((ROOT / "disclosure_rules" / "default.toml").read_text())
    for section, model in Rules.model_fields.items():
        assert set(data[section]) == set(model.annotation.model_fields), section


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if line.startswith(needle))


@pytest.mark.parametrize(
    "change,needle,reason",
    [
        ({"q_threshold": "0"}, "q_threshold", "greater than or equal to 1"),
        ({"q_threshold": '"five"'}, "q_threshold", "valid integer"),
        ({"small_bin_policy": '"suppress"'}, "small_bin_policy", "'refuse' or 'merge'"),
        ({"glm_saturation": "1.5"}, "glm_saturation", "less than or equal to 1"),
        ({"subset_min": "5\nsubset_minimum = 3"}, "subset_minimum", "unknown key"),
        ({"enabled": '["meanDS", "evalDS"]'}, "enabled", "unknown function(s) evalDS"),
        ({"enabled": '["meanDS", "varDS", "meanDS"]'}, "enabled", "listed more than once: meanDS"),
        ({"mechanism": '"none"'}, "mechanism", "no_noise_acknowledged"),
    ],
)
def test_bad_rules_stop_the_server_with_file_line_reason(tmp_path, change, needle, reason):
    bad = rules_variant(tmp_path / "bad.toml", **change)
    line = _line_of(bad, needle)
    if needle == "mechanism":
        line = _line_of(bad, "[privacy]")
    with pytest.raises(ConfigFileError) as exc:
        make_sites(tmp_path, {"s": __import__("pandas").DataFrame({"x": [1.0] * 10})}, rules=bad)
    assert f"{bad}:{line}:" in str(exc.value)
    assert reason in str(exc.value)


def test_server_process_refuses_to_start_on_bad_rules(tmp_path):
    import pandas as pd

    good = rules_variant(tmp_path / "rules.toml")
    provisioned, _ = make_sites(tmp_path, {"s": pd.DataFrame({"x": [1.0] * 10})}, rules=good)
    rules_variant(good, q_threshold="-1")
    result = subprocess.run(
        [sys.executable, "-m", "dsfed_server.cli", "run", str(provisioned["s"].config)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert f"{good}:{_line_of(good, 'q_threshold')}:" in result.stderr
    assert "q_threshold" in result.stderr


def test_bad_toml_syntax_reports_line(tmp_path):
    bad = tmp_path / "syntax.toml"
    shipped = (ROOT / "disclosure_rules" / "default.toml").read_text()
    bad.write_text(shipped.replace("q_threshold = 5", "q_threshold = = 5"))
    with pytest.raises(ConfigFileError) as exc:
        load_rules(bad)
    assert f"{bad}:{_line_of(bad, 'q_threshold')}: not valid TOML" in str(exc.value)


def test_site_config_errors_name_file_and_line(tmp_path):
    from dsfed_server.config import load_site_config

    config = tmp_path / "site.toml"
    config.write_text(
        '[site]\nname = "s"\ndata_dir = "d"\nrules = "r.toml"\naudit_log = "a.jsonl"\n'
        "session_idle_timeout_s = 60\nmax_sessions_per_user = 2\nlisten_everywhere = true\n\n"
        '[listen]\nhost = "127.0.0.1"\nport = 0\n\n[[users]]\nname = "a"\nrole = "root"\npassword_hash = ""\n'
    )
    with pytest.raises(ConfigFileError) as exc:
        load_site_config(config)
    text = str(exc.value)
    assert f"{config.resolve()}:8: unknown key 'site.listen_everywhere'" in text
    assert f"{config.resolve()}:16: users.0.role" in text
