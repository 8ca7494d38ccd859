"""Figs. 8-9 at the plateau target, in one process: a policy chooses the sites of every
round, the time model charges the round, and the library's training, FedAvg and evaluation
learn, with no services, so that a GPU can run the 200+ rounds that the target where small-k
runs level off (62 %, results/fig11-plateau/) needs.

Why: through the services a round of 100 sites in the plateau regime costs about 150 s of a
core, and a run needs 200+ rounds. The run's numbers do not depend on the processes, only on
what each round computes, which is all library code (the aggregator's own loop is
services/aggregator/round_loop.py; this follows it step by step):

1. the sites: `RunConfig.population_spec()` -> `generate_population`, the profiler's uniform
   power (constant), configured links; every site alive;
2. the decision: the policy (`get_policy(name).select`) on a `Context` built as the policy
   service builds it (the site table, the update size, tau, the history of `PastRound`s,
   the target, the seed and round, the estimator, the parameters and the work model);
3. the clock: the `local-steps` work model (each site computes tau / p_i), Eq. 3's
   communication (`site_comm_s`), the straggler's sum plus the aggregation time
   (`round_time`), as the aggregator's simulated clock charges;
4. the learning: every chosen site trains from the global weights with its task's seed
   (`site_seed(seed, round, site)`), the deltas are averaged with weights = the sites'
   sample counts (fedavg's float64 sum, on the model's device:
   fig11_plateau.weighted_delta_applied),
   and the model is evaluated on the run's held-out subset;
5. the stop: the first round at or above the target (time to target = the simulated time
   then), or `max_rounds`.

Only the `local-steps` work model and `power: uniform` are built (Figs. 8 and 9 use both);
anything else is refused by name. tests/unit/test_plateau_policies.py checks the first
rounds of committed service runs (the policy's k and sites, the round times to 1e-8 s, the
accuracy to float summation order).

    python -m powertrip.app.paper.plateau_policies --policy powertrip --seed 0 --out DIR
    python -m powertrip.app.paper.plateau_policies --policy static --param k=10 --out DIR
    python -m powertrip.app.paper.plateau_policies --policy powertrip --out DIR --resume \
        --set max_rounds=800   # on from DIR/powertrip-seed0.ckpt.pt
    python -m powertrip.app.paper.plateau_policies --report DIR   # DIR/plateau-policies.md
    python -m powertrip.app.paper.plateau_policies --explain DIR/powertrip-seed0.csv --round 200
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

from powertrip.app.paper.fig11_plateau import run_cli_job
from powertrip.app.paper.plateau_target import TARGET, arm_name, arm_policy, read_rows, report
from powertrip.core.config import ConfigError, RunConfig, parse_setting

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
FIELDS = [
    "round", "policy", "k", "sites", "accuracy", "loss", "train_loss", "round_time_s",
    "sim_time_s", "predicted_round_time_s", "straggler", "wall_s",
]  # fmt: skip


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
    profiles (configured links, constant power, all alive)."""
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


#: RunConfig fields that say how long or with what resources a run goes, not what it
#: computes: a resumed run may change them (e.g. a higher round limit)
RESUMABLE_CHANGES = frozenset(
    {"max_rounds", "max_sim_hours", "data_dir", "train_threads", "workers",
     "threads_per_worker", "round_deadline_s", "checkpoint"}
)  # fmt: skip
#: a checkpoint is written after every this many rounds (and when the run is interrupted)
CHECKPOINT_EVERY = 10


def checkpoint_path(out_csv: Path) -> Path:
    """The run's checkpoint beside its CSV: the weights and history after a round."""
    return out_csv.with_suffix(".ckpt.pt")


def identity_of(run: RunConfig) -> dict:
    """What a run computes: the settings a resumed run must share with the checkpoint."""
    return {k: v for k, v in run.to_dict().items() if k not in RESUMABLE_CHANGES}


