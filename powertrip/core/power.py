"""Trace-driven power availability from Google PowerData 2019 (paper §2.1, §5.3).

What the paper uses and what we have. The paper's spare power is 1 - *production* power
utilisation per *cell* (a site = a cell of ~10,000 machines, §2.1). Google's traces have,
per power domain (PDU) and 5-minute window, `measured_power_util` (total measured power /
the domain's capacity, including the floor's cooling) and `production_power_util` (a
separate column), for 57 domains in 10 cells. The copy shipped in data/google-power/ holds
ONLY `measured_power_util`, and ONLY cell `a`'s 5 PDUs (pdu6-pdu10); there is no production
utilisation and no other cell (data/google-power/README.md). So here:

* spare power of a domain = 1 - measured_power_util (a stand-in for 1 - production util);
* the domains a run replays are the 5 PDUs of cell a (the default mapping), not 10 cells;
  each domain carries its cell and PDU (`DomainTrace.cell`, `.name`), and `trace_sites`
  gives the per-site view the paper plots: one site per cell where the file has several
  cells, the PDUs of the one cell, labelled "cell a / pdu6", otherwise.

Each site is given a domain and a seeded time offset into the month, so 100 sites see 100
different but real histories; simulated time maps onto trace time, interpolated linearly
between the 5-minute samples and wrapping around at the end of the trace.

Effective GPUs follow paper Eq. 6 in watts: a site's capacity is P_cap = N_max x P_gpu
(N_max = `gpus_per_site`, P_gpu = `gpu_power_w`, 250 W: the paper's GTX 1080 Ti), its spare
power P_spare(t) = spare(t) x P_cap, and N_eff(t) = min(N_avail, floor(P_spare(t) / P_gpu)).
Its power fraction is max(N_eff, 1) / N_max, as before watts. For N_max a power of two and
P_gpu a whole number of watts (every stored run: 32 GPUs, 250 W), floor((s x N_max x P_gpu) /
P_gpu) in floating point equals floor(s x N_max), the GPU count of the unit-power model runs
were made with, bit for bit: s x N_max and n x P_gpu are exact, and the rounding of the
product and the quotient cannot carry a value below an integer up to it
(tests/unit/test_power_traces.py checks it).
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from powertrip.core.datapaths import shipped_data_dir
from powertrip.core.footprint import GPU_POWER_W
from powertrip.core.timemodel import effective_gpus

SAMPLE_PERIOD_S = 300.0
DEFAULT_TRACE = shipped_data_dir() / "google-power" / "pdu_5min.csv.gz"


class TraceError(ValueError):
    """The trace file is missing or malformed; the message names the file and the row."""


@dataclass(frozen=True)
class DomainTrace:
    name: str  # the PDU (power domain), e.g. "pdu6"
    utilisation: np.ndarray  # measured_power_util per 5-minute step, in [0, 1]
    cell: str = ""  # its cell ("a"), where the file has a `cell` column

    @property
    def label(self) -> str:
        return f"cell {self.cell} / {self.name}" if self.cell else self.name

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
    cells: dict[str, str] = {}
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
                cells.setdefault(row["pdu"], row.get("cell") or "")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(f"{path}: unreadable or truncated ({exc})") from None
    domains = []
    for name in sorted(series, key=lambda n: (len(n), n)):
        steps = series[name]
        expected = range(min(steps), max(steps) + 1)
        if len(steps) != len(expected):
            raise TraceError(f"{path}: domain {name} has gaps in its steps")
        domains.append(DomainTrace(name, np.array([steps[s] for s in expected]), cells[name]))
    if not domains:
        raise TraceError(f"{path}: no rows")
    return domains


@dataclass(frozen=True)
class TraceSite:
    """One bar of the paper's Fig. 2: a cell (the mean of its PDUs' utilisation at each
    step, equal capacities assumed, as data/google-power/cell_5min.csv.gz) or one PDU."""

    label: str
    level: str  # "cell" or "pdu"
    utilisation: np.ndarray


def trace_sites(domains: list[DomainTrace]) -> list[TraceSite]:
    """The paper's sites in the trace: one per cell where the domains span several cells;
    with one cell (the shipped data: cell a), its PDUs, each labelled with cell and PDU."""
    by_cell: dict[str, list[DomainTrace]] = {}
    for d in domains:
        by_cell.setdefault(d.cell, []).append(d)
    if len(by_cell) > 1:
        return [
            TraceSite(
                f"cell {cell}" if cell else "(no cell)",
                "cell",
                np.mean([d.utilisation for d in members], axis=0),
            )
            for cell, members in sorted(by_cell.items())
        ]
    return [TraceSite(d.label, "pdu", d.utilisation) for d in domains]


@dataclass(frozen=True)
class SitePowerTrace:
    """One site's view of a domain: its offset into the trace, its GPU inventory and its
    power capacity in watts (module docstring)."""

    domain: DomainTrace
    offset_s: float
    gpus_available: int  # N_avail: the GPUs physically there
    gpus_max: int  # N_max: the GPUs the capacity is sized for
    gpu_power_w: float = GPU_POWER_W  # P_gpu

    @property
    def capacity_w(self) -> float:
        """P_cap = N_max x P_gpu: all N_max GPUs fit at 100 % spare power."""
        return self.gpus_max * self.gpu_power_w

    def spare_power_w_at(self, sim_time_s: float) -> float:
        """P_spare(t) = (1 - utilisation(t)) x P_cap, in watts."""
        return self.domain.spare_at(self.offset_s + sim_time_s) * self.capacity_w

    def effective_gpus_at(self, sim_time_s: float) -> int:
        """Eq. 6: min(N_avail, floor(P_spare(t) / P_gpu))."""
        return effective_gpus(
            self.gpus_available, self.spare_power_w_at(sim_time_s), self.gpu_power_w
        )

    def power_fraction_at(self, sim_time_s: float) -> float:
        return max(self.effective_gpus_at(sim_time_s), 1) / self.gpus_max


def assign_traces(
    domains: list[DomainTrace],
    num_sites: int,
    seed: int,
    gpus_per_site: int,
    gpus_available: Sequence[int] | None = None,
    gpu_power_w: float = GPU_POWER_W,
) -> list[SitePowerTrace]:
    """Seeded domain and offset per site (offsets uniform over the whole trace); N_avail per
    site from `gpus_available` (the population's; None: gpus_per_site each)."""
    rng = np.random.default_rng([seed, 0x70EE])
    span = len(domains[0].utilisation) * SAMPLE_PERIOD_S
    picks = rng.integers(0, len(domains), num_sites)
    offsets = rng.uniform(0, span, num_sites)
    available = [gpus_per_site] * num_sites if gpus_available is None else list(gpus_available)
    if len(available) != num_sites:
        raise ValueError(f"gpus_available has {len(available)} values for {num_sites} sites")
    return [
        SitePowerTrace(domains[int(d)], float(o), int(n), gpus_per_site, gpu_power_w)
        for d, o, n in zip(picks, offsets, available, strict=True)
    ]
