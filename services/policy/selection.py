"""Pure glue between the wire and the policies: build a Context, decide, add shadows.

Nothing here touches gRPC status codes or metrics, so the whole SelectSites path can be
tested (and benchmarked) without a server.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from powertrip.core.policies import (
    SERVICE_PARAMS,
    Context,
    Decision,
    PastRound,
    PolicyError,
    SiteTable,
    get_policy,
    shadow_names,
)
from powertrip.core.policies.objective import for_carbon, idle_ratio
from powertrip.rpc.runsettings import SettingsError, read_settings
from powertrip.rpc.sitecolumns import ColumnsError, columns_from_profiles, num_sites
from services.policy.config import PolicyConfig


@dataclass(frozen=True)
class Shadow:
    """What another policy would have picked for the same context."""

    policy: str
    k: int
    predicted_round_time_s: float
    order: np.ndarray


@dataclass(frozen=True)
class Chosen:
    context: Context
    decision: Decision
    shadows: tuple[Shadow, ...] = ()

    def site_ids(self, order: Iterable[int] | np.ndarray) -> list[str]:
        # numpy's tolist() makes the Python strings in C, far faster than a per-element str()
        return self.context.table.ids[np.asarray(order, dtype=np.int64)].tolist()


def site_table(
    profiles, update_size_bytes: float, directions: int, use_measured: bool
) -> SiteTable:
    """The table from SiteProfile messages: turned into columns first (the one field list
    lives in powertrip/rpc/sitecolumns.py), so both request forms take the same path."""
    profiles = list(profiles)
    if not profiles:
        raise PolicyError("no sites in the request")
    return site_table_from_columns(
        columns_from_profiles(profiles), update_size_bytes, directions, use_measured
    )


def site_table_from_columns(
    columns, update_size_bytes: float, directions: int, use_measured: bool
) -> SiteTable:
    """The same table from a SiteColumns message: a few packed arrays, not one message per
    site, so 10,000 sites cost about a millisecond a column. Empty measured columns mean
    "nothing measured yet"; a column of the wrong length is named in the error."""
    try:
        n = num_sites(columns)
    except ColumnsError as exc:
        raise PolicyError(str(exc)) from None
    if n == 0:
        raise PolicyError("no sites in the request")

    def column(name: str) -> np.ndarray:
        # slicing copies the packed values into a list in C, faster than np.fromiter
        # over the container
        return np.array(getattr(columns, name)[:], dtype=np.float64)

    measured = None
    if use_measured and len(columns.measured_latency_s):
        measured = (column("measured_latency_s"), column("measured_bandwidth_bytes_per_s"))
    return _table(
        columns.site_id[:],
        column("power_fraction"), column("distance_miles"), column("latency_s"),
        column("bandwidth_bytes_per_s"), np.array(columns.alive[:], dtype=bool),
        measured, update_size_bytes, directions,
        column("carbon_g_per_kwh") if len(columns.carbon_g_per_kwh) else None,
    )  # fmt: skip


def _table(
    ids, power, distance, latency, bandwidth, alive, measured, update_size_bytes, directions,
    carbon=None,
) -> SiteTable:  # fmt: skip
    if measured is not None:
        m_lat, m_bw = measured
        latency = np.where(m_lat > 0, m_lat, latency)
        bandwidth = np.where(m_bw > 0, m_bw, bandwidth)
    return SiteTable.build(
        ids=ids,
        power=power,
        distance_miles=distance,
        latency_s=latency,
        bandwidth_bytes_per_s=bandwidth,
        update_size_bytes=update_size_bytes,
        directions=directions or 2,
        alive=alive,
        carbon_g_per_kwh=carbon,
    )


def split_params(params: Mapping[str, float], config: PolicyConfig) -> tuple[dict, bool]:
    """(policy parameters, use_measured) from the request's parameter map."""
    policy_params = {k: float(v) for k, v in params.items() if k not in SERVICE_PARAMS}
    use_measured = config.use_measured
    if "use_measured" in params:
        value = params["use_measured"]
        if value not in (0.0, 1.0):
            raise PolicyError(f"use_measured must be 0 or 1, got {value:g}")
        use_measured = bool(value)
    return policy_params, use_measured


