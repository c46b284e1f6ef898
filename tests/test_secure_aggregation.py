"""Secure aggregation (the institutional privacy of Wu et al. 2012): the analyst receives only
sums over sites. Each test checks one promise against an independent reference: the plain per-site
sums, R's glm on the pooled data, a uniform distribution, or the rules file's refusal."""

from __future__ import annotations

import base64
import secrets

import numpy as np
import pandas as pd
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from scipy import stats

from dsfed_client import Call, DisclosureRefusal, FederatedCallError, Formula, Ref, SiteUnavailable
from dsfed_client.analyses import ds_glm
from dsfed_client.analyses.calibration import ds_brier, ds_calibration_curve, ds_hosmer_lemeshow
from dsfed_client.analyses.curves import ds_hist_auc
from dsfed_server.launch import LocalSites
from dsfed_client.secure import unmask_sum
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from conftest import FIXTURES, RULES, audit_records, http_builder, inprocess_builder
from rref import R_CALCURVE, R_HOSLEM, R_VALPROB, r_reference
from sitekit import ROOT, make_sites, rules_variant
from test_glm import r_glm

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def frames(k: int, n: int = 240, seed: int = 5) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(k):
        x = rng.normal(size=n) * 3 + i
        p = 1 / (1 + np.exp(-(0.4 * x - 0.3)))
        y = (rng.random(n) < p).astype(int)
        out[f"s{i + 1}"] = pd.DataFrame({"x": x, "z": rng.normal(size=n), "y": y, "score": p, "big": x * 1e6})
    return out


def sites(tmp_path, k: int = 3, rules=NO_NOISE, **kw):
    data = frames(k, **kw)
    prov, services = make_sites(tmp_path, data, rules)
    return data, prov, services


def session_over(prov, services, names, user: str = "analyst"):
    return inprocess_builder({n: prov[n] for n in names}, {n: services[n] for n in names}, user=user).login()


def only_rule(exc: FederatedCallError) -> set[str | None]:
    return {err.rule for err in exc.failures.values()}


def test_secure_sums_equal_the_plain_sums(tmp_path):
    """Counts are exact; real sums are the plain sums to the fixed-point resolution 2^-24 per site."""
    _, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        for function, args in (("glmDS2", (Formula("y ~ x + z"), "binomial", None, None, None, Ref("D"))),
                               ("brierDS", (Ref("D$y"), Ref("D$score")))):
            plain = s.aggregate(function, *args)
            secure = s.secure_sum(function, *args)
            assert secure.sites == ("s1", "s2", "s3")
            for name, value in secure.values.items():
                expected = np.sum([np.asarray(r[name], dtype=float) for r in plain.values()], axis=0)
                if name in ("n", "sum_y", "numsubs", "Nvalid", "Npositive", "Nmissing", "Ntotal"):
                    np.testing.assert_array_equal(value, expected)  # integers: exact
                else:
                    np.testing.assert_allclose(value, expected, rtol=0, atol=3 * 2.0**-25)


def test_secure_glm_equals_r_glm_on_pooled_data(tmp_path):
    data, prov, services = sites(tmp_path)
    pooled = pd.concat(data.values(), ignore_index=True)
    ref = r_glm(pooled[["y", "x", "z"]], "y ~ x + z", "binomial", "logit")
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        fit = ds_glm(s, "y ~ x + z", "D", secure=True)
    np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fit.bse, ref["se"], rtol=1e-7)
    np.testing.assert_allclose(fit.deviance, ref["deviance"], rtol=1e-9)
    assert fit.pooled and fit.sites == ("s1", "s2", "s3")
    assert fit.nobs == len(pooled)


