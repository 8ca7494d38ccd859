"""The site worker's codecarbon meter (`--codecarbon`, the [carbon] extra; issue #60): a
cumulative energy counter over codecarbon's tasks, and what it says measured it."""

from __future__ import annotations

import builtins
import time
from types import SimpleNamespace

import pytest

from services.site_worker.energymeter import CodecarbonMeter
from services.site_worker.telemetry import energy_delta


class _Tracker:
    """A stand-in for codecarbon's tracker with scripted task energies (kWh): the counter's
    arithmetic is checked here; the real tracker is below."""

    def __init__(self, kwh: list[float]):
        self.kwh, self.open = list(kwh), 0

    def start_task(self, name):
        self.open += 1

    def stop_task(self):
        self.open -= 1
        return SimpleNamespace(energy_consumed=self.kwh.pop(0), duration=2.0)


def test_reads_bracket_the_work_between_them():
    meter = CodecarbonMeter(_Tracker([1e-6, 2e-6, 5e-6]), "stub")
    first, second, third = meter.read(), meter.read(), meter.read()
    assert first.energy_j == pytest.approx(3.6)
    assert energy_delta(first, second, 2.0) == pytest.approx(7.2)  # 2e-6 kWh
    assert energy_delta(second, third, 2.0) == pytest.approx(18.0)
    assert third.power_w == pytest.approx(18.0 / 2.0)
    assert meter._tracker.open == 1  # one task always open: the next read closes it


def test_without_codecarbon_the_reason_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_codecarbon(name, *args, **kwargs):
        if name == "codecarbon":
            raise ImportError("no codecarbon")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_codecarbon)
    meter, why = CodecarbonMeter.open()
    assert meter is None and "[carbon]" in why


def test_the_real_tracker_measures_cpu_work_here():
    pytest.importorskip("codecarbon", reason="needs the carbon extra: pip install -e '.[carbon]'")
    meter, why = CodecarbonMeter.open()
    assert meter is not None, why
    try:
        start = meter.read()
        deadline = time.monotonic() + 1.5
        spin = 0
        while time.monotonic() < deadline:  # busy work the tracker can see
            spin += 1
        after = meter.read()
        assert energy_delta(start, after, 1.5) > 0
        assert meter.source.startswith("codecarbon 3.") and "CPU" in meter.source
    finally:
        meter.close()
