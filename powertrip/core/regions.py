"""The Google Cloud regions as sites: where each is and how dirty its grid is.

The catalog is `data/regions/regions.csv`, built offline by `data/regions/build.py` from
codecarbon's region intensities and GeoNames coordinates (data/regions/README.md). This
module only reads it and measures distances, so it is pure stdlib and numpy: no torch, no
gRPC, and anything (a CLI, a test, a notebook) can load it cheaply.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from powertrip.core.datapaths import shipped_data_dir

#: the catalog PowerTrip carries (data/regions/regions.csv; powertrip/core/datapaths.py)
DEFAULT_REGIONS_CSV = shipped_data_dir() / "regions" / "regions.csv"

#: mean Earth radius (IUGG R1 = 6371.0088 km) in statute miles, the unit of the link model
EARTH_RADIUS_MILES = 3958.8

#: the columns load_regions needs; the file's others (provenance) are ignored
REQUIRED_COLUMNS = ("region", "city", "country_code", "latitude", "longitude", "g_co2_per_kwh")


@dataclass(frozen=True)
class Region:
    """One cloud region as a site: its name, place and annual grid carbon intensity."""

    name: str
    city: str
    country_code: str
    latitude: float
    longitude: float
    g_co2_per_kwh: float


@functools.cache
def catalog() -> tuple[Region, ...]:
    """The repository's catalog (DEFAULT_REGIONS_CSV), read once per process: every service
    that builds a "regions" population reads the same file."""
    return load_regions(DEFAULT_REGIONS_CSV)


def load_regions(path: Path | None = None) -> tuple[Region, ...]:
    """Every region in the catalog CSV, in file order.

    A bad row raises ValueError naming the file, the line and the column, so a hand-edited
    catalog fails where it is wrong instead of as a NaN distance later.
    """
    path = DEFAULT_REGIONS_CSV if path is None else Path(path)
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}, line 1: missing column(s) {', '.join(missing)}")
        regions: list[Region] = []
        seen: dict[str, int] = {}
        for row in reader:
            line = reader.line_num
            if None in row or any(row[c] is None for c in REQUIRED_COLUMNS):
                raise ValueError(
                    f"{path}, line {line}: expected {len(reader.fieldnames or ())} fields"
                )
            name = row["region"].strip()
            if not name:
                raise ValueError(f"{path}, line {line}, column region: empty")
            if name in seen:
                raise ValueError(
                    f"{path}, line {line}, column region: {name!r} repeats line {seen[name]}"
                )
            seen[name] = line
            regions.append(
                Region(
                    name=name,
                    city=row["city"].strip(),
                    country_code=row["country_code"].strip(),
                    latitude=_number(row, "latitude", path, line, -90.0, 90.0),
                    longitude=_number(row, "longitude", path, line, -180.0, 180.0),
                    g_co2_per_kwh=_number(row, "g_co2_per_kwh", path, line, 0.0, math.inf),
                )
            )
    return tuple(regions)


def _number(row: dict[str, str], column: str, path: Path, line: int, lo: float, hi: float) -> float:
    text = row[column].strip()
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"{path}, line {line}, column {column}: {text!r} is not a number"
        ) from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ValueError(f"{path}, line {line}, column {column}: {value} is not in [{lo}, {hi}]")
    return value


def great_circle_miles(
    lat1: ArrayLike, lon1: ArrayLike, lat2: ArrayLike, lon2: ArrayLike
) -> np.ndarray:
    """Haversine distance in miles between points given in degrees; broadcasts over arrays.

    A sphere of the mean Earth radius is enough: against the WGS84 ellipsoid it errs by at
    most about 0.5 %, far below the uncertainty of the link model that turns miles into
    bandwidth and latency (and fibre routes are longer than great circles anyway).
    Haversine rather than the spherical law of cosines keeps short distances accurate.
    """
    p1, l1, p2, l2 = (np.radians(np.asarray(x, dtype=float)) for x in (lat1, lon1, lat2, lon2))
    a = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin((l2 - l1) / 2) ** 2
    return 2 * EARTH_RADIUS_MILES * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def _coordinates(regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray]:
    lat = np.array([r.latitude for r in regions], dtype=float)
    lon = np.array([r.longitude for r in regions], dtype=float)
    return lat, lon


def distances_from(regions: Sequence[Region], aggregator: str) -> np.ndarray:
    """Miles from the region named `aggregator` to each region, in `regions`' order.

    These are the D_i of the paper's time model when the aggregator sits in a region.
    """
    names = [r.name for r in regions]
    if aggregator not in names:
        raise ValueError(f"unknown region {aggregator!r}; allowed: {', '.join(names)}")
    hub = regions[names.index(aggregator)]
    lat, lon = _coordinates(regions)
    return great_circle_miles(hub.latitude, hub.longitude, lat, lon)


def mean_distances(regions: Sequence[Region]) -> np.ndarray:
    """Each region's mean great-circle distance in miles to all the others."""
    if len(regions) < 2:
        raise ValueError("need at least two regions to compare distances")
    lat, lon = _coordinates(regions)
    pairwise = great_circle_miles(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    return pairwise.sum(axis=1) / (len(regions) - 1)


def most_central(regions: Sequence[Region]) -> str:
    """The region with the smallest mean distance to all others: the aggregator's default
    candidate, since it keeps the typical site's link short. Ties go to the earlier one."""
    return regions[int(np.argmin(mean_distances(regions)))].name
