"""The ServerApp: FedAvg over the nodes that PowerTrip's policy chooses each round, with a
centralized evaluation on the workload's held-out split (the accuracy the policy learns from)."""

from __future__ import annotations

from pathlib import Path

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from flower_app.task import Settings, new_model, test_split
from powertrip.app.flower import PowerTripStrategy
from powertrip.core.training import eval_subset, evaluate
from powertrip.core.workloads import get_workload


def run(grid: Grid, settings: Settings, out: Path | None = None) -> PowerTripStrategy:
    """One run, its decisions written to `out`; returns the strategy (its `rounds`)."""
    workload = get_workload(settings.workload)
    defaults = workload.defaults
    test = test_split(settings.workload, settings.seed)
    keep = eval_subset(len(test.y), defaults.eval_samples, settings.seed)
    model = new_model(settings.workload, settings.seed)

    def centralized(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        accuracy, loss = evaluate(workload, model, test.x[keep], test.y[keep])
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    strategy = PowerTripStrategy(
        settings.policy, settings.params, tau_s=defaults.tau_s,
        update_size_bytes=defaults.update_size_bytes, seed=settings.seed, clock=settings.clock,
        target_accuracy=defaults.target_accuracy, fraction_evaluate=0.0,
        profile_timeout_s=settings.profile_timeout_s,
        min_available_nodes=settings.min_available_nodes, out_dir=out,
    )  # fmt: skip
    strategy.start(
        grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=settings.num_server_rounds, evaluate_fn=centralized,
    )  # fmt: skip
    return strategy


def run_dir(settings: Settings, context: Context) -> Path:
    """OUT-DIR/run-<run id>: a directory of its own for each run, so none overwrites
    another's decisions."""
    return Path(settings.out_dir).expanduser() / f"run-{context.run_id}"


#: for `flwr run` (pyproject.toml): settings from the run_config
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    settings = Settings.from_run_config(context.run_config)
    run(grid, settings, run_dir(settings, context))
