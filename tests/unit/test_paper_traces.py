"""Paper Figs. 2 and 3 from the shipped power trace (no runs), and Fig. 12's maximum-spare
claim as the paper states it (issue #36)."""

from __future__ import annotations

from powertrip.app.report import claims as C
from powertrip.core.config import RunConfig
from reproduction.paper import fig02, fig03, fig12
from reproduction.paper.data import VariantData

META = {"seeds": [0], "sweep_k": [], "base_config": RunConfig().to_dict(), "cores": 2}


def test_figs_2_and_3_render_from_the_trace_alone(tmp_path):
    from reproduction.paper.render import render_all

    reports = render_all(tmp_path, ["2", "3"], META)
    for key, png in (("2", "fig2_power_utilisation.png"), ("3", "fig3_pdu_power.png")):
        assert reports[key] == tmp_path / f"fig{key}" / "report.html"
        assert (tmp_path / f"fig{key}" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png in reports[key].read_text()
    rows = {r["claim"]: r for r in C.read_claims_csv(tmp_path / "fig2" / "claims.csv")}
    within = rows["each site's mean power utilisation lies within 49-74 % (§2.1)"]
    # cell a's PDUs: 70.2-73.6 % mean measured utilisation (data/google-power/README.md)
    assert within["holds"] == "yes" and "70.2%-73.6%" in within["ours"]
    assert "not production" in within["ours"]
    spread = rows["across the 10 sites the mean varies from 49 % to 74 % (§2.1)"]
    assert spread["holds"] == "n/a" and "1 cell" in spread["why"]
    fig3 = C.read_claims_csv(tmp_path / "fig3" / "claims.csv")
    assert [r["holds"] for r in fig3] == ["yes"]


def test_fig2_sites_are_the_pdus_of_cell_a_and_the_cell():
    sites = fig02.sites_of(fig02.domains_of(META))
    assert [s.label for s in sites] == [
        *(f"cell a / pdu{n}" for n in range(6, 11)),
        "cell a (mean of 5 PDUs)",
    ]
    assert round(float(sites[-1].utilisation.mean()), 4) == 0.7183  # README: cell a 0.7183


def test_fig3_daily_swings():
    swings = [fig03.daily_swings(d) for d in fig02.domains_of(META)]
    assert all(len(s) == 31 for s in swings)  # May 2019, whole days
    assert min(float(s.min()) for s in swings) > 0.04


def test_fig12_tests_the_papers_26_to_51_percent():
    v = VariantData("trace", "trace", ["powertrip"], seeds=[0])
    row = fig12.max_spare_claim(v, META)
    assert row.paper == "26%-51%"
    # 1 - min utilisation per PDU of cell a: 36.3-38.9 % (README: spare ranges)
    assert row.holds == "yes" and "36.3%-38.9%" in row.ours and "5 of 5 inside" in row.ours
    claims = {r.claim: r for r in fig12.claims({"trace": v}, META)}
    assert row.claim in claims
    ours = claims["ours: trace power at t = 0 is lower than uniform U[0.1, 1]'s (mean 55 %)"]
    assert ours.ours == "not run" and ours.holds == "n/a"
