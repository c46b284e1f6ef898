"""The site service reads the rules through the Guard, as every function does.

A rules key is read in one place, :meth:`dsfed_server.disclosure.checks.Guard.rule`, which also records it as
applied (the audit record's rules and the function's contract). The site service needs some of them itself --
the budget's caps and warning share, secure aggregation's sites, noise share, peer set and whether the site
checks pooled cells, what a site declares to the others of a sealed step -- and gets each from a Guard method
that reads it there, never from the rules object. Reading the file as a whole stays with the site's start-up
(``service/state.py``: the parser's depth, the no-noise acknowledgment) and its governance tooling
(``dsfed_server/governance.py``: ``dsfed rules explain``), which describe the rules rather than apply them. The
allowlist sections (``functions``: which functions are enabled; ``models``: which model files are approved) are
read by the call pipeline and administration where they look a function or model up, and are not checked here.
"""

from __future__ import annotations

import re

import pytest

from sitekit import ROOT

SERVICE = sorted(p for p in (ROOT / "dsfed_server" / "service").glob("*.py") if p.name != "state.py")
SECTIONS = r"(disclosure|secure_aggregation|budget|privacy|bins|glm|parser|derived|federation)"
# a rules section read off a Rules object: state.rules.budget..., session_rules(session).secure_aggregation...
READ = re.compile(rf"(\brules|session_rules\([^)]*\))\.{SECTIONS}\b")


@pytest.mark.parametrize("module", SERVICE, ids=lambda p: p.name)
def test_the_service_reads_no_rules_section_itself(module):
    source = module.read_text()
    found = [line.strip() for line in source.splitlines() if READ.search(line)]
    assert not found, f"{module.name} reads rules sections directly (use a Guard method): {found}"


def test_the_pattern_finds_what_it_looks_for():
    """The check above would see each way the service read the rules before."""
    for line in ("caps = Caps.of(state.rules.budget)", "rules = self.state.session_rules(session).secure_aggregation",
                 "if not (rules.secure_aggregation.pooled_thresholds and x):", "q = rules.disclosure.q_threshold"):
        assert READ.search(line), line
    assert not READ.search("guard = self.calls.guard(spec.name, session)")
