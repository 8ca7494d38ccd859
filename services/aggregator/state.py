"""State shared by the aggregator's gRPC handlers and its round loop, under one lock.

The state is five parts, one job each, built here around one Condition: its lock guards
every part, so what one step changes across parts (a registration re-sending the open
round's tasks, the run's end shown and announced to pollers) stays atomic, and it is
notified whenever something a waiter waits for changed:

* `registry` (registry.py): workers, their sessions, the sites they host, dead sites;
* `model` (broadcast.py): the global model every site downloads;
* `queue` (task_queue.py): the open round and the tasks each worker's poll takes;
* `uploads` (upload_ledger.py): the open round's uploads, held, claimed and booked;
* `status` (run_status.py): what GetStatus shows.

Callers use the part they need (`state.registry.register(...)`); this class only builds
and wires them and does what spans parts: the run's end and its checkpoints. FedAvg
arithmetic is not done under the lock (see accumulator.py). Nothing here is global: one
instance per process.
"""

from __future__ import annotations

import threading

from services.aggregator.broadcast import ModelBroadcast
from services.aggregator.registry import WorkerRegistry
from services.aggregator.run_result import CheckpointRecord
from services.aggregator.run_status import RunStatusBoard
from services.aggregator.task_queue import TaskQueue
from services.aggregator.upload_ledger import UploadLedger


class AggregatorState:
    """The aggregator's parts over `site_ids`, sharing `changed` (and its lock)."""

    def __init__(self, site_ids: list[str], delta_encoding: str = "fp32"):
        self.changed = threading.Condition(threading.Lock())
        self.registry = WorkerRegistry(self.changed, site_ids)
        self.model = ModelBroadcast(self.changed, delta_encoding)
        self.queue = TaskQueue(self.changed, self.registry)
        self.uploads = UploadLedger(self.changed, self.registry, self.queue, self.model)
        self.status = RunStatusBoard(self.changed, self.registry)
        # in one step with every registration: uploads held under a returning worker's old
        # session go, then the worker gets the open round's tasks its sites still owe
        self.registry.on_join(self.uploads.drop_worker_partials)
        self.registry.on_join(lambda info, _returning: self.queue.requeue_open_tasks(info))

    def finish(self, state: str, message: str) -> None:
        """The run is over (`state` done or failed): GetStatus shows it in the same step
        that wakes every poller to see `shutdown`."""
        with self.changed:
            self.status.show_end(state, message)
            self.queue.shut_down()

    # ---- checkpoints (checkpoint_store.CheckpointPart) ----------------------------------
    def checkpoint_into(self, record: CheckpointRecord) -> None:
        """The state's part of a checkpoint: which sites are dead."""
        record.dead_sites = sorted(self.registry.dead_sites())

    def restore_checkpoint(self, record: CheckpointRecord) -> None:
        """Resume from `record`: its model, its dead sites, and its last round on show."""
        self.model.install(record.weights, version=record.model_version)
        self.registry.restore_dead(record.dead_sites)
        if record.result.history:
            self.status.restore_status(record.result.history[-1], record.result.rounds)
