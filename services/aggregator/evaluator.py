"""The global model's starting weights and its held-out evaluation after each round."""

from __future__ import annotations

import os

import numpy as np
import torch

from powertrip.core.config import RunConfig
from powertrip.core.training import eval_subset, evaluate
from powertrip.core.workloads import Workload


def initial_weights(workload: Workload, seed: int) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    model = workload.build_model()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def eval_threads(run: RunConfig) -> int:
    """Evaluation runs while the site workers wait for the next round, so it may use every
    core the workers train on between them: `train_threads` each (0 = one per core), with
    `threads_per_worker` torch threads, never more than this machine has. On the embedded
    deployment that is every core (it was one thread, and evaluation was over half of a
    small-k round). The numbers do not depend on the thread count: tests/unit/
    test_evaluation.py checks every workload's model with 1 and 2 threads, bit for bit."""
    cores = os.cpu_count() or 1
    per_worker = (run.train_threads or cores) * run.threads_per_worker
    return max(1, min(cores, run.workers * per_worker))


class Evaluator:
    """Accuracy and loss of given weights on the run's fixed held-out subset."""

    def __init__(self, workload: Workload, run: RunConfig):
        self.workload = workload
        self.run = run
        torch.set_num_threads(eval_threads(run))

    def load(self) -> None:
        """Load the held-out data (before any worker is served: it may be slow or fail)."""
        dataset = self.workload.load(self.run.data_dir, self.run.seed)
        fixed = self.workload.defaults.eval_seed
        seed = self.run.seed if fixed is None else fixed
        ix = eval_subset(len(dataset.test), self.run.eval_samples, seed)
        self.x, self.y = dataset.test.x[ix], dataset.test.y[ix]
        self.model = self.workload.build_model()

    def evaluate(self, weights: dict[str, np.ndarray]) -> tuple[float, float]:
        """(accuracy, loss) of `weights`."""
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        return evaluate(self.workload, self.model, self.x, self.y)
