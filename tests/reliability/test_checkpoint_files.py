"""Checkpoint files: atomic pair, integrity checks on load, and the round files trimmed to
the checkpoint on resume (including a half-written last line from the crash)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from services.aggregator.checkpoint_store import (
    CheckpointError,
    load_checkpoint,
    write_checkpoint,
)
from services.aggregator.records import RoundRow, RunRecorder, WallTimes


def _row(n: int) -> RoundRow:
    return RoundRow(
        round=n, sim_time_s=10.0 * n, round_time_s=10.0, k=2, sites="site-000;site-001",
        accuracy=0.1 * n, loss=1.0 / n, compute_s=5.0, comm_s=4.0, wait_s=1.0,
        aggregation_s=1.0, predicted_round_time_s=9.5, bytes_up=100, bytes_down=200,
        emulated_bytes=3e9, straggler="site-001", mode="federated", train_loss=0.5,
        clock="simulated",
    )  # fmt: skip


def test_checkpoint_round_trip_and_only_latest_model_kept(tmp_path):
    RunRecorder(tmp_path)
    for n in (1, 2):
        write_checkpoint(
            tmp_path, {"w": np.full((2, 3), n, np.float32)}, {"round": n, "x": 0.1 + n}
        )
    weights, state = load_checkpoint(tmp_path)
    assert state["round"] == 2 and state["x"] == 2.1
    np.testing.assert_array_equal(weights["w"], np.full((2, 3), 2, np.float32))
    assert [p.name for p in (tmp_path / "checkpoint").glob("model*.npz")] == ["model-000002.npz"]
    assert load_checkpoint(tmp_path / "elsewhere") is None


@pytest.mark.parametrize("damage", ["corrupt_model", "missing_model", "bad_json", "old_format"])
def test_damaged_checkpoint_is_refused_naming_the_file(tmp_path, damage):
    RunRecorder(tmp_path)
    write_checkpoint(tmp_path, {"w": np.zeros(4, np.float32)}, {"round": 1})
    ckpt = tmp_path / "checkpoint"
    state = ckpt / "state.json"
    if damage == "corrupt_model":
        with (ckpt / "model-000001.npz").open("r+b") as f:
            f.seek(40)
            f.write(b"\xff\xff")
    elif damage == "missing_model":
        (ckpt / "model-000001.npz").unlink()
    elif damage == "bad_json":
        state.write_text("{half")
    else:
        state.write_text(json.dumps({"round": 1}))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path)
    assert str(ckpt) in str(info.value)


def test_resume_trims_round_files_to_the_checkpoint(tmp_path):
    rec = RunRecorder(tmp_path)
    for n in (1, 2, 3):
        rec.add_round(_row(n), {"k": 2}, WallTimes(1.0, 0.5, 0.1, profiles_s=0.002))
    whole = (tmp_path / "rounds.csv").read_bytes()
    # the crash: round 3 was written after the round-2 checkpoint, plus a torn line
    with (tmp_path / "decisions.jsonl").open("a") as f:
        f.write('{"round": 4, "k"')
    RunRecorder(tmp_path, keep_rounds=2)
    lines = whole.split(b"\r\n")
    assert (tmp_path / "rounds.csv").read_bytes() == b"\r\n".join(lines[:3]) + b"\r\n"
    decisions = (tmp_path / "decisions.jsonl").read_text().splitlines()
    assert [json.loads(d)["round"] for d in decisions] == [1, 2]
    phases = "0.002000,0.000000,0.000000,0.000000,0.000000,0.000000"
    assert (tmp_path / "wall.csv").read_text().splitlines()[1:] == [
        f"1,1.000,0.500,0.100,{phases}",
        f"2,1.000,0.500,0.100,{phases}",
    ]
