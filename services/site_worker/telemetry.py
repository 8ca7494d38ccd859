"""Live GPU power telemetry from NVML (`nvidia-ml-py`), reported to the profiler.

Optional by design: without the library, without the NVIDIA driver, or without a GPU,
`GpuPower.open()` returns None and a reason, and the worker carries on without telemetry.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc

from powertrip.rpc.channels import open_channel
from powertrip.v1 import profiler_pb2, profiler_pb2_grpc

log = logging.getLogger("site_worker")


@dataclass(frozen=True)
class PowerReading:
    power_w: float  # instantaneous draw, all visible GPUs
    energy_j: float | None  # total energy since driver load (Volta+), None if unsupported


class GpuPower:
    """Sum of power (and energy) over every GPU NVML sees."""

    def __init__(self, nvml, handles):
        self._nvml, self._handles = nvml, handles

    @classmethod
    def open(cls) -> tuple[GpuPower | None, str]:
        """(reader, "") when NVML works and sees a GPU, else (None, why not)."""
        try:
            import pynvml  # provided by nvidia-ml-py
        except ImportError:
            return None, "nvidia-ml-py is not installed"
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            return None, f"NVML unavailable: {exc}"
        if count == 0:
            return None, "NVML sees no GPU"
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        return cls(pynvml, handles), ""

    def read(self) -> PowerReading:
        power_mw = sum(self._nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles)
        try:
            energy_mj = sum(
                self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles
            )
            energy = energy_mj / 1e3
        except Exception:  # pre-Volta GPUs have no energy counter
            energy = None
        return PowerReading(power_mw / 1e3, energy)


def energy_delta(previous: PowerReading | None, current: PowerReading, dt_s: float) -> float:
    """Joules since the last reading: the energy counter when there is one, else P x dt."""
    if previous and previous.energy_j is not None and current.energy_j is not None:
        return max(0.0, current.energy_j - previous.energy_j)
    return max(0.0, current.power_w * dt_s)


class PowerReporter:
    """Every `interval_s`, reports the GPUs' draw and energy as `site_id`'s telemetry."""

    def __init__(
        self,
        reader: GpuPower,
        profiler: str,
        site_id: str,
        worker_id: str,
        interval_s: float = 5.0,
        credentials: grpc.ChannelCredentials | None = None,
    ):
        self.reader, self.site_id, self.worker_id = reader, site_id, worker_id
        self.interval_s = interval_s
        self._channel = open_channel(profiler, credentials)
        self._stub = profiler_pb2_grpc.ProfilerStub(self._channel)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="power", daemon=True)

    def start(self) -> PowerReporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._channel.close()

    def _loop(self) -> None:
        previous = None
        while not self._stop.wait(self.interval_s):
            current = self.reader.read()
            joules = energy_delta(previous, current, self.interval_s)
            previous = current
            try:
                self._stub.ReportTelemetry(
                    profiler_pb2.Telemetry(
                        site_id=self.site_id,
                        worker_id=self.worker_id,
                        power_draw_w=current.power_w,
                        energy_j=joules,
                    ),
                    timeout=10,
                )
            except grpc.RpcError as exc:
                log.warning("power telemetry not delivered: %s", exc.code().name)


def start_power_reporting(
    profiler: str,
    site_id: str,
    worker_id: str,
    credentials: grpc.ChannelCredentials | None = None,
) -> PowerReporter | None:
    """Start reporting when NVML works; otherwise log once why not and return None
    (`credentials`: the worker's mutual TLS, when the profiler serves TLS)."""
    reader, why = GpuPower.open()
    if reader is None:
        log.info("no GPU power telemetry: %s", why)
        return None
    log.info("reporting GPU power for %s from NVML", site_id)
    return PowerReporter(reader, profiler, site_id, worker_id, credentials=credentials).start()
