"""One set of limits for every front door: ``[strings]`` applies to the JSON call tree as to call text.

Before: ``strings.max_name_length`` and ``strings.max_length`` were applied by the text tokenizer only,
so a 201-character symbol name in a JSON call tree reached the workspace lookup. Both readers now end
in :func:`dsfed_core.calltree.check_limits`; here the same over-long name and string are sent over
real HTTP as call text and as a JSON tree through /v1, and as text through the DataSHIELD door /ws,
and each is refused with the same rule.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import requests

from conftest import audit_records
from sitekit import datashield_aggregate, make_sites, serve

NAME = "N" * 201
STRING = "s" * 201
CASES = [  # (the rule, call text, the same call as a JSON tree)
    ("strings.max_name_length", f"meanDS({NAME})", {"call": "meanDS", "args": [{"sym": NAME}]}),
    ("strings.max_name_length", f"meanDS({NAME}$x)", {"call": "meanDS", "args": [{"col": [NAME, "x"]}]}),
    ("strings.max_name_length", f"meanDS(T${NAME})", {"call": "meanDS", "args": [{"col": ["T", NAME]}]}),
    ("strings.max_length", f'meanDS("{STRING}")', {"call": "meanDS", "args": [{"lit": STRING}]}),
    ("strings.max_length", f'levelsDS(c("a", "{STRING}"))', {"call": "levelsDS", "args": [{"vec": ["a", STRING]}]}),
    ("strings.max_name_length", f'glmDS1({NAME} ~ x, "gaussian", NULL, NULL, T)',
     {"call": "glmDS1", "args": [{"formula": f"{NAME} ~ x"}, {"lit": "gaussian"}, {"lit": None}, {"lit": None},
                                 {"sym": "T"}]}),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    provisioned, services = make_sites(tmp_path_factory.mktemp("limits"),
                                       {"s": pd.DataFrame({"x": [float(i) for i in range(20)]})})
    with serve(services["s"]) as url:
        yield url, provisioned["s"]


def _native(url: str, auth: tuple[str, str], bodies: list[dict]) -> list[requests.Response]:
    sid = requests.post(f"{url}/v1/sessions", auth=auth, timeout=10).json()["session"]
    requests.post(f"{url}/v1/sessions/{sid}/assign-table", auth=auth, json={"symbol": "T", "table": "P.t"},
                  timeout=10).raise_for_status()
    answers = [requests.post(f"{url}/v1/sessions/{sid}/aggregate", auth=auth, json=body, timeout=10)
               for body in bodies]
    requests.delete(f"{url}/v1/sessions/{sid}", auth=auth, timeout=10)
    return answers


@pytest.mark.parametrize("rule, text, tree", CASES, ids=[json.dumps(c[2])[:60] for c in CASES])
def test_the_same_limit_refuses_text_and_tree_alike(site, rule, text, tree):
    url, provisioned = site
    cred = provisioned.credentials["analyst"]
    auth = (cred.user, cred.password)
    answers = dict(zip(("/v1 text", "/v1 tree"), _native(url, auth, [{"expr": text}, {"call": tree}])))
    for door, response in answers.items():
        assert response.status_code == 422, (door, response.text)
        error = response.json()["error"]
        assert error["type"] == "bad_call" and error["rule"] == rule and "exceeds the limit" in error["message"], \
            (door, error)
    door = datashield_aggregate(url, auth, "P.t", text, symbol="T")
    assert door.status_code == 422 and rule in door.text, door.text
    refused = [r for r in audit_records(provisioned)[-8:] if r["kind"] == "aggregate" and r["outcome"] == "bad_call"]
    assert refused and refused[-1]["rule"] == rule
    assert not any(r["outcome"] == "not_found" for r in audit_records(provisioned))  # no lookup reached


def test_a_long_unknown_argument_name_is_an_unused_argument(site):
    """An argument's name is matched against the function's parameters, not measured."""
    url, provisioned = site
    cred = provisioned.credentials["analyst"]
    text, tree = f"meanDS({NAME} = T$x)", {"call": "meanDS", "kwargs": {NAME: {"col": ["T", "x"]}}}
    for response in _native(url, (cred.user, cred.password), [{"expr": text}, {"call": tree}]):
        error = response.json()["error"]
        assert response.status_code == 422 and error["rule"] is None and "unused argument" in error["message"]


def test_a_long_unknown_function_name_is_not_registered_at_either_door(site):
    """A function name is looked up in the registry, not measured: an unknown one over
    ``strings.max_name_length`` is reported as not registered, at /v1 (text and tree) and at /ws,
    where the hint names the DataSHIELD client's own listing of the functions."""
    url, provisioned = site
    cred = provisioned.credentials["analyst"]
    auth = (cred.user, cred.password)
    text, tree = f"{NAME}(T$x)", {"call": NAME, "args": [{"col": ["T", "x"]}]}
    for response in _native(url, auth, [{"expr": text}, {"call": tree}]):
        error = response.json()["error"]
        assert response.status_code == 422 and error["rule"] is None, response.text
        assert "is not a registered function" in error["message"] and "GET /v1/functions" in error["hint"]
        assert NAME not in error["message"]  # the name is shown shortened
    door = datashield_aggregate(url, auth, "P.t", text, symbol="T")
    body = door.json()
    assert door.status_code == 422 and "is not a registered function" in body["arguments"][0], door.text
    assert "DSSession.methods()" in body["error"]["hint"] and "/v1" not in door.text
