"""The global model's starting weights and its held-out evaluation after each round."""

from __future__ import annotations

import numpy as np
import torch

from powertrip.config import RunConfig
from powertrip.training import eval_subset, evaluate
from powertrip.workloads import Workload


def initial_weights(workload: Workload, seed: int) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    model = workload.build_model()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


class Evaluator:
    """Accuracy and loss of given weights on the run's fixed held-out subset."""

    def __init__(self, workload: Workload, run: RunConfig):
        self.workload = workload
        self.run = run
        # Evaluation runs while the site workers wait for the next round, so it may use
        # every core the workers use between them.
        torch.set_num_threads(max(1, run.workers * run.threads_per_worker))

    def load(self) -> None:
        """Load the held-out data (before any worker is served: it may be slow or fail)."""
        dataset = self.workload.load(self.run.data_dir, self.run.seed)
        ix = eval_subset(len(dataset.test), self.run.eval_samples, self.run.seed)
        self.x, self.y = dataset.test.x[ix], dataset.test.y[ix]
        self.model = self.workload.build_model()

    def evaluate(self, weights: dict[str, np.ndarray]) -> tuple[float, float]:
        """(accuracy, loss) of `weights`."""
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        return evaluate(self.workload, self.model, self.x, self.y)
