"""bench/demo.py's accounting of the demo: site-steps from rounds.csv x local steps, and the
rounds' wall by phase from wall.csv, and the samples evaluated (demo_vs_loop and
demo_vs_work divide by these)."""

from __future__ import annotations

from pathlib import Path

from bench.demo import demo_work


def _run(root: Path, name: str, ks: list[int], steps: int, eval_samples: int = 2000) -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"local_steps: {steps}\neval_samples: {eval_samples}\n")
    rows = "\n".join(f"{i + 1},{k}" for i, k in enumerate(ks))
    (run / "rounds.csv").write_text(f"round,k\n{rows}\n")
    wall = "\n".join(f"{i + 1},2.0,1.5,0.25,0.05" for i in range(len(ks)))
    (run / "wall.csv").write_text(
        f"round,wall_round_s,wall_train_s,wall_eval_s,wall_record_s\n{wall}\n"
    )


def test_demo_work_counts_every_runs_site_steps_and_phases(tmp_path):
    _run(tmp_path, "powertrip", [5, 6, 8], steps=10)
    _run(tmp_path, "static", [30, 30], steps=4, eval_samples=500)
    done = demo_work(tmp_path)
    assert done["site_steps"] == (5 + 6 + 8) * 10 + 60 * 4
    assert done["rounds"] == 5
    assert done["eval_samples"] == 3 * 2000 + 2 * 500  # every round evaluates its run's
    assert done["wall_round_s"] == 10.0
    assert done["wall_train_s"] == 7.5
    assert done["wall_eval_s"] == 1.25
