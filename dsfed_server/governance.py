"""What a site's governance board reads: its rules file explained (its audit log summarised is
:mod:`dsfed_server.audit_summary`).

The explanation of every rules-file key comes from one place, its declaration in
:mod:`dsfed_server.disclosure.rules` (type, bounds, which way a profile may move it,
description); this module only lays them out, for ``dsfed rules explain`` and for the key
tables of docs/governance.md (``dsfed docs rules``). Checking a rules file runs exactly the
validation a site runs at start (:func:`~dsfed_server.disclosure.rules.load_rules` and
:func:`~dsfed_server.service.check_enabled`).
"""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from dsfed_server.disclosure.rules import (
    FIXED, TIGHTENED_SECTIONS, Profile, Rules, RulesFile, load_rules, rule_fields, stricter,
)
from dsfed_server.registry import REGISTRY, Registry

WIDTH = 88


# --- rules files ------------------------------------------------------------------------


def check_rules(path: str | Path, registry: Registry = REGISTRY) -> RulesFile:
    """Validate a rules file as a site does at start; raise ``ConfigFileError`` (file:line: reason)."""
    from dsfed_server.service import check_enabled  # noqa: PLC0415  (loads the function set: slow)

    rules = load_rules(path)
    check_enabled(rules, Path(path), registry)
    return rules


def weak_settings(rules: Rules) -> list[str]:
    """Settings a board should not sign without a reason: each line names the key, its value and
    the usual bound (q of at least 3, epsilon of at most 10 per query, delta well below 1/n)."""
    warnings = []
    if rules.disclosure.q_threshold < 3:
        warnings.append(f"disclosure.q_threshold = {rules.disclosure.q_threshold}: a released count may rest on "
                        "one or two records (DataSHIELD's default nfilter.tab is 3; the ROC-GLM paper's analysis "
                        "uses 5)")
    if not rules.noise_off and rules.privacy.epsilon > 10:
        warnings.append(f"privacy.epsilon = {rules.privacy.epsilon:g}: above 10 per query the noise protects "
                        "little (e^10 = 22026 is the factor by which one record may change any outcome's odds)")
    if not rules.noise_off and rules.privacy.delta > 1e-3:
        warnings.append(f"privacy.delta = {rules.privacy.delta:g}: delta should be well below 1/n; this is above "
                        f"1/n for every table of more than {int(1 / rules.privacy.delta)} records")
    return warnings


def summary(rules: RulesFile) -> list[str]:
    """One paragraph a board member reads first: what the file lets an analyst see."""
    noise = ("no noise (a test file)" if rules.noise_off else
             f"noise with epsilon {rules.privacy.epsilon:g} and delta {rules.privacy.delta:g} per query, at most "
             f"epsilon {rules.budget.epsilon_per_table:g} per table for all analysts together")
    return wrap(f"In short: an analyst may run {len(rules.functions.enabled)} functions and sees only summaries "
                 f"of at least {rules.disclosure.q_threshold} records; prediction scores leave the site only with "
                 f"{noise}; {len(rules.models.approved)} approved model(s); every call is in the audit log.", 0)


def wrap(text: str, indent: int) -> list[str]:
    """``text`` with its whitespace collapsed, wrapped to :data:`WIDTH` columns and indented by
    ``indent`` spaces (the layout of the governance and audit-summary reports)."""
    return textwrap.wrap(" ".join(text.split()), WIDTH, break_on_hyphens=False, initial_indent=" " * indent,
                         subsequent_indent=" " * indent)


