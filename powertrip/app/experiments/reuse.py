"""What a compare's or sweep's --out already holds for each of its runs, and what becomes of
it: a finished run with the same settings is reused, an interrupted one resumed from its
checkpoint, one with other settings run again, and a directory that is not a run never
touched. An interrupted `make demo` so continues where it stopped."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from powertrip.app.experiments.launcher import Deployment
from powertrip.app.experiments.runner import RunOutcome, run_once
from powertrip.core import runfiles
from powertrip.core.config import ConfigError, RunConfig, experiment_differences


@dataclass
class PlannedRun:
    name: str
    config: RunConfig
    run_dir: Path
    label: str = ""


def check_run_dir(run_dir: Path) -> None:
    """compare and sweep reuse, resume or replace the runs in their --out; a directory
    there that is not a run (no run-config.yaml) is never replaced."""
    if run_dir.exists() and not (run_dir / runfiles.REQUESTED_CONFIG).is_file():
        if not run_dir.is_dir() or any(run_dir.iterdir()):
            raise ConfigError(
                f"--out: {run_dir} exists and is not a run directory (no run-config.yaml); "
                "choose another --out"
            )


def previous_run(run_dir: Path, config: RunConfig) -> tuple[str, dict | str | None]:
    """What `run_dir` holds for a run of `config`, judged as reproduce judges its runs
    (powertrip.app.experiments.plan.is_done: a "done" summary and the same settings):
    ("none", None) nothing; ("done", summary) a finished run with the same settings, to
    reuse; ("unfinished", None) the same settings, stopped before its summary, with a
    checkpoint to resume from; ("other", why) anything else, to run again."""
    config_file = run_dir / runfiles.REQUESTED_CONFIG
    summary_file = run_dir / runfiles.SUMMARY
    if not config_file.is_file():
        return "none", None  # nothing run there (check_run_dir refuses a foreign directory)
    try:
        stored = yaml.safe_load(config_file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "other", "an unreadable run-config.yaml"
    if not isinstance(stored, dict):
        return "other", "an unreadable run-config.yaml"
    # only execution settings may differ (powertrip.core.config.EXECUTION_SETTINGS); max_sim_hours
    # must match here: it is a policy's time budget, part of its result
    differ = experiment_differences(stored, config.to_dict())
    if differ:
        return "other", f"a run with other settings ({', '.join(differ)})"
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, ValueError):
        summary = None
    if isinstance(summary, dict):
        if summary.get("status") == "done" and summary.get("stopped_reason") not in (
            None,
            "",
            "failed",
        ):
            return "done", summary
        return "other", f"a failed run ({summary.get('message') or summary.get('status')})"
    if (run_dir / runfiles.CHECKPOINT_DIR).is_dir():
        return "unfinished", None
    return "other", "an unfinished run without a checkpoint"


class ReusingRunner:
    """Runs a command's runs on one deployment, started only when a run is not reused."""

    def __init__(self, out: Path, args: argparse.Namespace, stack: contextlib.ExitStack):
        self.out, self.args, self.stack = out, args, stack
        self.deployment: Deployment | None = None

    def run(self, name: str, config: RunConfig, run_dir: Path, *, label: str = "") -> RunOutcome:
        state, found = previous_run(run_dir, config)
        if state == "done" and isinstance(found, dict):
            print(f"{name}: already finished in {run_dir}, reused")
            return RunOutcome(run_dir, found)
        if state == "other":
            check_run_dir(run_dir)  # only ever a run directory is replaced
            print(f"{name}: {run_dir} holds {found}; running it again")
            shutil.rmtree(run_dir)
        elif state == "unfinished":
            print(f"{name}: resuming the unfinished run in {run_dir}")
        if self.deployment is None:
            self.deployment = self.stack.enter_context(
                Deployment(self.out / "base-config.yaml", self.out / "logs")
            )
        return run_once(
            config,
            run_dir,
            self.deployment,
            label=label,
            show_progress=not self.args.quiet,
            resume=state == "unfinished",
        )
