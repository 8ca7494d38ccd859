"""Fig. 11's premise run to the plateau, in one process: FedAvg of k sites a round with the
library's own training, aggregation and evaluation, and no services or clock.

Why: the regime check (fig11_regime.py) runs the real services for 30 rounds, about 90 minutes
of a core at k = 100, and every curve there is still climbing at round 30. The paper's "late"
is where small-k runs level off, hundreds of rounds in. The learning does not depend on the
services or the simulated clock, so this runs the same learning alone (on a GPU where there
is one):

* the regime's settings (lr 0.01, 21 local steps of batch 20, SGD, 100 identical sites, the
  whole held-out split evaluated every round), from `RegimeSettings`;
* the start: torch seeded with the run's seed, then the workload's model (as the
  aggregator's initial weights);
* each round, every chosen site trains from the global weights with the seed the aggregator
  gives its task (`site_seed(seed, round, site)`), and the new global weights are the
  plain mean of the deltas (every site does the same steps of the same batch, so FedAvg's
  weights are equal), computed where the model is (`mean_delta_applied`: fedavg's float64
  sum, term by term, so the same numbers as `weighted_average` + `apply_delta`, without
  copying k model-sized deltas to the host each round, which had made a k = 100 round on a
  GPU about 6 s);
* `sampling`: `fixed` takes sites 0..k-1 every round, which is what static k does here
  (identical sites tie, and static keeps round 1's set: its docstring), so static k = 10
  trains on a tenth of the data; `random` draws k of the N sites anew each round (seeded),
  the usual FedAvg sampling, to see whether that choice decides the answer.

It is the services' computation up to float summation order (the aggregator accumulates
deltas as they stream in): tests/unit/test_fig11_plateau.py checks its first rounds against a
real `powertrip run` of the same settings.

    python -m powertrip.app.paper.fig11_plateau --k 10 --seed 0 --rounds 300 --out DIR
    python -m powertrip.app.paper.fig11_plateau --report DIR      # DIR/plateau.png

results/fig11-plateau/ holds the runs made on an H200 and what they show (its README).
"""

from __future__ import annotations

import argparse
import csv
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLINGS = ("fixed", "random")


@dataclass(frozen=True)
class RegimeSettings:
    """fig11_regime.REGIME's learning settings (kept equal by a test)."""

    workload: str = "femnist"
    num_sites: int = 100
    lr: float = 0.01
    local_steps: int = 21
    batch_size: int = 20


def chosen_sites(k: int, num_sites: int, round_no: int, seed: int, sampling: str) -> list[int]:
    """The site indices of a round: 0..k-1 (`fixed`), or k of num_sites drawn for this round
    and seed (`random`)."""
    if sampling == "fixed":
        return list(range(k))
    if sampling == "random":
        rng = np.random.default_rng([seed, round_no, 11])
        return sorted(int(i) for i in rng.choice(num_sites, size=k, replace=False))
    raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")


def simulate(
    k: int,
    seed: int,
    rounds: int,
    out_csv: Path,
    *,
    settings: RegimeSettings = RegimeSettings(),
    sampling: str = "fixed",
    device: str = "cpu",
    trainer: str = "loop",
    data_dir: str | None = None,
    log=print,
) -> list[dict]:
    """Run `rounds` rounds of k sites; write a row per round to `out_csv` as it goes (a run
    cut short keeps its rounds) and return the rows."""
    import torch

    from powertrip.core.batched import SiteJob, train_sites
    from powertrip.core.training import evaluate, site_seed
    from powertrip.core.workloads import get_workload

    if not 1 <= k <= settings.num_sites:
        raise ValueError(f"k must be in 1..{settings.num_sites}, got {k}")
    workload = get_workload(settings.workload)
    sites = workload.site_data(data_dir, settings.num_sites, seed)
    test = workload.load(data_dir, seed).test
    torch.manual_seed(seed)
    model = workload.build_model(device).to(device)
    weights = {n: v.detach().clone() for n, v in model.state_dict().items()}
    fields = ["round", "k", "sampling", "accuracy", "loss", "train_loss", "wall_s"]
    rows: list[dict] = []
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with out_csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for round_no in range(1, rounds + 1):
            chosen = chosen_sites(k, settings.num_sites, round_no, seed, sampling)
            jobs = [SiteJob(*sites.site(i), seed=int(site_seed(seed, round_no, i))) for i in chosen]
            # the model holds `weights` (built from them, or loaded after the last round), and
            # both trainers give it back unchanged
            results = train_sites(
                workload,
                model,
                jobs,
                steps=settings.local_steps,
                lr=settings.lr,
                batch_size=settings.batch_size,
                trainer=trainer,
                site_batch=len(jobs) if trainer == "vmap" else 1,
                delta_device=None,
            )
            weights = mean_delta_applied(weights, [r.delta for r in results])
            model.load_state_dict(weights)
            accuracy, loss = evaluate(workload, model, test.x, test.y)
            row = {
                "round": round_no,
                "k": k,
                "sampling": sampling,
                "accuracy": accuracy,
                "loss": loss,
                "train_loss": float(np.mean([r.mean_loss for r in results])),
                "wall_s": round(time.monotonic() - start, 3),
            }
            writer.writerow(row)
            handle.flush()
            rows.append(row)
            if round_no % 10 == 0 or round_no == rounds:
                log(f"k={k} {sampling} seed {seed}: round {round_no}, accuracy {accuracy:.4f}")
    return rows


def mean_delta_applied(weights: dict, deltas: list[dict]) -> dict:
    """w + the plain mean of the deltas (every site here trains the same samples), with the
    numbers of fedavg's `apply_delta(w, weighted_average(deltas, [1.0] * k))`."""
    return weighted_delta_applied(weights, deltas, [1.0] * len(deltas))


