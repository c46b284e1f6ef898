"""A pooled table of a factor whose levels differ between sites (a stray ``"f"`` at one) is refused
with an error that names the sites and the differing levels; before, the sites summed vectors of
different lengths and said only "valley's vector has another length than this site's", and vectors
of equal length but different levels would have been summed cell against the wrong cell. Per site
the client aligns the levels, and the pooled table of sites that agree equals pandas' counts.
Three in-process sites under the shipped default rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.pooling import pooled_table1d
from sitekit import make_sites


def _frames(stray: bool) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(38)
    frames = {}
    for k, n in enumerate((120, 90, 60)):
        sex = rng.choice(["F", "M"], n)
        if stray and k == 2:
            sex[:7] = "f"  # an export's lower case: a third level at this site only
        frames[f"site{k + 1}"] = pd.DataFrame({"sex": sex, "y": rng.integers(0, 2, n)})
    return frames


@pytest.mark.parametrize("stray", [True, False])
def test_a_pooled_table_names_the_sites_and_levels_that_differ(tmp_path, stray):
    frames = _frames(stray)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        per_site = session.aggregate("table1DDS", Ref("D$sex"))
        pooled_counts = pd.concat(frames.values())["sex"].value_counts()
        aligned = pooled_table1d(per_site)
        assert aligned.as_dict() == pooled_counts.to_dict()
        if not stray:
            table = session.pooled("table1DDS", Ref("D$sex"))
            assert dict(zip(table["levels"], table["counts"])) == pooled_counts.to_dict()
            return
        with pytest.raises(FederatedCallError) as refused:
            session.pooled("table1DDS", Ref("D$sex"))
    failures = refused.value.failures
    assert set(failures) == {"site1", "site2", "site3"}
    assert failures["site1"].message == ("the sites' levels differ, so their tables cannot be summed cell by cell: "
                                         "site1 has ['F', 'M'], site3 has ['F', 'M', 'f'] (only at site3: ['f'])")
    assert failures["site3"].message.endswith("site3 has ['F', 'M', 'f'], site1 has ['F', 'M'] "
                                              "(only at site3: ['f'])")
    assert all(f.function == "table1DDS" and "secure=False" in f.hint for f in failures.values())
    assert "another length" not in str(refused.value)
