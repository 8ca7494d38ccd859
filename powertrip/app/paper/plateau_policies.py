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
from powertrip.app.paper.plateau_checkpoint import (
    CHECKPOINT_EVERY,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
)
from powertrip.app.paper.plateau_draws import arm_name, arm_policy, read_rows, report
from powertrip.app.paper.plateau_setup import (
    charged_round,
    check_supported,
    context_of,
    plateau_config,
    replay,
    site_table,
)
from powertrip.core.config import ConfigError, RunConfig, parse_setting

FIELDS = [
    "round", "policy", "k", "sites", "accuracy", "loss", "train_loss", "round_time_s",
    "sim_time_s", "predicted_round_time_s", "straggler", "wall_s",
]  # fmt: skip


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
    if resume:
        model.load_state_dict(weights)
    else:
        weights = {n: v.detach().clone() for n, v in model.state_dict().items()}
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
