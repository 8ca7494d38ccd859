"""What each selected site is asked to train in a round."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from powertrip.core.config import RunConfig
from powertrip.core.profiles import site_index
from powertrip.core.training import site_seed
from services.aggregator.domain import Selection

#: Task.data_scope values: the site's own partition, or all training data (centralized)
DATA_SCOPE_SITE = "site"
DATA_SCOPE_POOLED = "pooled"


@dataclass(frozen=True)
class Task:
    """One site's work in one round (the servicer sends it as an aggregator.v1 Task)."""

    task_id: str
    round: int
    site_id: str
    model_version: int
    local_steps: int
    lr: float
    batch_size: int
    seed: int
    data_scope: str = DATA_SCOPE_SITE


def round_tasks(
    run: RunConfig,
    round_no: int,
    selection: Selection,
    model_version: int,
    steps: Mapping[str, int],
    batches: Mapping[str, int] | None = None,
) -> dict[str, Task]:
    """task_id -> task for every selected site. `steps` gives a site's local steps where
    the work model varies them (data-parallel), else the site runs the run's local_steps;
    `batches` its batch where the work model varies it (power-split), else the run's."""
    batches = batches or {}
    scope = DATA_SCOPE_POOLED if selection.centralized else DATA_SCOPE_SITE
    tasks = {}
    for site in selection.site_ids:
        task_id = f"r{round_no}-{site}"
        # the values a Task message holds (its fields are ints and a double)
        tasks[task_id] = Task(
            task_id=task_id,
            round=int(round_no),
            site_id=site,
            model_version=int(model_version),
            local_steps=int(steps.get(site, run.local_steps)),
            lr=float(run.lr),
            batch_size=int(batches.get(site, run.batch_size)),
            seed=int(site_seed(run.seed, round_no, site_index(site))),
            data_scope=scope,
        )
    return tasks
