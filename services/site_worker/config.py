"""Site-worker configuration: the worker's own (its flags), and the run's settings it
receives at registration, which decide how the run's sites train."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from powertrip.rpc.runsettings import read_settings
from powertrip.v1 import aggregator_pb2

log = logging.getLogger(__name__)

#: run settings that decide a site's numbers, not only its speed: a worker takes the run's,
#: whatever its own flags said, so a remote worker trains as the run does (one resuming a run
#: stored before fused SGD existed trains without it). The trainer (loop or vmap) stays the
#: worker's own choice: it is the device's (a GPU's vmap, a CPU's loop)
RUN_TRAINING = ("channels_last", "fused_sgd")


@dataclass(frozen=True)
class WorkerConfig:
    aggregator: str  # host:port to dial out to
    worker_id: str
    site_ids: list[str] = field(default_factory=list)  # empty: ask for `site_count`
    site_count: int = 1
    threads: int = 1  # torch intra-op threads per training thread
    train_threads: int = 1  # groups of sites trained at once, one model replica each
    trainer: str = "loop"  # "loop" or "vmap" (powertrip.core.batched)
    site_batch: int = 1  # sites per vmap call
    channels_last: bool = True
    fused_sgd: bool = True  # SGD folded into linear layers' backward (powertrip.core.fused_sgd)
    data_dir: str | None = None
    join_token: str = ""
    site_tokens: dict[str, str] = field(default_factory=dict)  # per-site join tokens
    credentials: object = None  # grpc.ChannelCredentials when dialling with mutual TLS
    poll_s: float = 10.0
    register_timeout_s: float = 60.0
    device: str = "cpu"  # resolved: "cpu" or "cuda" (powertrip.core.training.resolve_device)
    #: NVML reader (telemetry.GpuPower) of a worker run with --report-power: each delta then
    #: carries the joules its local steps drew (DeltaHeader.energy_j)
    power_meter: object = None
    #: what power_meter is, in words (RegisterRequest.energy_meter): the run's report says it
    energy_meter: str = ""

    def with_run(self, run: dict[str, Any]) -> WorkerConfig:
        """This configuration with the run's `RUN_TRAINING` settings (those it sent)."""
        given = {name: run[name] for name in RUN_TRAINING if name in run}
        changed = {k: v for k, v in given.items() if getattr(self, k) != v}
        if changed:
            log.info("%s: the run's settings replace this worker's flags: %s", self.worker_id,
                     ", ".join(f"{k}={v}" for k, v in changed.items()))  # fmt: skip
        return replace(self, **given)


def spec_settings(spec: aggregator_pb2.RunSpec) -> dict[str, Any]:
    """The run's settings this worker needs, from the spec's RunSettings (powertrip/rpc/
    runsettings.py), or from its named fields when an aggregator of 1.0 sent none (then the
    worker's own flags decide how it trains)."""
    if spec.settings.values:
        return read_settings(spec.settings, "site_worker")
    return {
        "workload": spec.workload,
        "num_sites": spec.num_sites,
        "seed": spec.seed,
        "data_dir": spec.data_dir or None,
        "peft": spec.peft or "none",
        "delta_encoding": spec.delta_encoding or "fp32",
    }