def _value(value: Any) -> str:
    """A key's value as the rules file writes it (a function list by its length)."""
    if isinstance(value, tuple):
        return f"{len(value)} functions"
    if isinstance(value, (str, bool)):
        return json.dumps(value)
    return repr(value)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def allowed(info: FieldInfo) -> str:
    """The values a rules key takes, read from its declared type and bounds
    (``"an integer from 1 to 1000"``, ``"true or false"``)."""
    kind = info.annotation
    if kind is bool:
        return "true or false"
    if get_origin(kind) is Literal:
        return " or ".join(json.dumps(v) for v in get_args(kind))
    if kind is str:
        return "text"
    if get_origin(kind) is tuple:
        return "a list of strings" if get_args(kind)[0] is str else "a list of tables"
    name = "an integer" if kind is int else "a number"
    bound = {attr: getattr(m, attr) for m in info.metadata if isinstance(m, (Ge, Gt, Le, Lt))
             for attr in ("ge", "gt", "le", "lt") if hasattr(m, attr)}
    if "ge" in bound and "le" in bound:
        return f"{name} from {_number(bound['ge'])} to {_number(bound['le'])}"
    words = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}
    limits = " and ".join(f"{words[attr]} {_number(value)}" for attr, value in bound.items())
    return f"{name} {limits}".rstrip()


# a parenthesis (one level of nesting inside) that cites one of the papers dsfed implements:
# "(Schalk et al. 2024, eqs. 1-2; DeLong 1988)"
_CITATION = re.compile(r"\s*\((?:[^()]|\([^()]*\))*"
                       r"\b(?:Schalk|Huang|Wu et al\.|Xu & Cormode|Matthews & Harel)(?:[^()]|\([^()]*\))*\)")
# the few technical words a function list cannot avoid, said once in plain words
GLOSSARY = (
    "placement value: for one record, the share of the other class's scores that its own score "
    "exceeds; the AUC is their mean (DeLong 1988)",
    "ROC-GLM: the ROC curve fitted as a regression on those placement values",
)


def _summary(doc: str) -> str:
    """A function's doc up to its first full stop before a capital letter, or its first formula."""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    paragraph = re.split(r"\.\s+(?=[A-Z])|:math:", paragraph, maxsplit=1)[0]
    paragraph = _CITATION.sub("", paragraph)  # a board reads what a function does, not which paper it follows
    return re.sub(r":\w+:`([^`]*)`", r"\1", paragraph).replace("``", "").rstrip(".,:; ")


def _explain_section(name: str, section: BaseModel, description: str | None,
                     site: BaseModel | None = None) -> list[str]:
    """One ``[name]`` table: each key set in it, its value and its description.

    For a profile's override table, ``site`` is the site's own section: keys the
    profile leaves unset are skipped, and each set key shows the site's value.
    """
    lines = [f"[{name}]"]
    if description:
        lines += wrap(description, 2)
    for key, info in type(section).model_fields.items():
        value = getattr(section, key)
        if site is not None and value is None:
            continue
        shown = f"  {key} = {_value(value)}"
        if site is not None:  # a profile's key: its declaration is the site's
            lines += [f"{shown}   (the site's own rules: {_value(getattr(site, key))})",
                      *wrap(info.description or "", 6)]
        else:
            lines += [shown, *wrap(info.description or "", 6),
                      *wrap(f"(Allowed: {allowed(info)}; a profile may {stricter(info)}.)", 6)]
    if site is not None and len(lines) == 1 + len(wrap(description or "", 2)):
        lines.append("  (no key set: the site's own values apply)")
    return lines


def _explain_functions(enabled: tuple[str, ...], registry: Registry, indent: int) -> list[str]:
    pad = " " * indent
    lines = [f"{pad}Words used below:"]
    for entry in GLOSSARY:
        lines += textwrap.wrap(entry, WIDTH, initial_indent=f"{pad}  - ", subsequent_indent=f"{pad}    ")
    lines.append(f"{pad}Allowed:")
    for name in enabled:
        spec = registry.get(name)
        summary = f"{spec.kind}: {_summary(spec.doc)}" if spec else "not a registry function"
        lines += textwrap.wrap(f"{name} ({summary})", WIDTH, initial_indent=f"{pad}  - ",
                               subsequent_indent=f"{pad}    ")
    refused = [name for name in registry.names() if name not in enabled]
    lines += textwrap.wrap(
        "Refused: every other call" + (f", including the registry functions {', '.join(refused)}." if refused
                                       else " (nothing outside the registry can ever run)."),
        WIDTH, initial_indent=pad, subsequent_indent=pad + "    ")
    return lines


