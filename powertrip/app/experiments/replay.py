"""A stored run's decisions, replayed from its own files.

A policy is a pure function of its context (the site table, the history, the parameters), so
a run directory's config.yaml and rounds.csv are enough to ask the policy again what it
chooses each round and compare with what the run chose. This is how a change to a policy is
shown not to move a committed run (the replay tier, tests/replay/), and how a run is shown
to be what its config says.

The parameters come from the run, never from today's defaults: config.yaml records every
parameter of its policy (`RunConfig.to_dict`), and a run that does not is refused by name,
because replaying it would ask today's defaults, not the ones that made it.

Only runs whose site table is fixed replay this way: uniform power (a trace's power changes
every round) on the simulated clock; the history holds each round's k, sites, accuracy and
round time, which is all that `powertrip`, `adaptive` and `static` read (`oort` also reads
the sites' losses, which rounds.csv does not hold).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from powertrip.core import runfiles
from powertrip.core.config import RunConfig
from powertrip.core.policies import REGISTRY, Context, Decision, PastRound, SiteTable, get_policy
from powertrip.core.policies.objective import for_carbon, idle_ratio

#: policies whose decisions read nothing a rounds.csv lacks
REPLAYABLE = frozenset({"powertrip", "adaptive", "static"})


class ReplayError(ValueError):
    """A run that cannot be replayed; the message says why."""


@dataclass(frozen=True)
class StoredRun:
    path: Path
    config: RunConfig
    rows: list[dict]


def load_stored(path: Path) -> StoredRun:
    """A run directory's resolved config and rounds, checked to be replayable."""
    config = RunConfig.from_run(path / runfiles.CONFIG)
    missing = sorted(set(REGISTRY[config.policy].Params.names()) - set(config.policy_params))
    if missing:
        raise ReplayError(
            f"{path}: its config.yaml does not record the parameter(s) {', '.join(missing)} "
            "of its policy; a replay would take today's defaults, not the run's"
        )
    if config.policy not in REPLAYABLE:
        raise ReplayError(f"{path}: policy {config.policy!r} reads what rounds.csv lacks")
    if config.power != "uniform" or config.clock != "simulated":
        raise ReplayError(
            f"{path}: only uniform power on the simulated clock replays (one fixed site "
            f"table); got power {config.power!r}, clock {config.clock!r}"
        )
    with (path / runfiles.ROUNDS).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return StoredRun(path, config, rows)


def site_table(run: RunConfig) -> SiteTable:
    """The policy's site table, as the policy service builds it from the profiler's uniform
    profiles (configured links, constant power, all alive; a regions population's grids)."""
    from powertrip.core.profiles import generate_population, population_regions

    spec = run.population_spec()
    sites = generate_population(spec)
    carbon = None
    if spec.population == "regions":
        carbon = [r.g_co2_per_kwh for r in population_regions(spec)]
    return SiteTable.build(
        ids=[s.site_id for s in sites],
        power=[s.power_fraction for s in sites],
        distance_miles=[s.distance_miles for s in sites],
        latency_s=[s.latency_s for s in sites],
        bandwidth_bytes_per_s=[s.bandwidth_bytes_per_s for s in sites],
        update_size_bytes=run.update_size_bytes,
        directions=run.comm_directions or 2,
        carbon_g_per_kwh=carbon,
    )


def context_of(run: RunConfig, table: SiteTable, history: list, round_no: int) -> Context:
    """The policy's Context for round `round_no`, as the policy service builds it."""
    return Context(
        table=table,
        update_size_bytes=run.update_size_bytes,
        tau_s=run.tau_s,
        history=tuple(history),
        target_accuracy=run.target_accuracy if run.target_accuracy else math.inf,
        seed=run.seed,
        round=round_no,
        estimator=run.estimator,
        params={k: float(v) for k, v in run.policy_params.items()},
        work_model=run.work_model,
    )


def replay(run: StoredRun) -> list[Decision]:
    """The policy's decision of every round of the run, from the rounds before it."""
    policy = get_policy(run.config.policy)
    table = site_table(run.config)
    history: list[PastRound] = []
    decisions = []
    for round_no, row in enumerate(run.rows, 1):
        ctx = context_of(run.config, table, history, round_no)
        decision = policy.select(ctx)
        if run.config.objective == "carbon":  # as the policy service applies it
            idle = idle_ratio(run.config.gpu_power_w, run.config.gpu_idle_power_w)
            decision = for_carbon(ctx, decision, run.config.carbon_slack, idle)
        decisions.append(decision)
        sites = tuple(row["sites"].split(";"))
        accuracy, time_s = float(row["accuracy"]), float(row["round_time_s"])
        history.append(PastRound(round_no, len(sites), accuracy, time_s, sites))
    return decisions


def first_departure(run: StoredRun) -> int | None:
    """The first round whose replayed sites (k and which, in rank order) differ from the
    written ones; None when every round replays as written."""
    table = site_table(run.config)
    for round_no, (decision, row) in enumerate(zip(replay(run), run.rows, strict=True), 1):
        if list(decision.order) != list(table.rows_of(row["sites"].split(";"))):
            return round_no
    return None
