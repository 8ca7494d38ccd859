"""Measured energy of a site's training from codecarbon (the `[carbon]` extra).

`--codecarbon` wraps the worker's training in codecarbon's offline tracker:
RAPL for the CPU where the kernel exposes it (/sys/class/powercap), NVML for NVIDIA GPUs,
and codecarbon's own estimate otherwise (CPU load x the model's TDP, RAM by its size). Each
delta then carries the joules its local steps drew (DeltaHeader.energy_j), which replace the
modelled GPU watts in the run's accounting on the wall clock, as NVML's do; `source` says
which of codecarbon's methods measured them, and the run's summary and report repeat it.

The meter reads as `telemetry.GpuPower` does (`read()` -> a cumulative energy counter), so
the worker's training loop takes either: each read closes one codecarbon task (its
`start_task`/`stop_task`, the public interval API) and opens the next, so consecutive reads
bracket the training in between. No file is written and nothing is sent anywhere (the
offline tracker, no output methods).
"""

from __future__ import annotations

import logging
import threading
from importlib import metadata

from services.site_worker.telemetry import PowerReading

log = logging.getLogger("site_worker")
#: the country whose grid codecarbon's own carbon figure would use (never read here: the
#: run charges each site's grid itself); any valid ISO code keeps the tracker offline
COUNTRY = "USA"


class CodecarbonMeter:
    """A cumulative energy counter over codecarbon tasks."""

    def __init__(self, tracker, source: str):
        self._tracker, self.source = tracker, source
        self._total_j = 0.0
        self._lock = threading.Lock()
        self._tracker.start_task("powertrip-train")

    @classmethod
    def open(cls) -> tuple[CodecarbonMeter | None, str]:
        """(meter, "") when codecarbon is installed and starts, else (None, why not)."""
        try:
            from codecarbon import OfflineEmissionsTracker
        except ImportError:
            return None, "codecarbon is not installed (pip install -e '.[carbon]')"
        try:
            tracker = OfflineEmissionsTracker(
                country_iso_code=COUNTRY, output_methods=[], log_level="error",
                tracking_mode="process", measure_power_secs=1,
            )  # fmt: skip
            return cls(tracker, describe(tracker)), ""
        except Exception as exc:  # codecarbon raises its own types for hardware it cannot read
            return None, f"codecarbon could not start: {exc}"

    def read(self) -> PowerReading:
        """The joules measured since the meter opened (power_w: the last interval's mean)."""
        with self._lock:
            data = self._tracker.stop_task()
            self._tracker.start_task("powertrip-train")
            joules = float(data.energy_consumed) * 3.6e6  # kWh
            self._total_j += joules
            power = joules / data.duration if data.duration > 0 else 0.0
            return PowerReading(power, self._total_j)

    def close(self) -> None:
        try:
            self._tracker.stop_task()
            self._tracker.stop()
        except Exception:  # stopping twice, or a tracker that never measured: nothing to keep
            log.debug("codecarbon tracker stopped with an error", exc_info=True)


def describe(tracker) -> str:
    """Which of codecarbon's methods measure this machine, in words: the report's source."""
    hardware = tracker.get_detected_hardware()
    parts = [f"codecarbon {metadata.version('codecarbon')}"]
    for device in getattr(tracker, "_hardware", []):  # codecarbon's own objects, by class
        kind = type(device).__name__
        mode = getattr(device, "_mode", None)
        if kind == "CPU":
            how = {"intel_rapl": "RAPL", "intel_power_gadget": "Intel Power Gadget"}.get(
                mode, f"estimate ({mode}, TDP {getattr(device, '_tdp', '?')} W)"
            )
            parts.append(f"CPU {hardware.get('cpu_model', '?')}: {how}")
        elif kind == "GPU":
            parts.append(f"{hardware.get('gpu_count', 0)} GPU(s): NVML")
        elif kind == "RAM":
            parts.append("RAM: estimate by size")
    return "; ".join(parts)


def open_codecarbon() -> CodecarbonMeter | None:
    """The meter of `--codecarbon`, or None with the reason logged (training goes on, and
    the run charges the modelled watts)."""
    meter, why = CodecarbonMeter.open()
    if meter is None:
        log.warning("no measured energy: %s; the run charges the modelled watts", why)
    else:
        log.info("energy measured by %s", meter.source)
    return meter
