"""schemathesis against a real site process: every operation of ``/v1`` and ``/ws`` fuzzed with
schema-valid and schema-violating requests, then stateful runs that follow the OpenAPI links
from login to session to assign to aggregate.

The site's own document gives the links that need no data (a session's id, a symbol's name);
the test adds the two that name this site's data (assign table ``P.t``, then the mean of its
column ``x``). schemathesis checks every response: no 5xx, documented status, content type and
body schema, schema-violating requests refused, a deleted session gone (two checks are off,
see ``EXCLUDED``). The run
must send at least 1000 requests, reach the functions (aggregates answered over both APIs),
and leave no internal error in the audit log.

Run with ``-s`` to see the figures (bench/RESULTS.md quotes them).
"""

from __future__ import annotations

import collections
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings, stateful
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.errors import UnsupportedSchema
from schemathesis.specs.openapi.checks import ensure_resource_availability, positive_data_acceptance

from conftest import audit_records
from dsfed_server.launch import LocalSites
from dsfed_server.audit import verify_file
from sitekit import make_sites

EXAMPLES_PER_OPERATION = 40  # per generation mode: schema-valid and schema-violating
SCENARIOS = 400  # stateful runs of up to 10 linked calls
# A call tree can be schema-valid and call a function with the wrong arguments: the site refuses it
# (4xx), so "schema-valid data is accepted" does not hold for a call API. A table named in an
# assign body that does not exist is a 404 about the table, not the session the path names.
EXCLUDED = [positive_data_acceptance, ensure_resource_availability]
FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzzed_site(tmp_path_factory):
    """One site with its API document on, 64 sessions per user reclaimed after 1 s idle (the
    fuzzer opens hundreds), and 60 records."""
    tmp = tmp_path_factory.mktemp("fuzz")
    rng = np.random.default_rng(7)
    provisioned, _ = make_sites(tmp, {"s": pd.DataFrame({"x": rng.normal(size=60),
                                                         "y": rng.integers(0, 2, 60).astype(float)})})
    config = provisioned["s"].config
    text = config.read_text().replace("max_sessions_per_user = 8\n",
                                      "max_sessions_per_user = 64\nsession_reclaim_after_s = 1\n")
    config.write_text(re.sub(r"(max_body_mb = \d+\n)", lambda m: m.group(1) + "api_docs = true\n", text))
    with LocalSites(provisioned.values(), tmp / "run-http") as sites:
        yield provisioned["s"], sites.urls["s"]


def _with_data_links(document: dict[str, Any]) -> dict[str, Any]:
    """The site's document plus the links that name its data; a linked body is sent as linked."""
    def link(path: str, method: str, status: str, name: str, definition: dict[str, Any]) -> None:
        document["paths"][path][method]["responses"][status]["links"][name] = definition

    link("/v1/sessions", "post", "201", "assignTheTable", {
        "operationId": "v1_assign_table", "parameters": {"sid": "$response.body#/session"},
        "requestBody": {"symbol": "D", "table": "P.t"}})
    link("/v1/sessions/{sid}/assign-table", "post", "200", "meanOfX", {
        "operationId": "v1_aggregate", "parameters": {"sid": "$request.path.sid"},
        "requestBody": {"call": {"call": "meanDS", "args": [{"col": ["$response.body#/symbol", "x"]}]}}})
    link("/ws/datashield/sessions", "post", "201", "assignTheTable", {
        "operationId": "ws_assign_table", "parameters": {"sid": "$response.body#/id", "symbol": "D", "table": "P.t"}})
    link("/ws/datashield/session/{sid}/symbol/{symbol}/table/{table}", "put", "200", "meanOfX", {
        "operationId": "ws_aggregate", "parameters": {"sid": "$request.path.sid"},
        "requestBody": "meanDS({$request.path.symbol}$x)"})
    for operations in document["paths"].values():
        for operation in operations.values():
            for response in operation["responses"].values():
                for definition in response.get("links", {}).values():
                    if "requestBody" in definition:
                        definition["x-schemathesis"] = {"merge_body": False}
    return document


