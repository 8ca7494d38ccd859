"""Trace-driven power availability from Google PowerData 2019 (paper §2.1, §5.3).

Spare power of a power domain is 1 - measured_power_util. Each site is given a domain and
a seeded time offset into the month, so 100 sites see 100 different but real histories;
simulated time maps onto trace time, interpolated linearly between the 5-minute samples
and wrapping around at the end of the trace. Effective GPUs follow paper Eq. 6.
"""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from powertrip.timemodel import effective_gpus

SAMPLE_PERIOD_S = 300.0
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "data" / "google-power" / "pdu_5min.csv.gz"


class TraceError(ValueError):
    """The trace file is missing or malformed; the message names the file and the row."""


@dataclass(frozen=True)
class DomainTrace:
    name: str
    utilisation: np.ndarray  # measured_power_util per 5-minute step, in [0, 1]

    def spare_at(self, t_s: float) -> float:
        """1 - utilisation at trace time t (seconds), linear between samples, wrapping."""
        n = len(self.utilisation)
        position = (t_s / SAMPLE_PERIOD_S) % n
        i = int(np.floor(position))
        frac = position - i
        u = (1 - frac) * self.utilisation[i] + frac * self.utilisation[(i + 1) % n]
        return float(1.0 - u)


def load_domains(path: str | Path = DEFAULT_TRACE) -> list[DomainTrace]:
    """Read a PowerData long table (columns step, pdu, measured_power_util), gzip or plain."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"power trace not found: {path} (see data/google-power/README.md)")
    opener = gzip.open if path.suffix == ".gz" else open
    series: dict[str, dict[int, float]] = {}
    try:
        with opener(path, "rt", newline="") as f:
            reader = csv.DictReader(f)
            missing = {"step", "pdu", "measured_power_util"} - set(reader.fieldnames or [])
            if missing:
                raise TraceError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
            for line, row in enumerate(reader, start=2):
                try:
                    step, util = int(row["step"]), float(row["measured_power_util"])
                except ValueError:
                    raise TraceError(f"{path}, line {line}: not a number") from None
                if not 0.0 <= util <= 1.0:
                    raise TraceError(
                        f"{path}, line {line}: measured_power_util {util} outside [0, 1]"
                    )
                series.setdefault(row["pdu"], {})[step] = util
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(f"{path}: unreadable or truncated ({exc})") from None
    domains = []
    for name in sorted(series, key=lambda n: (len(n), n)):
        steps = series[name]
        expected = range(min(steps), max(steps) + 1)
        if len(steps) != len(expected):
            raise TraceError(f"{path}: domain {name} has gaps in its steps")
        domains.append(DomainTrace(name, np.array([steps[s] for s in expected])))
    if not domains:
        raise TraceError(f"{path}: no rows")
    return domains


@dataclass(frozen=True)
class SitePowerTrace:
    """One site's view of a domain: its offset into the trace and its GPU inventory."""

    domain: DomainTrace
    offset_s: float
    gpus_available: int
    gpus_max: int

    def effective_gpus_at(self, sim_time_s: float) -> int:
        # capacity is sized so that all gpus_max GPUs fit at 100 % spare power (P_gpu = 1)
        spare_w = self.domain.spare_at(self.offset_s + sim_time_s) * self.gpus_max
        return effective_gpus(self.gpus_available, spare_w, 1.0)

    def power_fraction_at(self, sim_time_s: float) -> float:
        return max(self.effective_gpus_at(sim_time_s), 1) / self.gpus_max


def assign_traces(
    domains: list[DomainTrace], num_sites: int, seed: int, gpus_per_site: int
) -> list[SitePowerTrace]:
    """Seeded domain and offset per site (offsets uniform over the whole trace)."""
    rng = np.random.default_rng([seed, 0x70EE])
    span = len(domains[0].utilisation) * SAMPLE_PERIOD_S
    picks = rng.integers(0, len(domains), num_sites)
    offsets = rng.uniform(0, span, num_sites)
    return [
        SitePowerTrace(domains[int(d)], float(o), gpus_per_site, gpus_per_site)
        for d, o in zip(picks, offsets, strict=True)
    ]
