"""The README's snippet, runnable: PowerTrip chooses which of 6 simulated nodes train a toy
logistic regression each round. A Flower app: `flwr run examples/flower/minimal --stream
--federation-config "num-supernodes=6"` against a SuperLink (../README.md, "Run it")."""

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from powertrip.app.flower import PowerTripStrategy, SiteProfile, serve_profile

NODES = 6  # round 1 waits for this many; run the federation with as many SuperNodes
x = np.random.default_rng(0).normal(size=(600, 5))
y = (x @ np.arange(1.0, 6.0) > 0).astype(float)  # of n nodes, node i holds rows i, i + n, ...


def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    w = arrays.to_numpy_ndarrays()[0]
    return MetricRecord({"accuracy": float(((x @ w > 0) == y).mean())})


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    out = f"{context.run_config['out-dir']}/run-{context.run_id}"  # a directory per run
    strategy = PowerTripStrategy(
        "powertrip", tau_s=60.0, fraction_evaluate=0.0, min_available_nodes=NODES, out_dir=out
    )
    strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(5)]), evaluate_fn=evaluate,
                   num_rounds=int(context.run_config["num-server-rounds"]))  # fmt: skip


client = ClientApp()
serve_profile(client, lambda context: SiteProfile(  # site_id: the node's own by default
    power_fraction=0.3 + 0.6 * context.node_config["partition-id"]  # share of full power
    / context.node_config["num-partitions"],
    latency_s=0.01, bandwidth_bytes_per_s=1.25e8))  # fmt: skip


@client.train()
def train(message: Message, context: Context) -> Message:
    i, n = context.node_config["partition-id"], context.node_config["num-partitions"]
    w = message.content["arrays"].to_numpy_ndarrays()[0]
    for _ in range(20):  # local logistic-regression steps on this node's rows
        w = w - x[i::n].T @ (1 / (1 + np.exp(-x[i::n] @ w)) - y[i::n]) / 100
    metrics = MetricRecord({"num-examples": len(y[i::n])})
    return Message(RecordDict({"arrays": ArrayRecord([w]), "metrics": metrics}), reply_to=message)
