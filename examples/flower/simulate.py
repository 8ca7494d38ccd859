"""Run the example in Flower's simulation engine (Ray backend) from Python:

    python examples/flower/simulate.py --nodes 20 --rounds 5 --policy powertrip --out runs/fl

Writes OUT/decisions.jsonl (a line a round: the profiles the policy saw, the sites it chose,
its reason, the round time and the accuracy) and OUT/rounds.csv (round, k, sites,
round_time_s, sim_time_s, accuracy: a time-to-accuracy curve on PowerTrip's time model);
an OUT that holds an earlier run's is refused. tests/integration/test_flower_simulation.py
replays decisions.jsonl against the policy service.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # flower_app, without installing the example

from flower_app import client_app, server_app  # noqa: E402
from flower_app.task import Settings  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20, help="virtual clients (sites)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--policy", default="powertrip", help="a PowerTrip policy by name")
    parser.add_argument("--params", default="{}", help="policy parameters, JSON: '{\"k\": 5}'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/flower"))
    parser.add_argument(
        "--profile-timeout-s", type=float, default=300.0,
        help="seconds the strategy waits each round for the nodes' profiles (default 300: "
        "a simulation's nodes are this machine's processes, so a slow answer means a busy "
        "machine, or Ray still starting them, not a lost node)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    taken = [n for n in ("decisions.jsonl", "rounds.csv") if (args.out / n).exists()]
    if taken:  # before Ray starts: the strategy would refuse it too, later
        parser.error(f"{args.out} already holds {' and '.join(taken)}; name another --out")
    settings = Settings(
        num_server_rounds=args.rounds, policy=args.policy,
        policy_params=args.params, seed=args.seed, local_steps=args.local_steps,
        profile_timeout_s=args.profile_timeout_s, min_available_nodes=args.nodes,
    )  # fmt: skip
    kept: dict = {}
    server = server_app.build(
        lambda _context: settings,
        out_of=lambda _settings, _context: args.out,
        done=lambda strategy: kept.__setitem__("strategy", strategy),
    )
    client = client_app.build(lambda _context: settings)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    from flwr.simulation import run_simulation

    run_simulation(
        server_app=server, client_app=client, num_supernodes=args.nodes,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                        "init_args": {"num_cpus": 2, "include_dashboard": False}},
    )  # fmt: skip
    if "strategy" not in kept:
        print("simulate: the ServerApp did not finish (see Flower's log above)", file=sys.stderr)
        return 1
    if not kept["strategy"].rounds:
        print("simulate: no round trained (see the warnings above)", file=sys.stderr)
        return 1
    for r in kept["strategy"].rounds:
        print(f"round {r.round}: k={len(r.site_ids)} {r.round_time_s:8.1f} s  "
              f"accuracy {r.accuracy:.4f}  {';'.join(r.site_ids)}")  # fmt: skip
    print(f"decisions.jsonl and rounds.csv in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
