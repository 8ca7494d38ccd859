"""What the round loop reads of its dependencies' answers, as plain values.

The profiler's profiles and the policy's selection reach the loop as these types; only
control_client.py converts them from (and back to) the protobuf messages of the wire, so the
loop, the clocks, the accounting and the reports know nothing of the generated messages.
Each value has exactly the values of the message it came from (floats are the same
doubles), so nothing computed from them changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from powertrip.core.profiles import SITE_NUMBER_COLUMNS, site_index

#: Selection.mode values (SelectionMode's names without their prefix, lower case)
FEDERATED = "federated"
CENTRALIZED = "centralized"


@dataclass(frozen=True)
class Shadow:
    """A policy's decision computed beside the real one (decisions.jsonl shows it)."""

    policy: str
    k: int
    predicted_round_time_s: float
    site_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """The policy's answer for one round."""

    policy: str = ""
    site_ids: tuple[str, ...] = ()
    k: int = 0
    predicted_round_time_s: float = 0.0
    explanation: str = ""
    mode: str = FEDERATED  # FEDERATED or CENTRALIZED
    power_cap: float = 0.0  # centralized mode: power fraction of the single site
    shadows: tuple[Shadow, ...] = ()

    @property
    def centralized(self) -> bool:
        """One co-located site trains on the pooled data at a power cap."""
        return self.mode == CENTRALIZED


@dataclass(frozen=True)
class SiteProfile:
    """One site's row of the profiles (an optional column left empty reads as 0)."""

    site_id: str
    power_fraction: float = 0.0
    distance_miles: float = 0.0
    latency_s: float = 0.0
    bandwidth_bytes_per_s: float = 0.0
    measured_latency_s: float = 0.0
    measured_bandwidth_bytes_per_s: float = 0.0
    gpus_available: int = 0
    gpus_effective: int = 0
    alive: bool = False
    power_source: str = ""
    carbon_g_per_kwh: float = 0.0


#: the per-site number columns, in SiteProfile's field order (the core's, as on the wire)
NUMBER_COLUMNS = SITE_NUMBER_COLUMNS


@dataclass(frozen=True, eq=False)
class Profiles:
    """Every site's profile, as columns: `site_id` and one read-only numpy array per number
    column (an optional column no site has a value for is empty). Never changed in place:
    `with_dead` makes a marked copy."""

    site_id: tuple[str, ...]
    power_fraction: np.ndarray
    distance_miles: np.ndarray
    latency_s: np.ndarray
    bandwidth_bytes_per_s: np.ndarray
    measured_latency_s: np.ndarray
    measured_bandwidth_bytes_per_s: np.ndarray
    gpus_available: np.ndarray
    gpus_effective: np.ndarray
    alive: np.ndarray
    carbon_g_per_kwh: np.ndarray
    power_source: str = ""

    def __post_init__(self) -> None:
        for name in NUMBER_COLUMNS:
            getattr(self, name).flags.writeable = False

    def __len__(self) -> int:
        return len(self.site_id)

    def profile(self, row: int) -> SiteProfile:
        """Row `row` as one SiteProfile, its values as Python numbers."""
        fields = {
            name: getattr(self, name)[row].item()
            for name in NUMBER_COLUMNS
            if len(getattr(self, name))
        }
        return SiteProfile(site_id=self.site_id[row], power_source=self.power_source, **fields)

    def rows_of(self, sites: Iterable[str]) -> dict[str, int]:
        """site id -> row for each of `sites` found here, without a map of every row (a
        round selects k of N sites; a map of all N costs N Python steps, tens of
        milliseconds at 100,000 sites, to look up those k): a site id `site-N` is looked for
        at row N first (the profiler lists sites in index order); only when that fails are
        all rows searched, once."""
        ids = self.site_id
        n = len(ids)
        found: dict[str, int] = {}
        missed = []
        for site in sites:
            try:
                row = site_index(site)
            except ValueError:
                row = -1
            if 0 <= row < n and ids[row] == site:
                found[site] = row
            else:
                missed.append(site)
        if missed:
            wanted = set(missed)
            for row, site in enumerate(ids):
                if site in wanted:
                    found[site] = row  # the last row of an id, as a full map would give
        return found

    def selected(self, sites: Iterable[str]) -> dict[str, SiteProfile]:
        """site id -> profile of each of `sites` found here (a round's selected sites), in
        the order of `sites`."""
        sites = list(sites)
        rows = self.rows_of(sites)
        return {site: self.profile(rows[site]) for site in sites if site in rows}

    def with_dead(self, rows) -> Profiles:
        """A copy with the sites at `rows` marked unavailable."""
        alive = self.alive.copy()
        alive[list(rows)] = False
        return replace(self, alive=alive)

    def columns(self) -> dict[str, list]:
        """The number columns as lists of Python numbers (what a message is built from)."""
        return {name: getattr(self, name).tolist() for name in NUMBER_COLUMNS}
