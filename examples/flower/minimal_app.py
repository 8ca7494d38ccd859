"""The README's snippet, runnable: PowerTrip chooses which of 6 simulated nodes train a toy
logistic regression each round. `python examples/flower/minimal_app.py [OUT-DIR]`."""

import sys

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from powertrip.app.flower import PowerTripStrategy, SiteProfile, serve_profile

NODES, OUT = 6, sys.argv[1] if len(sys.argv) > 1 else "runs/flower-minimal"
x = np.random.default_rng(0).normal(size=(600, 5))
y = (x @ np.arange(1.0, 6.0) > 0).astype(float)  # node i holds rows i, i + 6, ...


def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    w = arrays.to_numpy_ndarrays()[0]
    return MetricRecord({"accuracy": float(((x @ w > 0) == y).mean())})


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    strategy = PowerTripStrategy(
        "powertrip", tau_s=60.0, fraction_evaluate=0.0, min_available_nodes=NODES, out_dir=OUT
    )
    strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(5)]), num_rounds=5,
                   evaluate_fn=evaluate)  # fmt: skip


client = ClientApp()
serve_profile(client, lambda context: SiteProfile(  # site_id: the node's own by default
    power_fraction=0.3 + 0.1 * context.node_config["partition-id"],  # share of full power
    latency_s=0.01, bandwidth_bytes_per_s=1.25e8))  # fmt: skip


@client.train()
def train(message: Message, context: Context) -> Message:
    i = context.node_config["partition-id"]
    w = message.content["arrays"].to_numpy_ndarrays()[0]
    for _ in range(20):  # local logistic-regression steps on this node's rows
        w = w - x[i::NODES].T @ (1 / (1 + np.exp(-x[i::NODES] @ w)) - y[i::NODES]) / 100
    metrics = MetricRecord({"num-examples": len(y[i::NODES])})
    return Message(RecordDict({"arrays": ArrayRecord([w]), "metrics": metrics}), reply_to=message)


if __name__ == "__main__":
    run_simulation(server_app=server, client_app=client, num_supernodes=NODES,
                   backend_config={"client_resources": {"num_cpus": 1}})  # fmt: skip