def save_checkpoint(path: Path, run: RunConfig, weights: dict, history: list, sim_time: float):
    """Atomically write the state after round len(history): weights on the CPU, the history
    as plain lists (torch.load(weights_only=True) reads it back without unpickling code)."""
    import torch

    state = {
        "format": 1,
        "identity": repr(sorted(identity_of(run).items())),
        "round": len(history),
        "sim_time_s": sim_time,
        "weights": {n: v.detach().cpu() for n, v in weights.items()},
        "history": [
            [
                int(h.round),
                int(h.k),
                float(h.accuracy),
                float(h.round_time_s),
                [str(x) for x in h.site_ids],
                [str(x) for x in h.reported_site_ids],
                [float(x) for x in h.site_train_loss],
                [int(x) for x in h.site_num_samples],
                [float(x) for x in h.site_duration_s],
            ]
            for h in history
        ],  # fmt: skip
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path, run: RunConfig, out_csv: Path, device: str):
    """(weights, history, sim_time, rows) to go on from: the checkpoint's state and the
    CSV's rows up to its round. A checkpoint of another run, or a CSV that lacks its
    rounds, is refused by name."""
    import torch

    from powertrip.core.policies import PastRound

    if not path.exists():
        raise ConfigError(f"--resume: no checkpoint {path} (a run writes one every "
                          f"{CHECKPOINT_EVERY} rounds and when interrupted)")  # fmt: skip
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format") != 1:
        raise ConfigError(f"--resume: {path} is not a plateau runner's checkpoint")
    if state["identity"] != repr(sorted(identity_of(run).items())):
        raise ConfigError(f"--resume: {path} was written by a run with other settings "
                          "(policy, parameters, seed or learning); start a new one")  # fmt: skip
    done = int(state["round"])
    rows = read_rows(out_csv) if out_csv.exists() else []
    if [int(r["round"]) for r in rows[:done]] != list(range(1, done + 1)):
        raise ConfigError(f"--resume: {out_csv} does not hold rounds 1-{done} of the checkpoint")
    history = [
        PastRound(int(h[0]), int(h[1]), float(h[2]), float(h[3]), *(tuple(x) for x in h[4:]))
        for h in state["history"]
    ]
    weights = {n: v.to(device) for n, v in state["weights"].items()}
    return weights, history, float(state["sim_time_s"]), rows[:done]


def run_policy(
    run: RunConfig,
    out_csv: Path,
    *,
    device: str = "cpu",
    trainer: str = "loop",
    max_rounds: int | None = None,
    resume: bool = False,
    log=print,
) -> list[dict]:
    """Run `run` to its target or its round limit (`max_rounds` overrides it); write a row
    per round to `out_csv` as it goes (a run cut short keeps its rounds) and return them.
    A checkpoint beside the CSV holds the state after every CHECKPOINT_EVERY rounds and
    after the last finished round of an interrupted run; `resume` goes on from it (the
    task seeds depend only on seed, round and site, so on one machine kind a resumed run
    is the run that was not stopped)."""
    import torch

    from powertrip.app.paper.fig11_plateau import weighted_delta_applied
    from powertrip.core.batched import SiteJob, train_sites
    from powertrip.core.policies import PastRound, get_policy
    from powertrip.core.profiles import site_index
    from powertrip.core.training import eval_subset, evaluate, site_seed
    from powertrip.core.workloads import get_workload

    check_supported(run)
    workload = get_workload(run.workload)
    policy = get_policy(run.policy)
    table = site_table(run)
    ckpt = checkpoint_path(out_csv)
    if resume:
        weights, history, sim_time, rows = load_checkpoint(ckpt, run, out_csv, device)
    else:
        history, rows, sim_time = [], [], 0.0
    sites = workload.site_data(run.data_dir, run.num_sites, run.seed)
    dataset = workload.load(run.data_dir, run.seed)
    eval_seed = run.seed if workload.defaults.eval_seed is None else workload.defaults.eval_seed
    ix = eval_subset(len(dataset.test), run.eval_samples, eval_seed)
    test_x, test_y = dataset.test.x[ix], dataset.test.y[ix]
    torch.manual_seed(run.seed)  # the aggregator's initial weights
    model = workload.build_model().to(device)
    if not resume:
        weights = {n: v.detach().clone() for n, v in model.state_dict().items()}
    model.load_state_dict(weights)
    target = run.target_accuracy if run.target_accuracy else math.inf
    if rows and float(rows[-1]["accuracy"]) >= target:
        log(f"{run.policy} seed {run.seed}: reached the target in round {len(rows)} already")
        return rows
    wall_before = float(rows[-1]["wall_s"]) if rows else 0.0
    saved = len(history)
    start = time.monotonic()
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with out_csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        handle.flush()
        try:
            for round_no in range(len(history) + 1, (max_rounds or run.max_rounds) + 1):
                decision = policy.select(context_of(run, table, history, round_no))
                chosen = [str(table.ids[r]) for r in decision.order]
                timing, durations = charged_round(run, table, np.asarray(decision.order))
                jobs = []
                for index in (site_index(site) for site in chosen):
                    x, y = sites.site(index)
                    jobs.append(SiteJob(x, y, int(site_seed(run.seed, round_no, index))))
                results = train_sites(
                    workload,
                    model,
                    jobs,
                    steps=run.local_steps,
                    lr=run.lr,
                    batch_size=run.batch_size,
                    trainer=trainer,
                    site_batch=len(jobs) if trainer == "vmap" else 1,
                    channels_last=run.channels_last,
                    optimizer=workload.defaults.optimizer,
                    fused_sgd=run.fused_sgd,
                    delta_device=None,
                )
                counts = [r.num_samples for r in results]
                new_weights = weighted_delta_applied(weights, [r.delta for r in results], counts)
                model.load_state_dict(new_weights)
                accuracy, loss = evaluate(workload, model, test_x, test_y)
                losses = [float(r.mean_loss) for r in results]
                past = PastRound(
                    round_no,
                    len(chosen),
                    accuracy,
                    timing.round_time_s,
                    tuple(chosen),
                    tuple(chosen),
                    tuple(losses),
                    tuple(counts),
                    tuple(durations[s] for s in chosen),
                )  # fmt: skip
                row = {
                    "round": round_no,
                    "policy": run.policy,
                    "k": len(chosen),
                    "sites": ";".join(chosen),
                    "accuracy": accuracy,
                    "loss": loss,
                    "train_loss": float(np.mean(losses)),
                    "round_time_s": timing.round_time_s,
                    "sim_time_s": sim_time + timing.round_time_s,
                    "predicted_round_time_s": decision.predicted_round_time_s,
                    "straggler": timing.straggler,
                    "wall_s": round(wall_before + time.monotonic() - start, 3),
                }
                writer.writerow(row)
                handle.flush()
                # the round is done only now: an interrupt before this keeps the last one
                weights, sim_time = new_weights, sim_time + timing.round_time_s
                history.append(past)
                rows.append(row)
                if round_no % CHECKPOINT_EVERY == 0:
                    save_checkpoint(ckpt, run, weights, history, sim_time)
                    saved = round_no
                if round_no % 10 == 0 or accuracy >= target:
                    log(
                        f"{run.policy} seed {run.seed}: round {round_no}, k {len(chosen)}, "
                        f"accuracy {accuracy:.4f}, {sim_time / 3600:.3f} h"
                    )
                if accuracy >= target:
                    break
        except KeyboardInterrupt:
            if len(history) > saved:
                save_checkpoint(ckpt, run, weights, history, sim_time)
            raise
    return rows