def test_one_sites_share_is_indistinguishable_from_random(tmp_path):
    """The analyst's view of one site: 64-bit words that pass uniformity tests, and whose
    distribution does not depend on the site's vector (two sites with different data)."""
    _, prov, services = sites(tmp_path)
    args = (Formula("y ~ x + z"), "binomial", None, None, None, Ref("D"))
    views: dict[str, list[np.ndarray]] = {"s1": [], "s2": []}
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        plain = s.aggregate("glmDS2", *args)
        for _ in range(60):  # each call is a new step of the round: new masks, same vector
            got = s.secure_sum("glmDS2", *args)
            for site in views:
                views[site].append(got.shares[site])
    s1 = np.concatenate(views["s1"])
    s2 = np.concatenate(views["s2"])
    assert s1.size == 60 * 22  # info (9), score (3), xwz (3), dev and five counts, clipped
    # bytes of the words are uniform on 0..255
    counts = np.bincount(np.frombuffer(s1.astype("<u8").tobytes(), dtype=np.uint8), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    # every bit is a fair coin
    bits = (s1[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 5 * 0.5 / np.sqrt(s1.size))
    # the same words for two sites with different vectors: one distribution
    u1, u2 = s1 / 2.0**64, s2 / 2.0**64
    assert stats.kstest(u1, "uniform").pvalue > 1e-4
    assert stats.ks_2samp(u1, u2).pvalue > 1e-4
    # no trace of the site's own values: the words do not correlate with its information matrix
    own = np.tile(np.ravel(plain["s1"]["info.matrix"]), 60)
    words = s1.reshape(60, 22)[:, :9].ravel() / 2.0**64
    assert abs(np.corrcoef(own, words)[0, 1]) < 5 / np.sqrt(own.size)
    # the fixed-point encoding of the site's vector is not visible either: no word equals it
    encoded = np.rint(np.ravel(plain["s1"]["info.matrix"]) * 2.0**24).astype(np.int64).view(np.uint64)
    assert not np.any(s1.reshape(60, 22)[:, :9] == encoded[None, :])


def _roster(session, round_id: str) -> list[dict]:
    keys = session.aggregate("secureKeyDS", round_id)
    return [keys[site] for site in session.sites]


def _secure_call(session, function: str, args: tuple, secure: dict) -> dict:
    body = {"call": Call(function, *args).tree(), "secure": secure}
    return session._in_session(function, "POST", "/aggregate", body)


def test_analyst_cannot_insert_its_own_key(tmp_path):
    """A man in the middle: the analyst swaps site s2's key for one it holds, signed by itself.
    The other sites refuse (their pinned peer key does not verify it); nothing is released."""
    _, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        round_id = secrets.token_hex(16)
        roster = _roster(s, round_id)
        mine = X25519PrivateKey.generate().public_key().public_bytes(*RAW)
        forger = Ed25519PrivateKey.generate()
        message = b"dsfed secure-aggregation key v1\0" + round_id.encode() + b"\0s2\0" + mine
        roster[1] = {"site": "s2", "key": base64.b64encode(mine).decode(),
                     "signature": base64.b64encode(forger.sign(message)).decode()}
        with pytest.raises(FederatedCallError) as exc:
            _secure_call(s, "brierDS", (Ref("D$y"), Ref("D$score")),
                         {"round": round_id, "step": 1, "roster": roster, "frac_bits": 24})
    assert only_rule(exc.value) == {"secure_aggregation.peers"}
    assert "not signed by s2's pinned identity key" in str(exc.value.failures["s1"])
    assert "another key under this site's name" in str(exc.value.failures["s2"])


def test_a_key_signed_for_another_round_is_refused(tmp_path):
    _, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        old, new = secrets.token_hex(16), secrets.token_hex(16)
        stale = _roster(s, old)
        roster = _roster(s, new)
        roster[2] = stale[2]  # s3's genuine key, but of the other round
        with pytest.raises(FederatedCallError) as exc:
            _secure_call(s, "brierDS", (Ref("D$y"), Ref("D$score")),
                         {"round": new, "step": 1, "roster": roster, "frac_bits": 24})
    assert {"s1", "s2"} <= set(exc.value.failures)
    assert only_rule(exc.value) == {"secure_aggregation.peers"}


def test_step_reuse_and_small_rosters_are_refused(tmp_path):
    _, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        round_id = secrets.token_hex(16)
        roster = _roster(s, round_id)
        option = {"round": round_id, "step": 7, "roster": roster, "frac_bits": 24}
        _secure_call(s, "brierDS", (Ref("D$y"), Ref("D$score")), option)
        with pytest.raises(FederatedCallError) as exc:  # the same masks on another vector
            _secure_call(s, "glmDS2", (Formula("y ~ x"), "binomial", None, None, None, Ref("D")), option)
        assert all("step 7" in str(e) and "already used" in str(e) for e in exc.value.failures.values())
        with pytest.raises(FederatedCallError) as exc:  # two sites: each could subtract its own
            _secure_call(s, "brierDS", (Ref("D$y"), Ref("D$score")), {**option, "step": 8, "roster": roster[:2]})
        assert "secure_aggregation.min_sites" in only_rule(exc.value)


def test_only_one_set_of_peers_per_table_for_all_analysts_survives_restart(tmp_path):
    """Sums over {s1..s4} and then over {s1, s2, s3} would reveal s4's vector by difference:
    the second set is refused, for a second account too and after the sites restart (the pin is
    per table in the ledger)."""
    _, prov, services = sites(tmp_path, k=4)
    with session_over(prov, services, ["s1", "s2", "s3", "s4"]) as s:
        s.assign_table("D", "P.t")
        s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))
    restarted = {n: SiteService.from_config_file(prov[n].config) for n in prov}
    with session_over(prov, restarted, ["s1", "s2", "s3"], user="analyst2") as s:
        s.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))
        assert only_rule(exc.value) == {"secure_aggregation.min_sites"}
        assert "s1,s2,s3,s4" in str(exc.value)
    with session_over(prov, restarted, ["s1", "s2", "s3", "s4"]) as s:  # the same sites: fine
        s.assign_table("D", "P.t")
        assert s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))["n"] == 4 * 240


