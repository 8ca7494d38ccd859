"""What a run writes: rounds.csv, decisions.jsonl, summary.json and checkpoints.

Everything in rounds.csv derives from the seed on the simulated clock, so two runs with
the same seed produce identical files; wall-clock timings go to wall.csv instead.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np


@dataclass
class RoundRow:
    round: int
    sim_time_s: float
    round_time_s: float
    k: int
    sites: str
    accuracy: float
    loss: float
    compute_s: float
    comm_s: float
    wait_s: float
    aggregation_s: float
    predicted_round_time_s: float
    bytes_up: int
    bytes_down: int
    emulated_bytes: float
    straggler: str
    mode: str
    train_loss: float
    clock: str


#: rounds.csv columns, in file order: exactly the fields of RoundRow.
ROUND_COLUMNS = [f.name for f in fields(RoundRow)]


def _fmt(value) -> str:
    if isinstance(value, float):
        return repr(round(value, 9))
    return str(value)


class RunRecorder:
    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.rounds_path = self.out_dir / "rounds.csv"
        self.decisions_path = self.out_dir / "decisions.jsonl"
        self.wall_path = self.out_dir / "wall.csv"
        with self.rounds_path.open("w", newline="") as f:
            csv.writer(f).writerow(ROUND_COLUMNS)
        self.decisions_path.write_text("")
        self.wall_path.write_text("round,wall_round_s,wall_train_s,wall_eval_s\n")

    def add_round(self, row: RoundRow, decision: dict, wall: tuple[float, float, float]) -> None:
        values = asdict(row)
        with self.rounds_path.open("a", newline="") as f:
            csv.writer(f).writerow([_fmt(values[c]) for c in ROUND_COLUMNS])
        with self.decisions_path.open("a") as f:
            f.write(json.dumps({"round": row.round, **decision}, sort_keys=True) + "\n")
        with self.wall_path.open("a") as f:
            f.write(f"{row.round},{wall[0]:.3f},{wall[1]:.3f},{wall[2]:.3f}\n")

    def write_summary(self, summary: dict) -> None:
        tmp = self.out_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
        os.replace(tmp, self.out_dir / "summary.json")

    def checkpoint(self, weights: dict[str, np.ndarray], state: dict) -> None:
        """Write the model and loop state atomically (rename), keeping only the latest."""
        ckpt = self.out_dir / "checkpoint"
        ckpt.mkdir(exist_ok=True)
        tmp = ckpt / "model.npz.tmp"
        with tmp.open("wb") as f:
            np.savez(f, **weights)
        os.replace(tmp, ckpt / "model.npz")
        tmp_state = ckpt / "state.json.tmp"
        tmp_state.write_text(json.dumps(state, indent=1))
        os.replace(tmp_state, ckpt / "state.json")