def explain_rules(path: str | Path, registry: Registry = REGISTRY) -> str:
    """Plain-language explanation of a rules file: every key, its value, what it protects against."""
    rules = check_rules(path, registry)
    lines = [
        f"Rules file {path}",
        *summary(rules),
        "",
        "This file is valid: a site would start with it.",
        *(f"WARNING: {w}" for w in weak_settings(rules)),
        "Every key below is the site's decision; an analyst can ask for more privacy, never less.",
    ]
    if rules.noise_off:
        lines += ["", "WARNING: differential-privacy noise is OFF at a site using this file.",
                  *wrap(f"Reason given: {rules.privacy.no_noise_acknowledged}", 2)]
    for name, info in Rules.model_fields.items():
        section = getattr(rules, name)
        lines += ["", *_explain_section(name, section, info.description)]
        if name == "functions":
            lines += _explain_functions(rules.functions.enabled, registry, 6)

    profiles = RulesFile.model_fields["profiles"]
    lines += ["", "[profiles]", *wrap(profiles.description or "", 2)]
    if not rules.profiles:
        lines.append("  This file defines no named profile: every session follows the rules above.")
    profile_fields = Profile.model_fields
    for profile_name, profile in rules.profiles.items():
        lines += ["", f"[profiles.{profile_name}]",
                  f"  enabled = {_value(profile.enabled)}",
                  *wrap(profile_fields["enabled"].description or "", 6),
                  *_explain_functions(profile.enabled, registry, 6)]
        for section in TIGHTENED_SECTIONS:
            lines += ["", *_explain_section(f"profiles.{profile_name}.{section}", getattr(profile, section),
                                            profile_fields[section].description, site=getattr(rules, section))]
    return "\n".join(lines) + "\n"


# --- docs/governance.md's key tables --------------------------------------------------------


def _toml(value: Any) -> str:
    """A default as the rules file writes it (a list of more than three as a pointer to the file)."""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f"`{json.dumps(value)}`"
    if isinstance(value, list):
        return "the list in `default.toml`" if len(value) > 3 else f"`{json.dumps(value)}`"
    return repr(value)


def _cell(text: str) -> str:
    """Plain text as one Markdown table cell: ``|`` and ``*`` escaped, whitespace collapsed."""
    return " ".join(text.split()).replace("|", "\\|").replace("*", "\\*")


def rules_tables(defaults: Path) -> tuple[str, str]:
    """docs/governance.md's two key tables, from the schema: every key of the rules file with its
    value in ``defaults`` (default.toml), the values it takes, what a profile may do with it and
    what it decides; and every key a profile may set."""
    shipped = tomllib.loads(defaults.read_text(encoding="utf-8"))
    rows = ["| key | default | allowed | a profile may | what it decides |", "|---|---|---|---|---|"]
    for key, info in rule_fields().items():
        section, name = key.split(".")
        rows.append(f"| `{key}` | {_toml(shipped[section][name])} | {_cell(allowed(info))} | {stricter(info)} "
                    f"| {_cell(info.description or '')} |")
    profile = ["| key | what it decides |", "|---|---|",
               f"| `profiles.NAME.enabled` | {_cell(Profile.model_fields['enabled'].description or '')} |"]
    for key, info in rule_fields().items():
        if key.split(".")[0] in TIGHTENED_SECTIONS and stricter(info) != FIXED:
            profile.append(f"| `profiles.NAME.{key}` | a profile may {stricter(info)}; left out, the site's value "
                           "applies |")
    return "\n".join(rows) + "\n", "\n".join(profile) + "\n"
