"""One round as it runs: its tasks, the deltas accepted so far, and what their uploads
reported (the round loop opens it, the upload handlers fill it under the state's lock,
the clocks, the accounting and the reports read it once it is closed)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from powertrip.core.config import RunConfig
from powertrip.rpc.tensors import TensorAssembler
from services.aggregator.accumulator import RoundAccumulator
from services.aggregator.audit import DeltaAudit
from services.aggregator.domain import Selection
from services.aggregator.tasks import Task, round_tasks
from services.aggregator.workmodel import fedavg_weights


@dataclass(eq=False)
class PartialUpload:
    """One site's delta as it arrives in a round: its header (without `resume`) and the
    assembler holding the chunks that passed their checks. One stream writes to it at a
    time, under `lock`: `owner` is that stream's handle; None while it is held for a resume
    after its stream broke. A stream that finds another owner was superseded by a resume."""

    header: Any  # the upload's DeltaHeader message, without `resume`
    assembler: TensorAssembler
    owner: object | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    held_since: float = 0.0

    @property
    def worker_id(self) -> str:
        return self.header.worker_id


@dataclass
class RoundInProgress:
    round: int
    model_version: int
    tasks: dict[str, Task]  # task_id -> task
    fedavg: RoundAccumulator
    received: set[str] = field(default_factory=set)  # site ids whose delta was accepted
    #: site ids whose delta passed the checks and is being summed (off the state lock)
    accepting: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    train_loss: dict[str, float] = field(default_factory=dict)
    bytes_up: int = 0
    #: time.monotonic() when the tasks were handed out (install_round), and, per site whose
    #: delta was accepted, when that happened plus what its worker reported: the wall
    #: clock's round breakdown is measured from these, and `steps` shows each site really
    #: trained what its task asked (the data-parallel work model varies it per site)
    started_at: float = 0.0
    finished_at: dict[str, float] = field(default_factory=dict)
    compute_wall_s: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    #: per accepted site: its training samples, and the joules NVML measured (when sent)
    num_samples: dict[str, int] = field(default_factory=dict)
    energy_j: dict[str, float] = field(default_factory=dict)
    #: per accepted site: the relative error of its encoded delta, as it measured it
    #: (DeltaHeader.encoding_error; 0 for fp32)
    encoding_error: dict[str, float] = field(default_factory=dict)
    #: site id -> its FedAvg weight where the work model sets it (power-split: the samples
    #: its task trains on, local_steps x its batch); other sites weigh by num_samples
    fedavg_weights: dict[str, float] = field(default_factory=dict)
    #: site id -> its latest upload of this round that is streaming or was cut mid-stream
    #: (held for a resume); gone once complete or rejected, all dropped at the round's close
    partials: dict[str, PartialUpload] = field(default_factory=dict)

    @property
    def expected(self) -> set[str]:
        return {t.site_id for t in self.tasks.values()}

    def complete(self) -> bool:
        return self.received | self.failed >= self.expected

    def has_delta(self, site: str) -> bool:
        """The site's delta was accepted or is being summed: another one is a duplicate."""
        return site in self.received or site in self.accepting


def open_round(
    run: RunConfig,
    round_no: int,
    selection: Selection,
    model_version: int,
    weights: dict,
    steps: dict[str, int],
    batches: dict[str, int] | None,
    audit: DeltaAudit | None,
) -> RoundInProgress:
    """A new round of `selection` on model `model_version` (`weights`): each selected
    site's task (tasks.py), the FedAvg accumulator (with the round's audit, if the run keeps
    one) and, where the work model sets the batches (power-split), each site's FedAvg
    weight: the samples its task trains on (workmodel.fedavg_weights) instead of its data
    size."""
    order = list(selection.site_ids)
    round_audit = audit.open_round(round_no, order, model_version) if audit else None
    tasks = round_tasks(run, round_no, selection, model_version, steps, batches)
    return RoundInProgress(
        round=round_no,
        model_version=model_version,
        tasks=tasks,
        fedavg=RoundAccumulator(order, weights, round_audit),
        fedavg_weights=fedavg_weights(tasks.values()) if batches else {},
    )