class Tally:
    """What the fuzzer sent and got: statuses by phase and operation, and the checks that failed."""

    def __init__(self) -> None:
        self.statuses: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.failures: list[str] = []
        self.cut_short: list[str] = []  # runs schemathesis stopped early (a schema it cannot mutate)

    def record(self, phase: str, case: Any, response: Any, check: Any) -> None:
        self.statuses[(phase, case.operation.label, response.status_code)] += 1
        try:
            check()
        except BaseException as exc:  # schemathesis' FailureGroup is an exception group
            self.failures.append(f"{phase} {case.operation.label}: {str(exc)[:800]}")

    def count(self, phase: str | None = None, label: str = "", status: int | None = None) -> int:
        return sum(n for (p, op, s), n in self.statuses.items()
                   if (phase is None or p == phase) and label in op and (status is None or s == status))


def _fuzz_operations(schema: Any, tally: Tally, user: str, only: str = "") -> None:
    for result in schema.get_all_operations():
        operation = result.ok()
        if only not in operation.label:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(FUZZ, max_examples=EXAMPLES_PER_OPERATION)
            def run(case: Any) -> None:
                response = case.call()
                tally.record(f"{user}/{mode.value}", case, response, lambda: case.validate_response(
                    response, excluded_checks=EXCLUDED))
            try:
                run()
            except Unsatisfiable:  # no schema-violating request exists (no parameters, no body)
                pass
            except UnsupportedSchema:  # schemathesis could not mutate the nested call tree this time
                tally.cut_short.append(f"{user}/{mode.value} {operation.label}")


def _fuzz_stateful(schema: Any, tally: Tally) -> None:
    """Linked scenarios of schema-valid calls on the session routes (schema-violating calls, and the
    routes outside a session, are fuzzed per operation)."""
    schema.config.generation.update(modes=[GenerationMode.POSITIVE])
    schema = schema.include(path_regex=r"/sessions?\b")

    class Scenarios(schema.as_state_machine()):  # type: ignore[misc]
        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            tally.record("stateful", case, response, lambda: case.validate_response(
                response, excluded_checks=EXCLUDED, recorder=self.recorder))

    stateful.run_state_machine_as_test(Scenarios, settings=settings(FUZZ, max_examples=SCENARIOS,
                                                                     stateful_step_count=10))


@pytest.mark.slow
@pytest.mark.timeout(900)  # 141-179 s alone on two idle cores (the client's generation most of it)
def test_schemathesis_finds_no_server_error(fuzzed_site):
    site, url = fuzzed_site
    document = _with_data_links(requests.get(f"{url}/openapi.json", timeout=10).json())
    tally = Tally()
    for user, only in (("analyst", ""), ("governance", "GET /v1/")):  # governance reads the audit and budget
        schema = schemathesis.openapi.from_dict(document)
        schema.config.update(base_url=url, basic_auth=(user, site.credentials[user].password))
        _fuzz_operations(schema, tally, user, only)
    schema = schemathesis.openapi.from_dict(document)
    schema.config.update(base_url=url, basic_auth=("analyst", site.credentials["analyst"].password))
    _fuzz_stateful(schema, tally)

    total = sum(tally.statuses.values())
    by_status = collections.Counter()
    for (_, _, status), n in tally.statuses.items():
        by_status[status] += n
    print(f"\nschemathesis: {total} requests, statuses {dict(sorted(by_status.items()))}, "
          f"stateful {tally.count('stateful')}, failed checks {len(tally.failures)}, "
          f"runs cut short by schemathesis {tally.cut_short}")
    assert not tally.failures, "\n\n".join(tally.failures[:5])
    assert total >= 1000
    assert all(status < 500 for status in by_status), by_status
    # the linked scenarios reach the functions over both APIs
    assert tally.count("stateful", "POST /v1/sessions/{sid}/aggregate", 200) > 0
    assert tally.count("stateful", "POST /ws/datashield/session/{sid}/aggregate", 200) > 0
    assert tally.count("governance/positive", "GET /v1/audit", 200) > 0

    records = audit_records(site)
    assert len(records) > 500
    assert [r for r in records if r["outcome"] == "internal_error"] == []
    report = verify_file(site.audit_log, site.secret)
    assert report.ok and report.records == len(records), report
