"""Site-worker configuration."""

from __future__ import annotations

from dataclasses import dataclass, field


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
