"""results/INDEX.md (reproduction/paper/index.py): generated from the run folders and the
figure registry, headline rows picked from the claims; the committed one is what the code
renders from the committed runs and claims."""

from __future__ import annotations

from pathlib import Path

from reproduction.paper import index as I
from tests.unit.test_reproduce import write_run

RESULTS = Path(__file__).resolve().parents[2] / "results"


def test_ranges_and_arms_fold_into_short_text():
    assert I.ranges([0, 1, 2, 3, 4, 7, 10, 11]) == "0-4, 7, 10-11"
    assert I.arms_text({"static-k3", "powertrip", "static-k10", "adaptive"}) == (
        "adaptive, powertrip, static k = 3, 10"
    )


def test_folders_say_their_seeds_runs_and_the_figures_that_read_them(tmp_path):
    for seed in (10, 11):
        write_run(tmp_path / "runs/uniform" / f"seed{seed}" / "adaptive", "adaptive", 1.0, [])
    write_run(tmp_path / "runs/orphan/seed0/static-k3", "static", 1.0, [])
    rows = {r[0]: r for r in I.folder_rows(tmp_path / "runs")}
    assert rows["`uniform/`"][1:4] == ["10-11", "2", "adaptive"]
    assert "heldout" in rows["`uniform/`"][4] and "9" in rows["`uniform/`"][4]
    assert rows["`orphan/`"][4] == "none (unread)"


def test_headline_rows_are_the_held_out_comparisons_against_kstar():
    held = "uniform: adaptive against static k* = 3 (chosen on seeds 0-4), held-out seeds"
    dev = held.replace("held-out seeds", "development seeds")
    oracle = "uniform: adaptive against each seed's own best static k, held-out seeds"
    rows = [
        {"figure": "heldout", "claim": c, "ours": "+1%", "holds": "yes"}
        for c in (held, dev, oracle)
    ]
    text = I.index_markdown(Path("/nonexistent"), rows)
    headline = text.split("## Figures")[0]
    assert held in headline and dev not in headline and oracle not in headline


def test_the_committed_index_is_what_the_committed_runs_and_claims_render():
    rows = I.read_claims_markdown(RESULTS / "claims.md")
    assert len(rows) > 50 and {"figure", "claim", "ours", "holds"} <= set(rows[0])
    committed = (RESULTS / "INDEX.md").read_text()
    assert committed == I.index_markdown(RESULTS / "reproduce" / "runs", rows)