def test_require_refuses_plain_release(tmp_path):
    rules = rules_variant(tmp_path / "rules.toml", require="true")
    _, prov, services = sites(tmp_path, rules=rules)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate("brierDS", Ref("D$y"), Ref("D$score"))
        assert only_rule(exc.value) == {"secure_aggregation.require"}
        assert s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))["n"] == 720
        assert s.aggregate("meanDS", Ref("D$x"))  # functions without a secure sum are unaffected
    # governance sees both in the audit log: the refused plain call, and the secure one with its sites
    records = [r for r in audit_records(prov["s2"]) if r["function"] == "brierDS"]
    assert [r["outcome"] for r in records] == ["refused", "ok"]
    assert records[0]["rule"] == "secure_aggregation.require"
    assert "[secure sum over s1,s2,s3, round" in records[1]["call"]


def test_values_outside_the_fixed_point_range_are_clipped_counted_and_asked_again(tmp_path):
    """A site's X'WX of a covariate in units of 1e6 (about 5e14) exceeds 2^(63-24)/3 at the default
    24 fraction bits. A site does not refuse (that would say which site holds a large value): it
    clips, and the masked sum counts the clipped values over all sites. The client then asks
    again with 12 bits, where the values fit, and gets the plain sum to that resolution."""
    _, prov, services = sites(tmp_path)
    args = (Formula("y ~ big"), "binomial", None, None, None, Ref("D"))
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        plain = s.aggregate("glmDS2", *args)
        got = s.secure_sum("glmDS2", *args)
        steps = s._secure_step
        with pytest.raises(FederatedCallError) as exc:
            s.secure_sum("glmDS2", *args, frac_bits=41)
        # refused by the request's validation, in-process as over HTTP
        assert all("secure.frac_bits: Input should be less than or equal to 40" in str(e)
                   for e in exc.value.failures.values())
        with pytest.raises(FederatedCallError) as exc:
            s.secure_sum("meanDS", Ref("D$x"))
        assert "does not offer secure summation" in str(exc.value)
    assert (got.frac_bits, got.clipped, steps) == (12, 0, 2)  # 24 bits clipped, 12 bits fit
    expected = np.sum([np.asarray(r["info.matrix"]) for r in plain.values()], axis=0)
    np.testing.assert_allclose(got["info.matrix"], expected, rtol=1e-15, atol=3 * 2.0**-13)  # + float64 ulp


