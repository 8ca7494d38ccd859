"""Run the example in Flower's simulation engine (Ray backend) from Python:

    python examples/flower/simulate.py --nodes 20 --rounds 5 --policy powertrip --out runs/fl

Writes OUT/rounds.csv (round, k, sites, round_time_s, sim_time_s, accuracy: a
time-to-accuracy curve on PowerTrip's time model) and OUT/decisions.json (per round: the
profiles the policy saw, the history it had and the sites it chose), which
tests/integration/test_flower_simulation.py replays against the policy service.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # flower_app, without installing the example

from flower_app import client_app, server_app  # noqa: E402
from flower_app.task import Settings  # noqa: E402


def decisions(strategy) -> list[dict]:
    """Each round's inputs and choice, as JSON."""
    out = []
    for i, r in enumerate(strategy.rounds):
        out.append({
            "round": r.round,
            "profiles": [dataclasses.asdict(p) for p in r.profiles],
            "history": [dataclasses.asdict(h.past_round()) for h in strategy.rounds[:i]],
            "site_ids": r.site_ids,
            "round_time_s": r.round_time_s,
            "accuracy": r.accuracy,
        })  # fmt: skip
    return out


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
    settings = Settings(
        num_server_rounds=args.rounds, policy=args.policy,
        policy_params=args.params, seed=args.seed, local_steps=args.local_steps,
        profile_timeout_s=args.profile_timeout_s,
    )  # fmt: skip
    kept: dict = {}
    server = server_app.build(
        lambda _context: settings, args.out, done=lambda s: kept.__setitem__("strategy", s)
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
    (args.out / "decisions.json").write_text(json.dumps(decisions(kept["strategy"]), indent=1))
    for r in kept["strategy"].rounds:
        print(f"round {r.round}: k={len(r.site_ids)} {r.round_time_s:8.1f} s  "
              f"accuracy {r.accuracy:.4f}  {';'.join(r.site_ids)}")  # fmt: skip
    print(f"rounds.csv and decisions.json in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
