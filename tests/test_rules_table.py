"""Each rules key is declared once (type, bounds, which way a profile may move it, description),
and every key of the schema -- enumerated here from the pydantic models themselves -- is guarded by
the profile check (a profile may move it one way only, or cannot set it at all), is in
docs/governance.md's key tables and is explained by ``dsfed rules explain``. A key added to a
section without a direction stops the schema from loading."""

from __future__ import annotations

import copy
import tomllib
from typing import Annotated, Any, Literal, get_args, get_origin

import pytest
from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo

from dsfed_server.disclosure.rules import (
    FIXED, HIGHER, LOWER, Rules, RulesFile, _RulesSection, check_profiles, only, stricter,
)
from dsfed_server.governance import explain_rules
from dsfed_server.tomlfile import ConfigFileError
from sitekit import DEFAULT_RULES, ROOT

SHIPPED = tomllib.loads(DEFAULT_RULES.read_text())


def schema_keys() -> list[tuple[str, str, FieldInfo]]:
    """(section, key, declaration) of every rules-file key, read from the pydantic models."""
    return [(section, key, info) for section, field in Rules.model_fields.items()
            for key, info in field.annotation.model_fields.items()]


KEYS = schema_keys()
IDS = [f"{section}.{key}" for section, key, _ in KEYS]


def _choices(info: FieldInfo) -> tuple[Any, ...] | None:
    """Every value of a switch or a policy (None for other keys)."""
    if info.annotation is bool:
        return (True, False)
    if get_origin(info.annotation) is Literal:
        return get_args(info.annotation)
    return None


def _site(section: str, key: str, site: Any) -> dict[str, Any]:
    data = copy.deepcopy(SHIPPED)
    data[section][key] = site
    return data


def _valid(data: dict[str, Any]) -> bool:
    try:
        RulesFile.model_validate(data)
    except ValidationError:
        return False
    return True


def _profile_sets(section: str, key: str, site: Any, value: Any) -> str | None:
    """default.toml with ``site`` as the site's value and a profile setting ``value``: None if the
    site accepts the profile (which then applies the value), else why it refuses it."""
    data = _site(section, key, site)
    data["profiles"] = {"p": {"enabled": ["meanDS"], section: {key: value}}}
    try:
        rules = RulesFile.model_validate(data)
        check_profiles(rules, DEFAULT_RULES)
    except (ValidationError, ConfigFileError) as exc:
        return str(exc)
    assert getattr(getattr(rules.profile("p"), section), key) == value
    return None


@pytest.mark.parametrize("section,key,info", KEYS, ids=IDS)
def test_every_rules_key_is_guarded_by_the_profile_check(section: str, key: str, info: FieldInfo):
    """A profile either cannot set the key, or may move it one way and is refused the other way; the
    way it may is the direction the key declares."""
    shipped = SHIPPED[section][key]
    choices = _choices(info)
    if choices is not None:
        trials = {(site, value): _profile_sets(section, key, site, value) for site in choices for value in choices
                  if value != site and _valid(_site(section, key, site))}  # mechanism "none" needs a reason
    elif isinstance(shipped, (int, float)):
        step = 1 if info.annotation is int else shipped / 10
        trials = {(shipped, value): _profile_sets(section, key, shipped, value)
                  for value in (shipped + step, shipped - step)}
    else:  # text and lists: no way is stricter
        trials = {("shipped", "shipped"): _profile_sets(section, key, shipped, shipped)}
    refused = {trial: why for trial, why in trials.items() if why is not None}
    if stricter(info) == FIXED:
        assert refused == trials and all("Extra inputs are not permitted" in why for why in refused.values()), trials
        return
    accepted = [trial for trial in trials if trial not in refused]
    assert len(refused) == 1 and len(accepted) >= 1, trials
    assert all("a profile may only tighten the site's rules" in why for why in refused.values())
    (site, value), = accepted if choices is None else refused
    expected = (HIGHER if value > site else LOWER) if choices is None else only(site)
    assert stricter(info) == expected


def test_a_key_declared_without_a_direction_stops_the_schema():
    with pytest.raises(TypeError, match=r"Section\.new_key: a rules key declares one Stricter"):
        type("Section", (_RulesSection,), {"__annotations__": {"new_key": int},
                                            "new_key": Field(ge=1, description="a key without a direction")})
    assert type("Section", (_RulesSection,), {"__annotations__": {"new_key": Annotated[int, FIXED]},
                                              "new_key": Field(ge=1, description="declared")})


@pytest.mark.parametrize("section,key,info", KEYS, ids=IDS)
def test_every_rules_key_is_in_the_governance_page(section: str, key: str, info: FieldInfo):
    page = (ROOT / "docs" / "governance.md").read_text(encoding="utf-8")
    row = next((line for line in page.splitlines() if line.startswith(f"| `{section}.{key}` |")), None)
    assert row is not None, f"docs/governance.md has no row for {section}.{key}"
    assert f"| {stricter(info)} |" in row
    assert " ".join((info.description or "").split()).replace("|", "\\|").replace("*", "\\*") in row
    assert (f"| `profiles.NAME.{section}.{key}` |" in page) == (stricter(info) != FIXED)


@pytest.fixture(scope="module")
def explained() -> str:
    return explain_rules(DEFAULT_RULES)


@pytest.mark.parametrize("section,key,info", KEYS, ids=IDS)
def test_every_rules_key_is_in_rules_explain(explained: str, section: str, key: str, info: FieldInfo):
    block = " ".join(explained.split(f"\n[{section}]\n", 1)[1].split("\n[", 1)[0].split())
    shown = block.split(f" {key} = ", 1)
    assert len(shown) == 2, f"rules explain does not show {section}.{key}"
    description = " ".join((info.description or "").split())
    assert description in shown[1]
    note = shown[1][shown[1].index(description) + len(description):].lstrip().split(".)", 1)[0]
    assert note.startswith("(Allowed: ") and note.endswith(f"a profile may {stricter(info)}")
