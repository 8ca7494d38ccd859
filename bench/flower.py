"""flower_site_steps_per_s: Flower's simulation engine doing the training benchmark's work.

Runs in a process of its own, `python -m bench.flower SITES STEPS ROUNDS`, which prints
`{"flower_site_steps_per_s": ...}`: Ray leaves threads and a daemon behind.  Needs
`pip install -e '.[bench]'`; skipped without it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import BATCH, LR, NUM_SITES, ROOT, femnist_sites


def flower_steps_per_s(sites: int, steps: int, rounds: int) -> float:
    """Flower's simulation engine (Ray backend) doing the same work: 100 clients, `sites`
    sampled per round, each `steps` SGD steps of batch 20 from the global model, FedAvg.
    One CPU per client, so Ray runs as many clients at once as there are cores. Timed like
    the system: from configure_fit to the end of aggregate_fit, warm-up round skipped."""
    import logging

    import torch
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    cache: dict = {}

    def site_data(cid: int):
        if "data" not in cache:
            torch.set_num_threads(1)
            cache["data"] = femnist_sites()
            cache["model"] = cache["data"][0].build_model()
        workload, data, part = cache["data"]
        ix = part.site_indices[cid]
        return (
            cache["model"],
            workload.inputs(data.train.x[ix]),
            torch.from_numpy(data.train.y[ix]),
        )

    class Site(NumPyClient):
        def __init__(self, cid: int):
            self.cid = cid

        def fit(self, parameters, config):
            model, x, y = site_data(self.cid)
            keys = list(model.state_dict())
            state = {k: torch.from_numpy(v) for k, v in zip(keys, parameters, strict=True)}
            model.load_state_dict(state)
            optimizer = torch.optim.SGD(model.parameters(), lr=LR)
            loss_fn = torch.nn.CrossEntropyLoss()
            gen = torch.Generator().manual_seed(self.cid)
            order = torch.cat([torch.randperm(len(y), generator=gen) for _ in range(steps)])
            for step in range(steps):
                batch = order[step * BATCH : (step + 1) * BATCH]
                optimizer.zero_grad()
                loss_fn(model(x[batch]), y[batch]).backward()
                optimizer.step()
            return [v.detach().numpy() for v in model.state_dict().values()], len(y), {}

    def client_fn(context: Context):
        return Site(int(context.node_config["partition-id"])).to_client()

    times: list[tuple[float, float]] = []

    class TimedFedAvg(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            times.append((time.perf_counter(), 0.0))
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            if failures:
                raise RuntimeError(f"flower: {len(failures)} client failure(s): {failures[0]}")
            times[-1] = (times[-1][0], time.perf_counter())
            return out

    torch.manual_seed(0)
    model = femnist_sites()[0].build_model()
    initial = ndarrays_to_parameters([v.numpy() for v in model.state_dict().values()])

    def server_fn(context: Context):
        strategy = TimedFedAvg(
            fraction_fit=sites / NUM_SITES,
            min_fit_clients=sites,
            min_available_clients=NUM_SITES,
            fraction_evaluate=0.0,
            min_evaluate_clients=0,
            initial_parameters=initial,
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    run_simulation(
        server_app=ServerApp(server_fn=server_fn),
        client_app=ClientApp(client_fn=client_fn),
        num_supernodes=NUM_SITES,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    done = [(a, b) for a, b in times if b > 0][1:]
    if not done:
        raise RuntimeError("flower finished no timed round")
    return len(done) * sites * steps / sum(b - a for a, b in done)


def flower_child(sites: int, steps: int, rounds: int) -> dict:
    """Flower in its own process (Ray leaves threads and a daemon behind); JSON on stdout."""
    command = [sys.executable, "-m", "bench.flower", str(sites), str(steps), str(rounds)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-600:]}"}


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """Flower's rate, and train_vs_flower when the training benchmark ran first."""
    out: dict = {}
    try:
        import flwr  # noqa: F401
    except ImportError:
        out["flower"] = "skipped: flwr is not installed (pip install -e '.[bench]')"
    else:
        print("training: Flower simulation (Ray) ...", flush=True)
        got = flower_child(args.sites, args.steps, args.rounds)
        if "error" in got:  # Ray's node start times out (30 s, fixed) on a loaded host
            print("Flower failed once; retrying ...", flush=True)
            got = flower_child(args.sites, args.steps, args.rounds)
        if "error" in got:
            out["flower"] = f"skipped: Flower failed: {got['error']}"
        else:
            out["flower_site_steps_per_s"] = got["flower_site_steps_per_s"]
            if "train_site_steps_per_s" in results:
                out["train_vs_flower"] = (
                    results["train_site_steps_per_s"] / got["flower_site_steps_per_s"]
                )

    return out


def main(argv: list[str] | None = None) -> int:
    """The child's entry point: SITES STEPS ROUNDS -> one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("sites", "steps", "rounds"):
        parser.add_argument(name, type=int)
    args = parser.parse_args(argv)
    rate = flower_steps_per_s(args.sites, args.steps, args.rounds)
    print(json.dumps({"flower_site_steps_per_s": rate}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
