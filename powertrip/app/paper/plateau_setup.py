"""What a plateau run is, apart from its training: the settings (the uniform set-up in the
plateau regime), the site table, the clock's charge for a round and the policy's Context,
each as the services build them; and the replay of a written run's decisions from them.

Shared by the runner (`plateau_policies.py`) and the figure (`plateau_target.py`, which
replays committed runs), so that neither imports the other.
"""

from __future__ import annotations

import math

import numpy as np

from powertrip.app.paper.plateau_draws import TARGET
from powertrip.core.config import ConfigError, RunConfig

#: the plateau regime of results/fig11-plateau/ on the uniform set-up (Figs. 8-9): the
#: regime check's learning (lr 0.01, one mean local epoch, the whole held-out split) and the
#: target where k = 10 levels off (62 % at rounds 208-217 there)
PLATEAU_SETTINGS: dict[str, object] = {
    "lr": 0.01,
    "local_steps": 21,
    "eval_samples": 1_000_000,  # more than the split holds: all of it
    "target_accuracy": TARGET,
    "max_rounds": 400,
    "max_sim_hours": 0.0,
}
#: the uniform set-up's settings that differ from RunConfig's defaults (its run-config.yaml)
UNIFORM_SETTINGS: dict[str, object] = {"update_size_gb": 1.5, "tau_s": 60.0}


def plateau_config(policy: str, params: dict[str, float], seed: int, **settings) -> RunConfig:
    """The run's configuration: RunConfig's defaults, the uniform set-up, the plateau regime,
    then `settings`; resolved against the workload's defaults and checked."""
    from powertrip.core.workloads import get_workload

    values = {**UNIFORM_SETTINGS, **PLATEAU_SETTINGS, **settings}
    values.update(policy=policy, policy_params=dict(params), seed=seed)
    run = RunConfig().with_values(values)
    run = run.resolved(get_workload(run.workload).defaults).validate()
    check_supported(run)
    return run


def check_supported(run: RunConfig) -> None:
    """Refuse, by name, what this loop does not model."""
    if run.work_model != "local-steps":
        raise ConfigError(f"work_model: only local-steps is modelled here, got {run.work_model!r}")
    if run.power != "uniform":
        raise ConfigError(f"power: only uniform is modelled here, got {run.power!r}")
    if run.clock != "simulated":
        raise ConfigError(f"clock: only simulated is modelled here, got {run.clock!r}")


def site_table(run: RunConfig):
    """The policy's site table, as the policy service builds it from the profiler's uniform
    profiles (configured links, constant power, all alive). Refused for any other power
    model: a trace's power changes every round, so one table built from its start would
    replay a different run (a trace run at 45 % departs from itself at round 22)."""
    if run.power != "uniform":
        raise ConfigError(
            f"power: a replay builds one site table with constant power, so only uniform "
            f"power replays; got {run.power!r} (its power changes every round)"
        )
    from powertrip.core.policies import SiteTable
    from powertrip.core.profiles import generate_population

    sites = generate_population(run.population_spec())
    return SiteTable.build(
        ids=[s.site_id for s in sites],
        power=[s.power_fraction for s in sites],
        distance_miles=[s.distance_miles for s in sites],
        latency_s=[s.latency_s for s in sites],
        bandwidth_bytes_per_s=[s.bandwidth_bytes_per_s for s in sites],
        update_size_bytes=run.update_size_bytes,
        directions=run.comm_directions or 2,
    )


def charged_round(run: RunConfig, table, rows: np.ndarray):
    """The simulated clock's round for the sites at `rows` of `table` (local-steps):
    (RoundTime, {site: its compute + communication})."""
    from powertrip.core.timemodel import SiteTime, compute_time_s, round_time, site_comm_s

    _, comm = site_comm_s(
        table.latency_s[rows],
        table.bandwidth_bytes_per_s[rows],
        run.update_size_bytes,
        run.comm_directions,
    )
    times = [
        SiteTime(str(table.ids[r]), compute_time_s(run.tau_s, float(table.power[r])), float(c))
        for r, c in zip(rows, comm.tolist(), strict=True)
    ]
    return round_time(times, aggregation_s=run.aggregation_s), {t.site_id: t.total_s for t in times}


def context_of(run: RunConfig, table, history: list, round_no: int):
    """The policy's Context for round `round_no`, as the policy service builds it from the
    aggregator's request (no target: inf)."""
    from powertrip.core.policies import Context

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


def replay(run: RunConfig, rows: list[dict]) -> list:
    """The policy's decision of every round of a written run, from the rounds before it:
    a policy is a pure function of its context, so this gives back the run's k and sites
    and says why (each Decision's explanation). The CSV holds each round's k, sites,
    accuracy and round time, which is all that `powertrip`, `adaptive` and `static` read;
    policies that read the sites' reported losses (oort) would see none."""
    from powertrip.core.policies import PastRound, get_policy

    policy = get_policy(run.policy)
    table = site_table(run)
    history: list = []
    decisions = []
    for round_no, row in enumerate(rows, 1):
        decisions.append(policy.select(context_of(run, table, history, round_no)))
        sites = tuple(row["sites"].split(";"))
        history.append(
            PastRound(
                round_no, len(sites), float(row["accuracy"]), float(row["round_time_s"]), sites
            )
        )
    return decisions


def replays_as_written(run: RunConfig, rows: list[dict]) -> bool:
    """Whether `run`'s policy, replayed on the written rounds, chooses every round's sites
    as written (the same k and the same sites, in rank order)."""
    table = site_table(run)
    return all(
        list(decision.order) == list(table.rows_of(row["sites"].split(";")))
        for decision, row in zip(replay(run, rows), rows, strict=True)
    )