def test_noise_is_split_between_sites_and_charged_in_full(tmp_path):
    """honest_sites = 3: each of three sites adds a third of the noise variance, so the sum carries
    the calibrated noise once; the ledger charges each site the full (epsilon, delta)."""
    rules = rules_variant(tmp_path / "rules.toml", honest_sites="3", epsilon_per_table="100.0",
                          epsilon_per_analyst="100.0")
    data, prov, services = sites(tmp_path, rules=rules, n=400)
    pooled = pd.concat(data.values(), ignore_index=True)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        got = s.secure_sum("scoreHistogramDS", Ref("D$y"), Ref("D$score"), levels=6, totals="exact")
    sd = {site: np.asarray(p["sd"]) for site, p in got.public.items()}
    total_sd = np.sqrt(np.sum([v**2 for v in sd.values()], axis=0))
    single = np.asarray(sd["s1"]) * np.sqrt(3)  # the full calibrated sd of one site
    np.testing.assert_allclose(total_sd, single, rtol=1e-12)
    # the noise in the summed leaves has the calibrated sd (chi-square bound on 2 x 64 leaves)
    y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
    resid = []
    for cls, name in ((0, "negatives"), (1, "positives")):
        leaf = np.clip(np.floor(p[y == cls] * 64), 0, 63).astype(int)
        resid.append((got[name][-1] - np.bincount(leaf, minlength=64)) / total_sd[-1])
    z = np.concatenate(resid)
    # sum(z^2) is exactly chi-square(128) when the noise has the calibrated sd: tails of 1e-6 each side
    # fail an honest run 2e-6 of the time (at 1e-4 each side, 2e-4: every site secret is fresh, so every
    # run is a new draw), and still fail a sum that carries each site's full noise (3x the variance,
    # sum about 384 > 219) or a ninth of it each (sum about 43 < 66)
    assert stats.chi2(z.size).ppf(1e-6) < np.sum(z**2) < stats.chi2(z.size).isf(1e-6)
    assert np.array_equal(got["n_negative"], float(np.sum(y == 0)))
    # charged in full: the same as the plain release of the same histogram costs another analyst
    builder = inprocess_builder(prov, services, user="analyst2")
    with builder.login() as s:
        s.assign_table("D", "P.t")
        s.aggregate("scoreHistogramDS", Ref("D$y"), Ref("D$score"), levels=6, totals="exact")
    for name, svc in services.items():
        gov = svc.auth.by_password("governance", prov[name].credentials["governance"].password)
        rows = {row["analyst"]: row for row in svc.budget(gov)["spending"]}
        assert rows["analyst"]["basic"] == rows["analyst2"]["basic"]
        assert rows["analyst"]["rho"] == pytest.approx(rows["analyst2"]["rho"], rel=1e-12)


def test_secure_histogram_auc_is_within_its_standard_error(tmp_path):
    """The whole histogram AUC by secure sums (histograms, placement sums, ROC-GLM parts),
    against the pooled empirical AUC (numpy Mann-Whitney)."""
    rules = rules_variant(tmp_path / "rules.toml", honest_sites="3", epsilon_per_table="100.0",
                          epsilon_per_analyst="100.0")
    data, prov, services = sites(tmp_path, rules=rules, n=600)
    pooled = pd.concat(data.values(), ignore_index=True)
    y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
    auc = stats.mannwhitneyu(p[y == 1], p[y == 0]).statistic / (np.sum(y == 1) * np.sum(y == 0))
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        res = ds_hist_auc(s, "D$y", "D$score", secure=True, levels=6)
        requests = {site: v["requests"] for site, v in s.transfer_stats().items()}
    assert abs(res.auc - auc) < 3 * np.sqrt(res.variance)
    assert abs(res.roc_glm.auc - auc) < 3 * np.sqrt(res.variance)
    assert (res.n_positive, res.n_negative) == (int(np.sum(y == 1)), int(np.sum(y == 0)))
    assert res.roc_glm.glm.pooled and res.roc_glm.glm.sites == ("s1", "s2", "s3")
    assert len(set(requests.values())) == 1


