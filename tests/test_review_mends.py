"""Assertions added with the review mends of the server infrastructure."""

from __future__ import annotations

import http.client
import re
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd

from sitekit import make_sites, serve

PATH = re.compile(r'"GET (\S+)" (\d{3}) ')


def _raw_get(url: str, target: str) -> int:
    """A GET of ``target`` sent byte for byte (no client-side quoting), its status."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_access_log_tells_a_raw_backslash_x22_from_a_quote(tmp_path: Path):
    """Attack: a path holding the four characters \\x22 must not log as the escaped quote (a forged
    line). Before the mend both paths logged as /v1/a\\x22b; now they differ, each as hand-escaped."""
    provisioned, services = make_sites(tmp_path, {"s": pd.DataFrame({"age": range(30, 60)})})
    quote, backslash = '/v1/a"b', "/v1/a\\x22b"
    with serve(services["s"]) as url:
        statuses = [_raw_get(url, quote), _raw_get(url, backslash)]
    log = provisioned["s"].audit_log.with_name("s-access.log").read_text().splitlines()
    logged = [m.group(1) for m in map(PATH.search, log) if m]
    assert statuses == [404, 404]
    assert logged == ["/v1/a\\x22b", "/v1/a\\x5cx22b"]
    assert logged[0] != logged[1]


def test_onnx_input_refusals_name_the_declared_variable_with_its_article():
    """A string input on an integer column, on a text column without categories, and an int64 input
    on a boolean column: the refusal's wording, written out by hand."""
    from dsfed_core.errors import CallError
    from dsfed_server.dictionary import Variable
    from dsfed_server.onnx_inputs import _check
    from dsfed_server.onnx_model import OnnxInput

    text_input = OnnxInput("x", "string", None, ("a", "b"), 2)
    cases = (
        (text_input, Variable("x", "integer", "years", "", ()),
         "the data dictionary declares an integer variable"),
        (text_input, Variable("x", "text", "", "", ()),
         "the data dictionary declares a text variable without categories"),
        (OnnxInput("x", "int64", None, None, 2), Variable("x", "boolean", "", "", ()),
         "the model reads whole numbers (int64), the data dictionary declares a boolean variable"),
    )
    for spec, variable, says in cases:
        try:
            _check(spec, variable, "m")
        except CallError as exc:
            assert exc.message.startswith("model 'm' reads column 'x': ")
            assert says in exc.message, exc.message
            assert exc.rule == "models.onnx"
        else:
            raise AssertionError(f"{variable} was not refused")
