"""`SiteColumns`, the bulk form of `repeated SiteProfile`, and the conversions between them.

Why columns: a service that reads 10,000 `SiteProfile` messages pays for every field of
every message in Python; the same sites as packed columns parse an order of magnitude
faster and turn into numpy arrays column by column (figures in docs/benchmarks.md at
291b5ac2). The profiler answers in columns when asked (`GetProfilesRequest.columnar`), the
aggregator keeps them, and the policy scores them (`SelectSitesRequest.site_columns`).
"""

from __future__ import annotations

from collections.abc import Iterable

from powertrip.core.profiles import SITE_NUMBER_COLUMNS
from powertrip.v1 import common_pb2

#: per-site columns of SiteColumns, in SiteProfile's field order
NUMBER_COLUMNS = SITE_NUMBER_COLUMNS
#: columns a producer may leave empty: no site measured yet, GPU counts unknown, no per-site
#: carbon intensities (a synthetic population)
OPTIONAL_COLUMNS = frozenset(
    {
        "measured_latency_s",
        "measured_bandwidth_bytes_per_s",
        "gpus_available",
        "gpus_effective",
        "carbon_g_per_kwh",
    }
)


class ColumnsError(ValueError):
    """Columns of different lengths; the message names the column."""


def num_sites(columns: common_pb2.SiteColumns) -> int:
    """Rows in `columns`, after checking every column has one value per site_id.

    Optional columns may be empty instead; `alive` may not, since an empty one would read as
    "every site dead"."""
    n = len(columns.site_id)
    for name in NUMBER_COLUMNS:
        got = len(getattr(columns, name))
        if got != n and not (got == 0 and name in OPTIONAL_COLUMNS):
            raise ColumnsError(
                f"site_columns.{name} has {got} values for {n} site_id values"
                + (" (or leave it empty)" if name in OPTIONAL_COLUMNS else "")
            )
    return n


def columns_from_profiles(profiles: Iterable[common_pb2.SiteProfile]) -> common_pb2.SiteColumns:
    """The same sites as columns (power_source from the first profile)."""
    profiles = list(profiles)
    columns = common_pb2.SiteColumns(
        site_id=[p.site_id for p in profiles],
        power_source=profiles[0].power_source if profiles else "",
    )
    for name in NUMBER_COLUMNS:
        values = [getattr(p, name) for p in profiles]
        if name == "carbon_g_per_kwh" and not any(values):
            continue  # 0 on every profile: the profiler had no intensities (proto comment)
        getattr(columns, name).extend(values)
    return columns


def profile_at(columns: common_pb2.SiteColumns, row: int) -> common_pb2.SiteProfile:
    """Row `row` of `columns` as one SiteProfile (empty optional columns read as 0)."""
    fields = {
        name: getattr(columns, name)[row] for name in NUMBER_COLUMNS if len(getattr(columns, name))
    }
    return common_pb2.SiteProfile(
        site_id=columns.site_id[row], power_source=columns.power_source, **fields
    )


def profiles_from_columns(columns: common_pb2.SiteColumns) -> list[common_pb2.SiteProfile]:
    return [profile_at(columns, row) for row in range(num_sites(columns))]


def row_of(columns: common_pb2.SiteColumns) -> dict[str, int]:
    """site_id -> row, for looking up the few sites a round selected."""
    return {site: row for row, site in enumerate(columns.site_id)}
