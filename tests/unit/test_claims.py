"""The claims logic: CIs over seeds, censored (cut-off) times, verdicts, the CSV."""

from __future__ import annotations

import csv
import math

import pytest

from powertrip.app.report import claims as C


def test_mean_ci_matches_the_t_interval():
    est = C.mean_ci([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.3027 -> half width 4.3027 / sqrt(3)
    assert est.mean == pytest.approx(2.0)
    assert est.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert est.n == 3
    assert est.contains(0.0) and not est.contains(5.0)


def test_mean_ci_single_and_empty():
    one = C.mean_ci([0.7])
    assert one.mean == 0.7 and math.isnan(one.half_width) and one.n == 1
    assert not one.contains(0.7)  # no interval with one seed
    none = C.mean_ci([])
    assert none.n == 0 and math.isnan(none.mean)
    assert C.mean_ci([1.0, float("nan"), 3.0]).n == 2


def test_t_critical_large_df_approaches_normal():
    assert C.t_critical(1000) == pytest.approx(1.96, abs=0.01)
    with pytest.raises(ValueError, match="df"):
        C.t_critical(0)


def test_reduction_bounds_follow_censoring():
    assert C.reduction(C.Sample(50), C.Sample(100)) == C.Bound(0.5, "exact")
    # b cut off at 100 s: b took at least 100 s, so a is at least 50 % faster
    assert C.reduction(C.Sample(50), C.Sample(100, False)).kind == "lower"
    assert C.reduction(C.Sample(50, False), C.Sample(100)).kind == "upper"
    assert C.reduction(C.Sample(50, False), C.Sample(100, False)).kind == "unknown"


def test_growth_is_the_inverse_view_of_reduction():
    g = C.growth(C.Sample(100), C.Sample(108.5))
    assert g.value == pytest.approx(0.085) and g.kind == "exact"


def test_holds_positive_verdicts():
    exact = [C.Bound(v) for v in (0.30, 0.35, 0.40)]
    assert C.holds_positive(exact) == "yes"
    noisy = [C.Bound(v) for v in (0.5, -0.3, 0.1)]
    assert C.holds_positive(noisy) == "yes*"
    assert C.holds_positive([C.Bound(v) for v in (-0.1, -0.2, -0.15)]) == "no"
    # lower bounds above zero are enough: the truth is larger still
    assert C.holds_positive([C.Bound(0.3, "lower"), C.Bound(0.35), C.Bound(0.33)]) == "yes"
    # a lower bound below zero says nothing
    assert C.holds_positive([C.Bound(-0.2, "lower")] * 3) == "unclear"
    # an upper bound below zero is a clear "no"
    assert C.holds_positive([C.Bound(-0.2, "upper")] * 3) == "no"
    assert C.holds_positive([C.Bound(math.nan, "unknown")]) == "unclear"
    assert C.holds_positive([]) == "n/a"
    assert C.holds_positive([C.Bound(0.2)]) == "yes*"  # one seed: no CI


def test_holds_similar_and_below():
    assert C.holds_similar([C.Bound(v) for v in (0.02, -0.03, 0.05)]) == "yes"
    assert C.holds_similar([C.Bound(v) for v in (0.5, 0.55, 0.6)]) == "no"
    assert C.holds_below(C.mean_ci([0.01, 0.02, 0.015]), 0.05) == "yes"
    assert C.holds_below(C.mean_ci([0.01, 0.09, 0.03]), 0.05) == "yes*"
    assert C.holds_below(C.mean_ci([0.1, 0.12]), 0.05) == "no"


def test_rank_first_with_cut_off_rivals():
    times = {
        "powertrip": [C.Sample(3600), C.Sample(3700)],
        "random": [C.Sample(5000, False), C.Sample(5200, False)],  # cut off, slower anyway
        "radius": [C.Sample(9000), C.Sample(9100)],
    }
    assert C.rank_first("powertrip", times) == ("yes", [])
    times["centralized-50"] = [C.Sample(3000), C.Sample(3100)]
    verdict, faster = C.rank_first("powertrip", times)
    assert verdict == "no" and faster == ["centralized-50"]
    times["centralized-50"] = [C.Sample(3000, False), C.Sample(3100, False)]
    assert C.rank_first("powertrip", times)[0] == "unclear"


def test_faster_claim_text_and_verdict():
    times = {
        "powertrip": [C.Sample(0.65 * 3600), C.Sample(0.70 * 3600), C.Sample(0.60 * 3600)],
        "static-k*": [C.Sample(1.16 * 3600), C.Sample(1.20 * 3600), C.Sample(1.10 * 3600)],
    }
    row = C.faster_claim("9", "powertrip", "static-k*", times, 0.65, 1.16, 0.44)
    assert row.holds == "yes"
    assert row.paper == "0.65 h vs 1.16 h (-44 %)"
    assert row.ours.startswith("0.65 ± ") and "(-44 % ±" in row.ours
    assert row.seeds == 3
    # the paper's -44 % lies inside our CI: nothing to explain
    assert not row.differs and C.why_differs(row, {"seeds": 3}) == ""


def test_faster_claim_with_cut_off_baseline_is_a_bound():
    times = {
        "powertrip": [C.Sample(3600), C.Sample(3600)],
        "radius": [C.Sample(5400, False), C.Sample(5400, False)],
    }
    row = C.faster_claim("9", "powertrip", "radius", times, 0.65, 2.9, None)
    assert row.holds == "yes"  # both seeds: PowerTrip at least 33 % faster
    assert "≤ -33 %" in row.ours and "cut off" in row.ours
    assert row.paper == "0.65 h vs 2.9 h (-78 %)"
    assert row.differs


def test_why_differs_is_driven_by_the_facts():
    row = C.ClaimRow("9", "c", "p", "o", "no", 3, differs=True, reasons=["specific"])
    facts = {
        "subset": "FEMNIST subset",
        "lr": 0.1,
        "paper_lr": 0.01,
        "local_steps": 10,
        "seeds": 3,
        "budget_factor": 1.5,
        "hardware": "2 CPU cores",
    }
    why = C.why_differs(row, facts)
    assert why.startswith("specific; FEMNIST subset; lr 0.1 (paper 0.01)")
    assert "3 seeds (paper 10)" in why and "1.5x" in why and "2 CPU cores" in why
    facts["lr"] = 0.01
    assert "lr" not in C.why_differs(row, facts)
    agree = C.ClaimRow("9", "c", "p", "o", "yes", 3)
    assert C.why_differs(agree, facts) == ""


def test_claims_csv_columns_and_round_trip(tmp_path):
    rows = [
        C.ClaimRow("9", "PowerTrip | fastest", "0.65 h", "0.9 ± 0.1 h", "yes", 3),
        C.ClaimRow("8", "k*", "70", "20", "no", 3, why="scaled"),
    ]
    path = C.write_claims_csv(tmp_path / "claims.csv", rows)
    with path.open() as f:
        header = next(csv.reader(f))
    assert header == list(C.CLAIM_COLUMNS)
    assert {"figure", "claim", "paper", "ours", "holds"} <= set(header)
    back = C.read_claims_csv(path)
    assert back[0]["claim"] == "PowerTrip | fastest" and back[1]["why"] == "scaled"
    md = C.claims_markdown(back, "# head")
    assert md.startswith("# head") and "PowerTrip \\| fastest" in md
    bad = tmp_path / "bad.csv"
    bad.write_text("figure,claim\n9,x\n")
    with pytest.raises(ValueError, match="missing column"):
        C.read_claims_csv(bad)
