"""What each selected site is asked to train in a round."""

from __future__ import annotations

from collections.abc import Mapping

from powertrip.core.config import RunConfig
from powertrip.core.profiles import site_index
from powertrip.core.training import site_seed
from powertrip.v1 import aggregator_pb2, policy_pb2


def round_tasks(
    run: RunConfig,
    round_no: int,
    selection: policy_pb2.Selection,
    model_version: int,
    steps: Mapping[str, int],
    batches: Mapping[str, int] | None = None,
) -> dict[str, aggregator_pb2.Task]:
    """task_id -> task for every selected site. `steps` gives a site's local steps where
    the work model varies them (data-parallel), else the site runs the run's local_steps;
    `batches` its batch where the work model varies it (power-split), else the run's."""
    batches = batches or {}
    pooled = selection.mode == policy_pb2.SELECTION_MODE_CENTRALIZED
    tasks = {}
    for site in selection.site_ids:
        task_id = f"r{round_no}-{site}"
        tasks[task_id] = aggregator_pb2.Task(
            task_id=task_id,
            round=round_no,
            site_id=site,
            model_version=model_version,
            local_steps=steps.get(site, run.local_steps),
            lr=run.lr,
            batch_size=batches.get(site, run.batch_size),
            seed=site_seed(run.seed, round_no, site_index(site)),
            data_scope=(
                aggregator_pb2.DATA_SCOPE_POOLED if pooled else aggregator_pb2.DATA_SCOPE_SITE
            ),
        )
    return tasks
