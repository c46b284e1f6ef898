"""The validation report: one self-contained HTML file, checked as text (the numbers, the rules,
what was suppressed, no external asset) and in a real headless Chromium (no console error, no
request beyond the file itself, the plots in the DOM, a screenshot that shows them); written by
``dsfed report`` against real site servers over HTTP and by ``dsfed demo``."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from chromium import Chromium
from dsfed_client.analyses.decision import VALIDATE_GRID
from dsfed_client.analyses.suite import validate
from dsfed_client.report import collect_study_info, write_report
from conftest import FIXTURES, GBSG2_SITES, ROOT, RULES, http_builder, inprocess_builder
from dsfed_server.launch import LocalSites
from dsfed_server.provision import provision
from dsfed_server.disclosure.secure_sum import public_identity
from dsfed_server.service import SiteService
from sitekit import make_sites, write_table

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
PLOTS = ("roc", "pr", "calibration", "hosmer-lemeshow", "logistic", "smooth", "threshold-metrics",
         "decision-curve")  # and "per-site" when checked per site
SECTIONS = ["Study set-up", "Privacy spent", "Discrimination", "Calibration", "Smooth calibration",
            "Decisions at thresholds", "Per-site panels", "Heterogeneity across sites",
            "Disclosure control: what the sites checked and coarsened", "Software and methods"]


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    return {s: pd.read_csv(FIXTURES / s / "GBSG2" / "validation.csv")[["y", "score"]] for s in GBSG2_SITES}


@pytest.fixture(scope="module")
def written(frames, tmp_path_factory):
    """A report over the five GBSG2 sites, noise off, with a ROC overlay and a PR curve given as arrays."""
    tmp = tmp_path_factory.mktemp("report")
    provisioned, services = make_sites(tmp, frames, rules=NO_NOISE)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score")
        study = collect_study_info(session, "D$y", table="P.t", score="D$score")
    pooled = pd.concat(frames.values(), ignore_index=True)
    prevalence = float(pooled.y.mean())
    overlay = (np.array([0.0, 0.1, 0.3, 0.6, 1.0]), np.array([0.0, 0.3, 0.55, 0.8, 1.0]))
    pr = {"precision": np.array([1.0, 0.9, 0.82, prevalence]), "recall": np.array([0.0, 0.3, 0.7, 1.0]),
          "prevalence": prevalence}
    path = write_report(result, tmp / "out" / "report.html", **study, roc_overlay=overlay, pr_curve=pr)
    return result, study, path


def test_study_info_comes_from_the_sites(written, frames):
    _, study, _ = written
    assert {s: i["n"] for s, i in study["sites_info"].items()} == {s: len(f) for s, f in frames.items()}
    for rules in study["rules_info"].values():
        assert rules["disclosure"]["q_threshold"] == 5 and rules["privacy"]["mechanism"] == "none"
        assert rules["budget"]["epsilon_per_analyst"] == 5.0


def test_html_holds_the_numbers_and_inline_plots(written, frames):
    result, _, path = written
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    d = result.discrimination
    for value in (d.auc, *d.ci, d.roc_glm_auc, *d.roc_glm_ci, result.brier.brier,
                  result.brier.spiegelhalter_z, result.logistic.intercept, result.logistic.slope, result.logistic.citl,
                  result.hl_c.statistic, result.hl_h.statistic, result.errors.ece, result.errors.mce,
                  result.smooth.ici, result.smooth.e90, result.smooth.r2):
        assert f">{value:.4f}<" in text, value
    for site, frame in frames.items():
        assert re.search(rf"<td class=\"l\">{site}</td><td class=\"\">{len(frame)}</td>", text), site
    assert "Noise is OFF" in text  # the test profile is named as such on the page
    assert result.mode == "pooled" and "checked by the sites on the cells pooled over the sites" in text
    assert "Calibration curve: checked pooled over the sites; released as requested" in text
    assert "Hosmer-Lemeshow C: groups found and checked pooled over the sites" in text
    assert "q = 5 at these sites" in text and "No per-site results released" in text
    m, dc = result.threshold_metrics, result.decision_curve  # the threshold section: counts, rates with CIs
    for t, row in m.to_frame().iterrows():
        assert f"<td class=\"l\">{t:g}</td><td class=\"\">{int(row.tp)}</td>" in text
        assert f"{row.sensitivity:.3f} ({row.sensitivity_lower:.3f}, {row.sensitivity_upper:.3f})" in text
    assert f"decision curve: {dc.n_thresholds} of {len(VALIDATE_GRID)}" in text
    assert text.count("<svg") == len(PLOTS) and all(f'data-plot="{p}"' in text for p in PLOTS)
    # self-contained: no stylesheet, script or image fetched from anywhere
    assert not re.search(r"<(link|script|iframe)\b", text)
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#|data:)""", text)
    assert "url(http" not in text and "@import" not in text
    assert "matplotlib" in text and "dsfed" in text  # software versions


