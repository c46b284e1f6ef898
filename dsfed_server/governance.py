"""What a site's governance board reads: its rules file explained (its audit log summarised is
:mod:`dsfed_server.audit_summary`).

The explanation of every rules-file key comes from one place, the pydantic
``Field`` descriptions of :mod:`dsfed_server.disclosure.rules`; this module only
lays them out. Checking a rules file runs exactly the validation a site runs at
start (:func:`~dsfed_server.disclosure.rules.load_rules` and
:func:`~dsfed_server.service.check_enabled`).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dsfed_server.disclosure.rules import Profile, Rules, RulesFile, load_rules
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
                        "one or two records (DataSHIELD's default nfilter.tab is 3; the ROC-GLM paper's analysis uses 5)")
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


# a parenthesis (one level of nesting inside) that cites a seed paper: "(seed 000 eqs. 1-2; DeLong 1988)"
_CITATION = re.compile(r"\s*\((?:[^()]|\([^()]*\))*\bseeds? \d{3}\b(?:[^()]|\([^()]*\))*\)")
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
        if site is not None:
            shown += f"   (the site's own rules: {_value(getattr(site, key))})"
        lines += [shown, *wrap(info.description or "", 6)]
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
        for section in ("disclosure", "bins"):
            lines += ["", *_explain_section(f"profiles.{profile_name}.{section}", getattr(profile, section),
                                            profile_fields[section].description, site=getattr(rules, section))]
    return "\n".join(lines) + "\n"
