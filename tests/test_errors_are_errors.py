"""Errors that are errors: a crafted number is a 4xx naming its parameter, a bug is a 500 with an id.

Before: five crafted arguments reached an exception inside the site and came back as HTTP 400
"internal error", invisible to any monitor. Each is sent here over real HTTP, through /v1 (call
text and JSON call tree) and the DataSHIELD door /ws, and must be refused with 422 naming the
parameter, with no internal error in the audit log. A bug injected into one function must answer
500 with an error id that the audit log and the server log hold.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pandas as pd
import pytest
import requests

from conftest import audit_records
from dsfed_server.config import load_site_config
from dsfed_server.registry import REGISTRY, Registry
from dsfed_server.service import SiteService
from sitekit import datashield_aggregate, make_sites, serve

BIG = "1" * 400
CRAFTED = [  # (what, call text or None, call tree or None, the parameter the refusal names)
    ("a 400-digit 1L literal", f"histogramDS2(D$age, {BIG}L, 0, 100)", None, "num.breaks"),
    ("a JSON integer 10^400 as a threshold", None,
     '{"call": "countBelowDS", "args": [{"col": ["D", "age"]}, {"lit": 1%s}]}' % ("0" * 400), "thresholds"),
    ("a JSON integer 10^400 in a vector", None,
     '{"call": "countBelowDS", "args": [{"col": ["D", "age"]}, {"vec": [%s1%s]}]}' % ("1, " * 70, "0" * 400),
     "thresholds"),
    ("sensitivity = 1e300", "noisyScoresDS(D$y, D$score, sensitivity = 1e300)", None, "sensitivity"),
    ("histogramDS2 with min and max +-1e308", "histogramDS2(D$age, 3, -1e308, 1e308)", None, "min"),
]


def _internal_errors(provisioned) -> list[dict]:
    return [r for r in audit_records(provisioned) if r["outcome"] == "internal_error"]


@pytest.mark.parametrize("what, text, tree, parameter", CRAFTED, ids=[c[0] for c in CRAFTED])
def test_a_crafted_number_is_refused_naming_its_parameter(gbsg2_http, gbsg2_provisioned, what, text, tree, parameter):
    site = gbsg2_provisioned["site1"]
    url, cred = gbsg2_http.urls["site1"], site.credentials["analyst"]
    auth = (cred.user, cred.password)
    before = len(_internal_errors(site))
    sid = requests.post(f"{url}/v1/sessions", auth=auth, timeout=10).json()["session"]
    requests.post(f"{url}/v1/sessions/{sid}/assign-table", auth=auth, json={"symbol": "D", "table": "GBSG2.validation"},
                  timeout=10).raise_for_status()
    body = f'{{"expr": {json.dumps(text)}}}' if text is not None else f'{{"call": {tree}}}'
    response = requests.post(f"{url}/v1/sessions/{sid}/aggregate", auth=auth, data=body,
                             headers={"content-type": "application/json"}, timeout=10)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "bad_call" and f"argument {parameter!r}" in error["message"], error
    if text is not None:  # the same text through the DataSHIELD door
        door = datashield_aggregate(url, auth, "GBSG2.validation", text)
        assert door.status_code == 422 and f"argument {parameter!r}" in door.text, door.text
    requests.delete(f"{url}/v1/sessions/{sid}", auth=auth, timeout=10)
    assert len(_internal_errors(site)) == before


class _Boom(RuntimeError):
    pass


def _raise(*args, **kwargs):
    raise _Boom("injected fault")


def test_a_bug_is_a_500_with_an_id_in_the_audit_and_server_logs(tmp_path, caplog):
    """meanDS replaced by a function that raises: the site (a real uvicorn server on a loopback
    port) answers 500, type internal_error, an error id that names the same fault in the audit
    record and in the server log's traceback."""
    provisioned, _ = make_sites(tmp_path, {"s": pd.DataFrame({"x": [float(i) for i in range(20)]})})
    registry = Registry()
    for spec in REGISTRY:
        registry.add(replace(spec, impl=_raise) if spec.name == "meanDS" else spec)
    config, base = load_site_config(provisioned["s"].config)
    service = SiteService(config, base_dir=base, registry=registry)
    with serve(service) as url:
        cred = provisioned["s"].credentials["analyst"]
        auth = (cred.user, cred.password)
        sid = requests.post(f"{url}/v1/sessions", auth=auth, timeout=10).json()["session"]
        requests.post(f"{url}/v1/sessions/{sid}/assign-table", auth=auth, json={"symbol": "T", "table": "P.t"},
                      timeout=10).raise_for_status()
        with caplog.at_level(logging.ERROR, logger="dsfed.site"):
            response = requests.post(f"{url}/v1/sessions/{sid}/aggregate", auth=auth, json={"expr": "meanDS(T$x)"},
                                     timeout=10)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "internal_error" and error["function"] == "meanDS"
    error_id = error["message"].split()[2]
    assert len(error_id) == 16 and error_id in error["hint"]
    (record,) = [r for r in audit_records(provisioned["s"]) if r["outcome"] == "internal_error"]
    assert record["error_id"] == error_id and record["function"] == "meanDS" and "injected fault" in record["message"]
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged and logged[0].exc_info and logged[0].exc_info[0] is _Boom