def test_report_renders_in_headless_chromium(written, tmp_path):
    result, _, path = written
    with Chromium(width=1280, height=900) as browser:
        page = browser.load(path.as_uri(), evaluate={
            "plots": "Array.from(document.querySelectorAll('figure.plot')).map(f => f.dataset.plot)",
            "svg_paths": "Array.from(document.querySelectorAll('figure.plot svg'))"
                         ".map(s => s.querySelectorAll('path').length)",
            "svg_boxes": "Array.from(document.querySelectorAll('figure.plot svg')).map(s => "
                         "{const b = s.getBoundingClientRect(); return [b.width, b.height];})",
            "sections": "Array.from(document.querySelectorAll('section h2')).map(h => h.textContent)",
            "text": "document.body.innerText",
        })
        shot = browser.screenshot(tmp_path / "report.png")
    assert page.console_errors == []
    assert page.requests == [path.as_uri()]  # nothing fetched but the file itself
    ev = page.evaluations
    assert ev["plots"] == list(PLOTS)
    assert all(n > 20 for n in ev["svg_paths"])  # drawn curves, bars, axes
    assert all(w > 200 and h > 200 for w, h in ev["svg_boxes"])  # laid out at a visible size
    assert ev["sections"] == SECTIONS
    assert f"{result.discrimination.auc:.4f}" in ev["text"]
    assert shot.stat().st_size > 100_000
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.width == 1280 and image.height > 3000
        colours = image.convert("RGB").resize((320, image.height // 4)).getcolors(maxcolors=1 << 20)
        assert len(colours) > 200  # plots and tables, not a blank page


@pytest.fixture(scope="module")
def own_http_sites(tmp_path_factory):
    """Five GBSG2 site servers of this module's own (their privacy ledgers are not shared with other tests)."""
    run = tmp_path_factory.mktemp("report-sites")
    provisioned = provision(run, {s: (FIXTURES / s, RULES / f"{s}.toml") for s in GBSG2_SITES})
    with LocalSites(provisioned.values(), run / "run") as sites:
        yield provisioned, sites.urls


def test_dsfed_report_cli_over_http(own_http_sites, tmp_path):
    """``dsfed report --sites FILE --out FILE`` against five real site servers with the noise on."""
    provisioned, urls = own_http_sites
    sites = {name: {"url": url, "user": provisioned[name].credentials["analyst"].user,
                    "password": provisioned[name].credentials["analyst"].password} for name, url in urls.items()}
    sites_file = tmp_path / "sites.json"
    sites_file.write_text(json.dumps({"sites": sites, "table": "GBSG2.validation", "truth": "y", "score": "score"}))
    out = tmp_path / "report.html"
    run = subprocess.run([sys.executable, "-m", "dsfed_client.cli", "report", "--sites", str(sites_file),
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"Report written to {out}" in run.stdout and "ROC-GLM AUC" in run.stdout and "pooled" in run.stdout
    assert run.stderr == ""  # not a terminal: no progress output
    text = out.read_text()
    assert "Noise is OFF" not in text and "analytic_gaussian" in text
    with http_builder(provisioned, urls).login() as session:
        listing = session.functions()
    for name in urls:
        privacy = listing[name]["rules"]["privacy"]
        assert privacy["mechanism"] == "analytic_gaussian"
        assert f"<td class=\"l\">{name}</td>" in text
    # no PR curve given, no per-site panel (pooled); no H-L C plot where the sites withheld its groups (said why)
    withheld = 'id="hosmer-lemeshow-absent"' in text
    assert text.count("<svg") == len(PLOTS) - 1 - withheld
    assert withheld == ('data-plot="hosmer-lemeshow"' not in text)

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sites": {}}))
    refused = subprocess.run([sys.executable, "-m", "dsfed_client.cli", "report", "--sites", str(bad), "--out",
                              str(tmp_path / "x.html")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "sites" in refused.stderr and not (tmp_path / "x.html").exists()


@pytest.mark.slow
def test_demo_writes_the_report(tmp_path):
    out, report = tmp_path / "demo.json", tmp_path / "custom" / "validation.html"
    run = subprocess.run([sys.executable, "-m", "dsfed_client.cli", "demo", "--json", str(out), "--report",
                          str(report)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"Validation report written to {report}" in run.stdout
    data = json.loads(out.read_text())
    text = report.read_text()
    assert f">{data['validation']['discrimination']['auc']:.4f}<" in text
    assert f">{data['validation']['brier']['brier']:.4f}<" in text
    assert "audit hash chains verified at 6 of 6 sites (the training site&#x27;s included)" in text


def test_report_takes_the_histogram_based_curves(frames, tmp_path):
    """The ROC/PR curves of dsfed_client.analyses.curves go into the ROC plot (overlay) and a PR plot
    (noise on: exact small histograms of these small sites would be refused); checked per site, the
    report has the per-site panels and says why the per-site path was taken."""
    from dsfed_client.analyses.curves import ds_roc_pr_curves

    provisioned, services = make_sites(tmp_path / "sites", frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score", secure=False)
        curves = ds_roc_pr_curves(session, "D$y", "D$score")
        study = collect_study_info(session, "D$y", table="P.t", score="D$score")
    text = write_report(result, tmp_path / "curves.html", **study, curves=curves).read_text()
    # per site: no pooled knots, so the smooth calibration is skipped and says why
    assert result.smooth is None and "smooth calibration skipped" in text
    assert text.count("<svg") == len(PLOTS) + 1 and 'data-plot="pr"' in text and 'data-plot="per-site"' in text
    assert 'data-plot="forest"' in text and result.heterogeneity.available  # per site: heterogeneity too
    assert "Every binned release was checked by each site on its own cells: asked for per-site checking" in text
    assert 'id="roc-overlay' in text and 'id="pr-curve' in text
    assert text.count("score histograms (ROC/PR curves)") == len(GBSG2_SITES)


@pytest.fixture(scope="module")
def messy_explored(tmp_path_factory):
    """The messy corpus's three hospitals (complete cases of y and risk_score) under the shipped
    default rules, in-process, after an exploratory histogram of the score released cuts on it."""
    from dsfed_client import Ref
    from dsfed_server.messy import write_corpus

    tmp = tmp_path_factory.mktemp("messy")
    frames = {s.name: s.truth[["y", "risk_score"]].dropna().rename(columns={"risk_score": "score"})
              .reset_index(drop=True) for s in write_corpus(tmp / "corpus", dataset="three_hospitals", seed=37)}
    spec = {}
    for name, frame in frames.items():
        write_table(tmp / "data" / name, frame)
        spec[name] = (tmp / "data" / name, RULES / "default.toml")
    provisioned = provision(tmp / "run", spec)
    # fixed secrets, the peers' pinned keys changed with them: the gate's secret margins (and the noise)
    # are the same on every run of this test
    keys = {name: public_identity(site.secret.read_bytes()) for name, site in provisioned.items()}
    for k, site in enumerate(provisioned.values()):
        site.secret.write_bytes(bytes([k + 1]) * 32)
    fixed = {name: public_identity(site.secret.read_bytes()) for name, site in provisioned.items()}
    for site in provisioned.values():
        text = site.config.read_text()
        for name in keys:
            text = text.replace(keys[name], fixed[name])
        site.config.write_text(text)
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.aggregate("histogramDS", Ref("D$score"), [0.0503, 0.1497, 0.2501, 0.3499, 0.4502])
        pooled = validate(session, "D$y", "D$score")
        per_site = validate(session, "D$y", "D$score", secure=False)
    return tmp, frames, pooled, per_site


@pytest.mark.timeout(900)  # the first to run builds messy_explored: 290 s on two slow cores
def test_the_text_summary_fits_100_columns_and_keeps_every_value_and_note(messy_explored):
    _, frames, pooled, per_site = messy_explored
    for result in (pooled, per_site):
        text = result.summary()
        assert max(map(len, text.splitlines())) <= 100, text
        words = " ".join(text.split())
        for note in result._notes():
            assert " ".join(note.split()) in words
        frame = result.to_frame()
        assert f"{frame.loc['Brier score', 'estimate']:.4f}" in text
        truth = pd.concat(frames.values())
        assert frame.loc["Brier score", "estimate"] == pytest.approx(((truth.score - truth.y) ** 2).mean(), rel=1e-9)


@pytest.mark.timeout(900)  # the first to run builds messy_explored: 290 s on two slow cores
def test_a_coarsened_curve_says_which_edges_it_merged_and_no_more(messy_explored):
    """The note's count of cells and its list of edges agree with the edges released: every edge
    asked and not released is named, no released edge is named, and the count is the released one."""
    _, _, pooled, per_site = messy_explored
    for result in (pooled, per_site):
        bins = result.curve.bins
        note = bins.note()
        if not bins.was_coarsened:
            assert note.endswith("released as requested")
            continue
        cells = re.search(r"COARSENED to (\d+) of (\d+) cells asked", note)
        assert (int(cells.group(1)), int(cells.group(2))) == (bins.edges.size - 1, bins.requested.size - 1)
        named = {float(v) for v in re.findall(r"(?<![\w.])(\d\.\d+)(?![\d])", note.split("cells asked", 1)[1])}
        missing = {round(float(v), 4) for v in bins.requested if not np.isclose(bins.edges, v).any()}
        assert missing <= {round(v, 4) for v in named}
        assert not any(np.isclose(bins.edges, v).any() and v not in {a for m in bins.moved.values() for a, _ in m}
                       and not np.isclose(v, [b for m in bins.moved.values() for _, b in m]).any()
                       for v in named)
    assert per_site.curve.bins.was_coarsened, "the exploratory histogram's cuts coarsened the per-site curve"


@pytest.mark.timeout(900)  # the first to run builds messy_explored: 290 s on two slow cores
def test_merged_hosmer_lemeshow_groups_are_drawn_and_explained(messy_explored):
    """After the exploratory histogram, some deciles of risk lie a few records from its edges: the sites
    move those breaks onto the histogram's edges, or merge their groups where they cannot (the statistics
    are the groups' released, never withheld ones'), and the report draws the groups released and says
    what was moved or merged, and why."""
    tmp, _, pooled, _ = messy_explored
    c = pooled.hl_c
    edges = set(c.table.lower) | set(c.table.upper)
    assert not c.table.empty and not c.complete and "moved onto cuts released before" in c.note()
    assert edges & {0.0503, 0.1497, 0.2501, 0.3499, 0.4502}, "breaks moved onto the histogram's edges"
    assert c.df == len(c.table) - 2
    html = write_report(pooled, tmp / "merged.html").read_text()
    assert 'data-plot="hosmer-lemeshow"' in html and 'id="hosmer-lemeshow-absent"' not in html
    note = f"Hosmer-Lemeshow C: {c.note()}".replace("'", "&#x27;")
    assert note in html and "disclosure.cut_history" in note

