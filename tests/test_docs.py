"""The docs cannot drift: docs/functions.md is what the registry generates now; docs/governance.md's
key tables are what the rules schema generates now, name every rules-file key with default.toml's
values, and the page explains every refusal rule a site can give; the README keeps its two commands
first and links every page."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from pydantic import BaseModel

from dsfed_server import functions  # noqa: F401  (registers the function set)
from dsfed_server.disclosure.rules import RulesFile
from dsfed_server.governance import rules_tables
from dsfed_server.registry import REGISTRY
from sitekit import ROOT

DOCS = ROOT / "docs"


def test_functions_page_is_what_the_registry_generates():
    generated = subprocess.run([sys.executable, "-m", "dsfed_client.cli", "docs", "functions"],
                               capture_output=True, text=True, timeout=120, cwd=ROOT, check=True).stdout
    committed = (DOCS / "functions.md").read_text(encoding="utf-8")
    assert committed == generated, (
        "docs/functions.md is out of date with the registry; regenerate it with "
        "`dsfed docs functions > docs/functions.md`"
    )


def test_governance_key_tables_are_what_the_rules_schema_generates():
    page = (DOCS / "governance.md").read_text(encoding="utf-8")
    keys, profiles = rules_tables(ROOT / "disclosure_rules" / "default.toml")
    rules_file, profile_section = page.split("## The rules file", 1)[1].split("### Profiles", 1)
    for table, section in ((keys, rules_file), (profiles, profile_section)):
        assert table in section, (
            "docs/governance.md's rules-key tables are out of date with the schema in "
            "dsfed_server/disclosure/rules.py; paste the tables `dsfed docs rules` prints in their place"
        )


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted paths of every leaf key of the rules-file schema (a profile's keys under profiles.NAME)."""
    keys = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        path = f"{prefix}{name}"
        if name == "profiles":
            annotation, path = annotation.__args__[1], "profiles.NAME"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += _leaf_keys(annotation, path + ".")
        else:
            keys.append(path)
    return keys


def test_governance_page_documents_every_rules_key():
    page = (DOCS / "governance.md").read_text(encoding="utf-8")
    keys = _leaf_keys(RulesFile)
    assert "disclosure.q_threshold" in keys and "profiles.NAME.disclosure.q_threshold" in keys
    missing = [key for key in keys if f"`{key}`" not in page]
    assert missing == [], f"docs/governance.md does not document: {missing}"


def test_governance_page_defaults_are_default_toml():
    """The 'default' column of the key table holds default.toml's values (TOML-readable cells only)."""
    page = (DOCS / "governance.md").read_text(encoding="utf-8")
    page = page.split("## The rules file", 1)[1].split("### Profiles")[0]
    defaults = tomllib.loads((ROOT / "disclosure_rules" / "default.toml").read_text())
    checked = 0
    for key, cell in re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \| ([^|]+) \|", page, flags=re.M):
        try:
            documented = tomllib.loads(f"v = {cell.strip().strip('`')}")["v"]
        except tomllib.TOMLDecodeError:
            continue  # prose, e.g. "the list in default.toml"
        section, name = key.split(".")
        assert documented == defaults[section][name], f"docs/governance.md: {key} default {cell.strip()}"
        checked += 1
    assert checked >= 15


def test_governance_page_explains_every_refusal_rule_the_code_can_give():
    """Every rules key the site's code names (as a refusal's rule or a function's check) is explained."""
    sources = "\n".join(p.read_text() for package in ("dsfed_server", "dsfed_core")
                        for p in (ROOT / package).rglob("*.py"))
    rules = set(re.findall(r'"([a-z_]+\.[a-z_]+)"', sources)) & set(_leaf_keys(RulesFile))
    rules |= {check for spec in REGISTRY for check in spec.checks} | {"profiles.NAME.enabled"}
    assert {"disclosure.q_threshold", "parser.max_depth", "functions.enabled", "privacy.epsilon"} <= rules
    page = (DOCS / "governance.md").read_text(encoding="utf-8")
    refusals = page.split("## What each refusal means", 1)[1]
    missing = sorted(rule for rule in rules if f"`{rule}`" not in refusals)
    assert missing == [], f"docs/governance.md does not explain the refusal rules {missing}"


def test_readme_keeps_the_two_commands_first():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make demo", "make test"]
    for page in ("analyst.md", "site-admin.md", "governance.md", "method.md", "functions.md"):
        assert f"docs/{page}" in readme