@pytest.fixture
def three_http_sites(tmp_path):
    """Three GBSG2 site processes with their own ledgers (the peer pins of this test stay here)."""
    provisioned = provision(tmp_path / "run",
                            {s: (FIXTURES / s, RULES / f"{s}.toml") for s in ("site1", "site2", "site3")})
    with LocalSites(provisioned.values(), tmp_path / "proc") as running:
        yield provisioned, running


def test_a_site_dropping_out_mid_round_gives_no_sum(three_http_sites, gbsg2_frames):
    """Real servers: once the round is keyed, site3 dies. The next secure call raises naming
    site3 and decodes nothing (the others' shares stay masked); the same sum without site3 is
    refused, since with the first sum it would isolate site3."""
    provisioned, running = three_http_sites
    urls = running.urls
    with http_builder(provisioned, urls, read_timeout=5).login() as s:
        s.assign_table("D", "GBSG2.validation")
        first = s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))
        running.processes["site3"].kill()
        for call in (lambda: s.secure_sum("brierDS", Ref("D$y"), Ref("D$score")),
                     lambda: s.pooled("calibrationBinsDS", Ref("D$y"), Ref("D$score"), 10)):
            with pytest.raises(FederatedCallError) as exc:
                call()
            assert set(exc.value.failures) == {"site3"}
            assert isinstance(exc.value.failures["site3"], SiteUnavailable)
    two = {k: urls[k] for k in ("site1", "site2")}
    with http_builder(provisioned, two, read_timeout=5).login() as s:
        s.assign_table("D", "GBSG2.validation")
        with pytest.raises(FederatedCallError) as exc:
            s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))
        assert all(isinstance(e, DisclosureRefusal) for e in exc.value.failures.values())
        assert only_rule(exc.value) == {"secure_aggregation.min_sites"}
    assert first["n"] == sum(len(gbsg2_frames[k]) for k in ("site1", "site2", "site3"))