def run_settings(request, config: PolicyConfig) -> dict[str, Any]:
    """The run's settings in a SelectSitesRequest (its RunSettings), checked; a request
    that names no estimator gets this service's (`PolicyConfig.estimator`)."""
    try:
        run = read_settings(request.settings, "policy", {"estimator": config.estimator})
    except SettingsError as exc:
        raise PolicyError(str(exc)) from None
    if run["tau_s"] is None:
        raise PolicyError("settings: tau_s: must be given (the run's resolved tau_s)")
    return run


def build_context(request, config: PolicyConfig, run: Mapping[str, Any] | None = None) -> Context:
    """A Context from a SelectSitesRequest (and its settings, `run_settings`); bad fields
    raise PolicyError naming them."""
    run = run_settings(request, config) if run is None else run
    if not math.isfinite(request.update_size_bytes) or request.update_size_bytes < 0:
        raise PolicyError(f"update_size_bytes must be >= 0, got {request.update_size_bytes:g}")
    comm_directions = run["comm_directions"]
    params, use_measured = split_params(request.params, config)
    for h in request.history:
        lengths = {len(h.reported_site_ids), len(h.site_train_loss), len(h.site_num_samples),
                   len(h.site_duration_s)}  # fmt: skip
        if len(lengths) > 1:
            raise PolicyError(
                f"history round {h.round}: reported_site_ids, site_train_loss, "
                "site_num_samples and site_duration_s must have one value per reported site"
            )
    if request.HasField("site_columns"):
        if len(request.sites):
            raise PolicyError("give the sites as sites or as site_columns, not both")
        table = site_table_from_columns(
            request.site_columns, request.update_size_bytes, comm_directions, use_measured
        )
    else:
        table = site_table(request.sites, request.update_size_bytes, comm_directions, use_measured)
    return Context(
        table=table,
        update_size_bytes=request.update_size_bytes,
        tau_s=run["tau_s"],
        history=tuple(
            PastRound(
                h.round,
                h.k,
                h.accuracy,
                h.round_time_s,
                tuple(h.site_ids),
                tuple(h.reported_site_ids),
                tuple(h.site_train_loss),
                tuple(h.site_num_samples),
                tuple(h.site_duration_s),
            )  # fmt: skip
            for h in request.history
        ),
        # no target (null): never stop on accuracy
        target_accuracy=run["target_accuracy"] or math.inf,
        seed=run["seed"],
        round=request.round,
        estimator=run["estimator"],
        params=params,
        work_model=run["work_model"],
    )


def decide(name: str, ctx: Context) -> Decision:
    return get_policy(name).select(ctx)


def shadows(chosen: str, ctx: Context) -> tuple[Shadow, ...]:
    """What every other policy would pick now, with its default parameters.

    The table (and so comm_s) is shared, so each shadow costs one ranking: milliseconds
    even at 10,000 sites.
    """
    plain = dataclasses.replace(ctx, params={})
    out = []
    for name in shadow_names(chosen):
        policy = get_policy(name)
        if not policy.applies_to(plain.table):  # e.g. lowcarb without carbon intensities
            continue
        decision = policy.select(plain)
        out.append(Shadow(name, decision.k, decision.predicted_round_time_s, decision.order))
    return tuple(out)


def select(request, config: PolicyConfig) -> Chosen:
    """The whole SelectSites decision, minus the wire format."""
    policy = get_policy(request.policy)  # an unknown name fails before any work
    run = run_settings(request, config)
    ctx = build_context(request, config, run)
    decision = policy.select(ctx)
    if run["objective"] == "carbon":  # the shadows stay the time objective's
        idle = idle_ratio(run["gpu_power_w"], run["gpu_idle_power_w"])
        decision = for_carbon(ctx, decision, run["carbon_slack"], idle)
    return Chosen(ctx, decision, shadows(request.policy, ctx) if run["shadow"] else ())