def weighted_delta_applied(weights: dict, deltas: list[dict], site_weights: list[float]) -> dict:
    """w + fedavg's weighted mean of the deltas, in torch where the weights are (a GPU: no
    k model-sized copies to the host a round), with the numbers of `apply_delta(w,
    weighted_average(deltas, site_weights))`: each delta in float64 times w_i / sum(w),
    summed in order, cast back to the weights' dtype and added (one rounding per operation,
    as numpy does; tests hold them equal to the bit)."""
    import torch

    total = float(sum(site_weights))
    if not deltas or len(deltas) != len(site_weights) or total <= 0:
        raise ValueError("one positive weight per delta, and at least one delta")
    out = {}
    for name, w in weights.items():
        acc = torch.zeros(w.shape, dtype=torch.float64, device=w.device)
        for delta, weight in zip(deltas, site_weights, strict=True):
            acc += delta[name].to(w.device, torch.float64) * (weight / total)
        out[name] = w + acc.to(w.dtype)
    return out


def load_curves(folder: Path) -> dict[tuple[int, str, int], np.ndarray]:
    """(k, sampling, seed) -> accuracy by round, from the CSVs `simulate` wrote."""
    curves = {}
    for path in sorted(folder.glob("k*-*-seed*.csv")):
        rows = list(csv.DictReader(path.open()))
        if rows:
            key = (int(rows[0]["k"]), rows[0]["sampling"], int(path.stem.rsplit("seed", 1)[1]))
            curves[key] = np.array([float(r["accuracy"]) for r in rows])
    return curves


def leads(curves: dict, against: int = 10) -> dict[tuple[int, int], np.ndarray]:
    """(k, seed) -> the accuracy lead of k fixed sites over `against` fixed sites, by round,
    over the rounds both ran."""
    out = {}
    for (k, sampling, seed), acc in curves.items():
        base = curves.get((against, "fixed", seed))
        if sampling == "fixed" and k != against and base is not None:
            n = min(len(acc), len(base))
            out[(k, seed)] = acc[:n] - base[:n]
    return out


def report(folder: Path) -> Path:
    """plateau.png in `folder`: accuracy by round for every run, and the lead of each larger
    fixed k over k = 10 of the same seed."""
    from powertrip.app.report.figures import new_figure, save_figure

    curves = load_curves(folder)
    if not curves:
        raise FileNotFoundError(f"{folder}: no k*-*-seed*.csv to report")
    fig = new_figure(width=11, height=4.2)
    left, right = fig.subplots(1, 2)
    for (k, sampling, seed), acc in sorted(curves.items()):
        style = "--" if sampling == "random" else "-"
        left.plot(np.arange(1, len(acc) + 1), 100 * acc, style, label=f"k={k} {sampling} s{seed}")
    left.set(xlabel="round", ylabel="held-out accuracy (%)", title="accuracy by round")
    left.legend(fontsize=7)
    for (k, seed), lead in sorted(leads(curves).items()):
        right.plot(np.arange(1, len(lead) + 1), 100 * lead, label=f"k={k} - k=10, s{seed}")
    right.axhline(0, color="grey", linewidth=0.8)
    right.set(xlabel="round", ylabel="lead over k=10 (points)", title="lead of more sites")
    right.legend(fontsize=7)
    out = folder / "plateau.png"
    save_figure(fig, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m powertrip.app.paper.fig11_plateau",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--k", type=int, help="sites a round")
    parser.add_argument(
        "--report", type=Path, metavar="DIR", help="plot the CSVs in DIR (plateau.png) and stop"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--sampling", choices=SAMPLINGS, default="fixed")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--trainer", choices=("loop", "vmap"), default="loop", help="as the site worker's"
    )
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, help="folder for the rounds CSV")
    args = parser.parse_args(argv)
    if args.report:
        print(f"written: {report(args.report)}")
        return 0
    if args.k is None or args.out is None:
        parser.error("--k and --out are needed to run (or --report DIR to plot)")
    out_csv = args.out / f"k{args.k}-{args.sampling}-seed{args.seed}.csv"
    return run_cli_job(
        out_csv,
        args.device,
        lambda: simulate(
            args.k,
            args.seed,
            args.rounds,
            out_csv,
            sampling=args.sampling,
            device=args.device,
            trainer=args.trainer,
            data_dir=args.data_dir,
        ),
    )


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT reached a plateau runner; a KeyboardInterrupt, so that the loops'
    own clean-up (the last finished round kept, a checkpoint written) runs for both."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def run_cli_job(out_csv: Path, device: str, job) -> int:
    """A plateau runner's run from the command line: float32 as on a CPU where the device is
    a GPU (no TF32 matmuls or convolutions; set here, for this process, so that a library
    call leaves torch's global settings alone), and Ctrl-C, SIGINT (run-gpu.sh's time limit)
    or SIGTERM (`kill`, a batch system) ends it with the finished rounds kept in `out_csv`,
    exit 128 + the signal."""
    from powertrip.app.paper.plateau_checkpoint import checkpoint_path

    if device.startswith("cuda"):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def stop(signum, _frame) -> None:
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        job()
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        ckpt = checkpoint_path(out_csv)
        hint = f"; --resume goes on from {ckpt}" if ckpt.exists() else ""
        print(
            f"interrupted by {signal.Signals(signum).name}: the finished rounds are in "
            f"{out_csv}{hint}",
            file=sys.stderr,
        )
        return 128 + signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"written: {out_csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