@pytest.mark.parametrize("kind", ["C", "H"])
def test_secure_calibration_measures_equal_r(tmp_path, kind):
    """Hosmer-Lemeshow, the calibration curve and the Brier score as pooled releases, against the R
    references on the pooled data (fixed point: equal to 1e-9 relative)."""
    data, prov, services = sites(tmp_path, n=1000)
    pooled = pd.concat(data.values(), ignore_index=True)
    y, p = pooled["y"].to_numpy(dtype=float), pooled["score"].to_numpy()
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        hl = ds_hosmer_lemeshow(s, "D$y", "D$score", kind=kind, secure=True)
        curve = ds_calibration_curve(s, "D$y", "D$score", n_bins=10, secure=True)
        brier = ds_brier(s, "D$y", "D$score", secure=True)
    ref = r_reference(f"hl_{kind.lower()}", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    assert hl.complete and hl.pooled
    assert hl.statistic == pytest.approx(ref[0], rel=1e-9)
    assert hl.df == ref[1]
    np.testing.assert_array_equal(hl.table["n"].to_numpy(), ref[3:])
    cal = r_reference("calcurve_ref", R_CALCURVE, y=y, p=p, nbins=np.array([10.0])).reshape(3, 10)
    assert curve.per_site == {} and curve.bins.pooled and not curve.bins.was_coarsened
    np.testing.assert_array_equal(curve.n, cal[0])
    np.testing.assert_allclose(curve.mean_outcome, cal[1], rtol=1e-9)
    np.testing.assert_allclose(curve.mean_prediction, cal[2], rtol=1e-9)
    r_brier, r_z = r_reference("valprob_ref", R_VALPROB, y=y, p=p)[:2]
    assert brier.brier == pytest.approx(r_brier, rel=1e-9)
    assert brier.spiegelhalter_z == pytest.approx(r_z, rel=1e-9)


def test_pooled_bins_keep_what_per_site_checks_would_merge(tmp_path):
    """The design has sparse end bins: per site, each site merges its own small bins, and the curve
    pooled on the bins every site released is coarser; pooled over the sites, the same bins hold
    enough records and are released as requested. Every record is counted either way."""
    data, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        per_site = ds_calibration_curve(s, "D$y", "D$score", n_bins=10)
        pooled = ds_calibration_curve(s, "D$y", "D$score", n_bins=10, secure=True)
    n = sum(len(f) for f in data.values())
    assert per_site.bins.was_coarsened and per_site.n.sum() == n
    assert not pooled.bins.was_coarsened and pooled.n.sum() == n and len(pooled.n) == 10
    assert len(per_site.n) < len(pooled.n)


def test_masks_cancel_only_when_every_site_ran_the_same_call(tmp_path):
    """An analyst sends site s3 another call than s1 and s2 in the same step (e.g. one whose
    answer it knows, to subtract it): the masks are bound to the call, so the sum does not decode.
    Here s3's call differs only in form (references as strings), so without that binding the sum
    would be exactly the plain total."""
    _, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        total = sum(int(r["n"]) for r in s.aggregate("brierDS", Ref("D$y"), Ref("D$score")).values())
        round_id = secrets.token_hex(16)
        option = {"round": round_id, "step": 1, "roster": _roster(s, round_id), "frac_bits": 24}
        calls = {"s1": Call("brierDS", Ref("D$y"), Ref("D$score")), "s2": Call("brierDS", Ref("D$y"), Ref("D$score")),
                 "s3": Call("brierDS", "D$y", "D$score")}
        answers = {site: t.request("POST", f"/sessions/{s.session_ids[site]}/aggregate",
                                   {"call": calls[site].tree(), "secure": option})["result"]
                   for site, t in s.transports.items()}
        honest = s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))
    assert honest["n"] == total
    with pytest.raises(ValueError, match="masks did not cancel"):
        unmask_sum("brierDS", answers)


def test_rebinding_a_symbol_at_one_site_does_not_isolate_it(tmp_path):
    """The same call text, but D rebound at s1 only (a subset): the masks are bound to how each
    symbol the call reads was made, so the second sum does not decode (instead of letting the
    difference of the two sums give s1's left-out records; found in review)."""
    rules = rules_variant(tmp_path / "rules.toml", require="true")
    _, prov, services = sites(tmp_path, rules=rules)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        first = s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))
        t = s.transports["s1"]
        t.request("POST", f"/sessions/{s.session_ids['s1']}/assign",
                  {"symbol": "D", "call": Call("subsetRowsDS", Ref("D"), "x", ">", 0.0).tree()})
        with pytest.raises(ValueError, match="masks did not cancel"):
            s.secure_sum("brierDS", Ref("D$y"), Ref("D$score"))
    assert first["n"] == 3 * 240


def test_symbols_made_alike_at_every_site_sum_normally(tmp_path):
    """The binding to definitions does not get in the way of an honest analyst: a subset made at
    every site by the same call sums as the plain per-site values do."""
    _, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        s.assign_table("D", "P.t")
        s.assign("S", Call("subsetRowsDS", Ref("D"), "x", ">", 0.0))
        plain = s.aggregate("brierDS", "S$y", "S$score")
        secure = s.secure_sum("brierDS", "S$y", "S$score")
    assert secure["n"] == sum(r["n"] for r in plain.values())
    assert secure["sum_y"] == sum(r["sum_y"] for r in plain.values())


@pytest.mark.parametrize("round_id", ["0" * 31, "A" * 32, "0" * 32 + "\n", "g" * 32])
def test_malformed_round_ids_are_refused(tmp_path, round_id):
    _, prov, services = sites(tmp_path)
    with session_over(prov, services, ["s1", "s2", "s3"]) as s:
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate("secureKeyDS", round_id)
    assert all("32 lower-case hex digits" in str(e) for e in exc.value.failures.values())
