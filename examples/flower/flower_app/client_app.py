"""The ClientApp: a node trains PowerTrip's FEMNIST model on its own site's data (the same
local SGD as a PowerTrip site worker, powertrip.core.training.train_local) and answers the
strategy's profile query with its site's power and link."""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_app.task import Settings, new_model, site_data, site_profile
from powertrip.app.flower import serve_profile
from powertrip.core.training import site_seed, train_local
from powertrip.core.workloads import get_workload


def _node_index(context: Context) -> int:
    return int(context.node_config["partition-id"])


def _num_sites(context: Context) -> int:
    """The federation's size: Flower gives every node the number of partitions."""
    return int(context.node_config["num-partitions"])


def _settings(context: Context) -> Settings:
    return Settings.from_run_config(context.run_config)


#: for `flwr run` (pyproject.toml): settings from the run_config
app = ClientApp()
serve_profile(
    app,
    lambda context: site_profile(
        _node_index(context), _num_sites(context), _settings(context).seed
    ),
)


@app.train()
def train(message: Message, context: Context) -> Message:
    settings = _settings(context)
    index = _node_index(context)
    workload = get_workload(settings.workload)
    model = new_model(settings.workload, settings.seed)
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    x, y = site_data(settings.workload, _num_sites(context), settings.seed).site(index)
    defaults = workload.defaults
    server_round = int(message.content["config"]["server-round"])
    result = train_local(
        workload, model, x, y, steps=settings.local_steps, lr=defaults.lr,
        batch_size=defaults.batch_size, seed=site_seed(settings.seed, server_round, index),
        optimizer=defaults.optimizer,
    )  # fmt: skip
    trained = {k: v + result.delta[k] for k, v in model.state_dict().items()}
    metrics = MetricRecord({"train_loss": result.mean_loss, "num-examples": result.num_samples})
    reply = RecordDict({"arrays": ArrayRecord(trained), "metrics": metrics})
    return Message(reply, reply_to=message)