def parse_params(items: list[str]) -> dict[str, float]:
    """`--param NAME=VALUE`s as the policy's numbers: a number, or a choice's name
    (`gain=separable`), through the one encoding `powertrip run --param` uses."""
    from powertrip.core import policyparams

    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--param {item!r}: expected NAME=VALUE")
        try:
            params[name.strip()] = policyparams.encode(name.strip(), value)
        except ValueError as exc:
            raise ConfigError(f"--param {exc}") from None
    return params


def explain(run: RunConfig, path: Path, round_no: int | None) -> int:
    """Print the replayed decision of every round of `path` (or of `round_no`), and say
    where the replay and the written k differ (it should not: the run's own policy,
    parameters and seed replay it exactly)."""
    import json

    rows = read_rows(path)
    decisions = replay(run, rows)
    pairs = list(zip(decisions, rows, strict=True))
    differ = [i for i, (d, r) in enumerate(pairs, 1) if d.k != int(r["k"])]
    for i, (decision, row) in enumerate(pairs, 1):
        if round_no is None or i == round_no:
            print(f"round {i}: k {decision.k} (written {row['k']}): "
                  f"{json.dumps(decision.explanation)}")  # fmt: skip
    print(f"{len(rows) - len(differ)} of {len(rows)} decisions replayed as written", end="")
    print(f"; differ at rounds {differ[:10]}" if differ else "")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m powertrip.app.paper.plateau_policies",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--policy", help="a policy name (powertrip, adaptive, static, ...)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a policy parameter, e.g. k=10 for static (repeatable)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a run setting over the plateau defaults (repeatable)")  # fmt: skip
    parser.add_argument("--arm", help="the CSV's name (default: the policy and parameters)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--trainer", choices=("loop", "vmap"), default="loop")
    parser.add_argument("--out", type=Path, help="folder for <arm>-seed<N>.csv")
    parser.add_argument("--report", type=Path, metavar="DIR", help="tabulate DIR and stop")
    parser.add_argument("--explain", type=Path, metavar="CSV",
                        help="replay the --policy's decisions over a written run's rounds and "
                        "print why it chose each k (--round N: that round only)")  # fmt: skip
    parser.add_argument("--round", type=int, help="with --explain: the round to explain")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the checkpoint beside the run's CSV "
                        "(<arm>-seed<N>.ckpt.pt; --set max_rounds=N to go further)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.report:
        print(f"written: {report(args.report)}")
        return 0
    if args.explain and not args.policy:
        # the run's own policy, parameters and seed, from the CSV's name
        arm, args.seed = arm_name(args.explain)
        args.policy, named = arm_policy(arm)
        args.param += [f"{k}={v:g}" for k, v in named.items()]
    if not args.policy or (args.out is None and args.explain is None):
        parser.error("--policy and --out are needed to run (or --report DIR, or --explain CSV)")
    try:
        params = parse_params(args.param)
        given = dict(parse_setting(item) for item in args.set)
        run = plateau_config(args.policy, params, args.seed, **given)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.explain:
        return explain(run, args.explain, args.round)
    arm = args.arm or "-".join([args.policy] + [f"{k}{v:g}" for k, v in sorted(params.items())])
    out_csv = args.out / f"{arm}-seed{args.seed}.csv"
    device, trainer, resume = args.device, args.trainer, args.resume
    try:
        return run_cli_job(
            out_csv,
            device,
            lambda: run_policy(run, out_csv, device=device, trainer=trainer, resume=resume),
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
