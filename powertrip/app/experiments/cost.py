"""What a reproduce command will cost before it starts (`powertrip reproduce --plan`).

A study states its number of runs and its CPU hours up front. The estimate is fitted on the
finished runs already in the output directory, on this machine: each round's wall time
(wall.csv) against its number of sites k (rounds.csv), wall_round ~ a + b k (a: the
evaluation and the round's fixed work; b: one site's local training), over the runs whose
sites train 10 steps of batch 20. A planned run is charged its expected rounds times
a + b' k, b' = b scaled by its own local_steps x batch_size against those 200 samples, with
k and the rounds taken from the finished runs of the same arm (static k: its k; any other
policy: its mean k) and, where there are none, k from the arm and `max_rounds` rounds: an
upper bound (exact for a run with no target or budget to end it sooner). a is not scaled:
a larger evaluation set costs more than it says. Wall seconds of one run are CPU seconds
times the cores a run uses, so the total is given in both.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from powertrip.app.experiments.plan import arm_config, is_done, variant_config
from powertrip.app.experiments.suite import RunSpec, Variant
from powertrip.core import runfiles
from powertrip.core.config import RunConfig

#: used when no finished run in OUT can be fitted: measured on the 2-core machine this
#: project is developed on (FEMNIST, 10 local steps of batch 20, 2,000 evaluation samples)
FALLBACK_ROUND_S = (1.6, 0.14)
#: k assumed for a policy with no finished run to learn its mean k from
UNKNOWN_K = 10
#: samples a site trains per round in the runs the fit reads (10 local steps of batch 20);
#: a planned run with more or less local work has its per-site cost b scaled by the ratio
REFERENCE_SITE_WORK = 200


def _site_work(run: Path) -> int | None:
    """local_steps x batch_size of a finished run, from its stored configuration."""
    import yaml

    try:
        config = yaml.safe_load((run / runfiles.CONFIG).read_text()) or {}
        return int(config["local_steps"]) * int(config["batch_size"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return None


@dataclass(frozen=True)
class RunCost:
    spec: RunSpec
    k: float
    rounds: float
    wall_s: float
    #: False when no finished run of this arm told the rounds: max_rounds, an upper bound
    measured: bool


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open() as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def round_cost_fit(run_dirs: Iterable[Path]) -> tuple[float, float, int]:
    """(a, b, rounds used): least squares of wall_round_s on k over the finished runs'
    rounds; the fallback when fewer than 10 rounds or a single k were seen."""
    ks, walls = [], []
    for run in run_dirs:
        if _site_work(run) not in (None, REFERENCE_SITE_WORK):
            continue  # a site-round of other work: not on the same line
        rounds = {r["round"]: r for r in _rows(run / runfiles.ROUNDS)}
        for row in _rows(run / runfiles.WALL):
            match = rounds.get(row.get("round", ""))
            if match is None:
                continue
            try:
                ks.append(float(match["k"]))
                walls.append(float(row["wall_round_s"]))
            except (KeyError, ValueError):
                continue
    if len(ks) < 10 or len(set(ks)) < 2:
        return (*FALLBACK_ROUND_S, len(ks))
    b, a = np.polyfit(np.array(ks), np.array(walls), 1)
    return max(float(a), 0.0), max(float(b), 0.0), len(ks)


def _finished(out: Path) -> list[Path]:
    found = []
    for summary in (out / "runs").glob("*/seed*/*/" + runfiles.SUMMARY):
        try:
            if json.loads(summary.read_text()).get("status") == "done":
                found.append(summary.parent)
        except (OSError, ValueError):
            continue
    return found


def _arm_histories(runs: Sequence[Path]) -> dict[str, tuple[list[float], list[float]]]:
    """Arm name -> (rounds, mean k) of its finished runs, any set-up and seed: read once,
    not once a planned run."""
    found: dict[str, tuple[list[float], list[float]]] = {}
    for run in runs:
        summary = json.loads((run / runfiles.SUMMARY).read_text())
        if summary.get("rounds"):
            rounds, mean_k = found.setdefault(run.name, ([], []))
            rounds.append(float(summary["rounds"]))
            mean_k.append(float(summary.get("mean_k") or 0.0))
    return found


def estimate(
    runs: Sequence[RunSpec],
    out: Path,
    base: RunConfig,
    *,
    variants: Mapping[str, Variant],
    force_workload: bool = False,
) -> tuple[list[RunCost], tuple[float, float, int]]:
    """The runs still to make (those not finished with the same settings) and their cost,
    each run's set-up read from `variants` by name."""
    finished = _finished(out)
    fit = round_cost_fit(finished)
    a, b, _ = fit
    histories = _arm_histories(finished)
    costs = []
    for spec in runs:
        variant = variants[spec.variant]
        config = arm_config(
            variant_config(base, variant, spec.seed, force_workload=force_workload),
            spec.arm,
            variant,
        )
        if is_done(spec.path(out), config):
            continue
        rounds, mean_k = histories.get(spec.arm.name, ([], []))
        k = config.policy_params.get("k") if spec.arm.policy == "static" else None
        if k is None:
            k = statistics.median(mean_k) if mean_k else UNKNOWN_K
        n_rounds = float(config.max_rounds)
        # no target or budget to stop it: exactly max_rounds, whatever arms of its name took
        exact = _runs_every_round(config)
        if rounds and not exact:
            n_rounds = min(statistics.median(rounds), n_rounds)
        scale = config.local_steps * config.batch_size / REFERENCE_SITE_WORK
        wall = n_rounds * (a + b * scale * float(k))
        costs.append(RunCost(spec, float(k), n_rounds, wall, measured=exact or bool(rounds)))
    return costs, fit


def _runs_every_round(config: RunConfig) -> bool:
    """A run that nothing ends before max_rounds (Fig. 11's regime check): no reachable
    accuracy target, no perplexity target, no time budget. Other arms' round counts of the
    same name (which stopped at a target) say nothing about it."""
    return (
        config.target_accuracy >= 1.0 and not config.target_perplexity and config.max_sim_hours <= 0
    )


def plan_lines(costs: Sequence[RunCost], fit: tuple[float, float, int], cores: int) -> list[str]:
    """What `--plan` prints: one line a run, then the totals."""
    a, b, used = fit
    lines = [
        f"plan: round wall time ~ {a:.2f} s + {b:.3f} s x k"
        + (
            f" (fitted on {used} finished rounds here)"
            if used >= 10
            else " (no finished runs here to fit: this project's 2-core figures)"
        )  # fmt: skip
    ]
    for c in costs:
        bound = "" if c.measured else " (max_rounds: an upper bound)"
        lines.append(
            f"  {c.spec.variant}/s{c.spec.seed}/{c.spec.arm.name}: k ~ {c.k:.0f}, "
            f"{c.rounds:.0f} rounds{bound}, ~{c.wall_s / 60:.0f} min"
        )
    total = sum(c.wall_s for c in costs)
    lines.append(
        f"plan: {len(costs)} run(s) to make, ~{total / 3600:.1f} h of wall time one run at a "
        f"time, ~{total * cores / 3600:.1f} CPU hours on {cores} core(s)"
    )
    return lines
